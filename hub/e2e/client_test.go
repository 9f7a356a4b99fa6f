package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ---- prompts ----

// The mock's tokeniser (docs/mock-engine.md "The model", step 3): a chat
// prompt is rendered as "role:content\n" and cut into blocks of
// blockBytes; a full block is blockTokens tokens, the tail counts
// ceil(bytes / charsPerToken).
const (
	charsPerToken = 4
	blockTokens   = 16
	blockBytes    = blockTokens * charsPerToken
)

// tokensOf is the mock's prompt_tokens for one user message.
func tokensOf(content string) int {
	n := len("user:") + len(content) + len("\n")
	tokens := n/blockBytes*blockTokens + (n%blockBytes+charsPerToken-1)/charsPerToken
	return max(tokens, 1)
}

var promptSeq atomic.Uint64

// promptOf returns a user message the mock counts as exactly tokens prompt
// tokens and that starts with a tag unique in this process, so two prompts
// never share a cached prefix block.
func promptOf(tokens int) string {
	n := tokens*charsPerToken - len("user:") - len("\n")
	tag := "p" + strconv.FormatUint(promptSeq.Add(1), 10) + ":"
	if n < len(tag) {
		panic(fmt.Sprintf("promptOf(%d): too short for a unique tag", tokens))
	}
	var b strings.Builder
	b.WriteString(tag)
	for b.Len() < n {
		b.WriteString(" lorem")
	}
	return b.String()[:n]
}

// ---- requests through the hub ----

var requestSeq atomic.Uint64

// chat is one streaming chat request sent through the hub.
type chat struct {
	Model   string // default: model
	Content string
	// InputTokens is x-input-tokens: 0 sends the mock's own count of
	// Content, a negative value leaves the header out.
	InputTokens int
	// OutputTokens is x-output-tokens; 0 leaves it out.
	OutputTokens int
	IncludeUsage bool
	// Header is added to the request, each key replacing what send set.
	Header http.Header
	// Anonymous leaves out the gateway token every other request bears.
	Anonymous bool
	// Timeout bounds the whole exchange; 0 means 30 s.
	Timeout time.Duration
}

// send posts c to the hub's /v1/chat/completions. The caller closes the
// body.
func (h *hubProc) send(ctx context.Context, cl *http.Client, c chat) (*http.Response, error) {
	m := cmpOr(c.Model, model)
	body := map[string]any{"model": m, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": c.Content}}}
	if c.IncludeUsage {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-request-id", "e2e-"+strconv.FormatUint(requestSeq.Add(1), 10))
	req.Header.Set("x-model", m)
	switch {
	case c.InputTokens == 0:
		req.Header.Set("x-input-tokens", strconv.Itoa(tokensOf(c.Content)))
	case c.InputTokens > 0:
		req.Header.Set("x-input-tokens", strconv.Itoa(c.InputTokens))
	}
	if c.OutputTokens > 0 {
		req.Header.Set("x-output-tokens", strconv.Itoa(c.OutputTokens))
	}
	if !c.Anonymous {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	for k, vs := range c.Header {
		req.Header[http.CanonicalHeaderKey(k)] = slices.Clone(vs)
	}
	return cl.Do(req)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// usage is the final usage chunk of a stream.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// streamResult is what a client saw of one request.
type streamResult struct {
	Status  int
	Header  http.Header
	Body    string // the body of a non-200 answer
	Events  int    // SSE data events before [DONE]
	Content int    // events with non-empty delta content (one per token)
	Done    bool   // "data: [DONE]" arrived
	TTFT    time.Duration
	Usage   *usage
	Err     error // transport or body read error
	Start   time.Time
	End     time.Time
}

func (r streamResult) String() string {
	return fmt.Sprintf("status=%d server=%q events=%d content=%d done=%v ttft=%v err=%v body=%q",
		r.Status, r.Header.Get("x-inference-server-id"), r.Events, r.Content, r.Done, r.TTFT, r.Err, r.Body)
}

// ok reports a 200 that streamed want content tokens and ended with [DONE].
func (r streamResult) ok(want int) bool {
	return r.Err == nil && r.Status == http.StatusOK && r.Done && r.Content == want
}

// stream sends c and reads the whole answer.
func (h *hubProc) stream(ctx context.Context, cl *http.Client, c chat) streamResult {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := streamResult{Start: time.Now()}
	resp, err := h.send(ctx, cl, c)
	if err != nil {
		res.Err, res.End = err, time.Now()
		return res
	}
	defer func() { _ = resp.Body.Close() }()
	readStream(resp, &res)
	res.End = time.Now()
	return res
}

// sseEvent is the part of a chat chunk the tests read.
type sseEvent struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// readStream reads resp's SSE body into res; TTFT is measured from
// res.Start to the first event with content.
func readStream(resp *http.Response, res *streamResult) {
	res.Status, res.Header = resp.StatusCode, resp.Header
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		res.Body, res.Err = string(b), err
		return
	}
	sr := newSSEReader(resp.Body)
	for {
		data, err := sr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.Err = err
			}
			return
		}
		if data == "[DONE]" {
			res.Done = true
			continue
		}
		res.Events++
		var ev sseEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			res.Err = fmt.Errorf("event %d is not JSON: %w: %q", res.Events, err, data)
			return
		}
		if ev.Usage != nil {
			res.Usage = ev.Usage
		}
		for _, ch := range ev.Choices {
			if ch.Delta.Content != "" {
				if res.Content == 0 {
					res.TTFT = time.Since(res.Start)
				}
				res.Content++
				break
			}
		}
	}
}

// sseReader returns the data of each SSE event.
type sseReader struct{ r *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{bufio.NewReaderSize(r, 64<<10)} }

func (s *sseReader) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok && strings.HasSuffix(line, "\n") {
			return data, nil
		}
		if err != nil {
			return "", err
		}
	}
}

// ---- hub state ----

// modelStats is the part of protocol.ModelStats the tests read.
type modelStats struct {
	LastMeanInputTPS        float64  `json:"last_mean_input_tps"`
	OutputTPS               float64  `json:"output_tps"`
	QueueSize               uint64   `json:"queue_size"`
	QueuedInputSize         uint64   `json:"queued_input_size"`
	MaxOutputTPS            float64  `json:"max_output_tps"`
	KVCacheCapacityTokens   uint64   `json:"kv_cache_capacity_tokens"`
	KVCacheUsedTokens       uint64   `json:"kv_cache_used_tokens"`
	NumRunningQueries       uint64   `json:"num_running_queries"`
	TotalQueryInputSize     uint64   `json:"total_query_input_size"`
	InputProcessingQueries  uint64   `json:"input_processing_queries"`
	OutputGenerationQueries uint64   `json:"output_generation_queries"`
	StatsCapabilities       []string `json:"stats_capabilities"`
	StatsSources            []string `json:"stats_sources"`
}

func (s modelStats) String() string {
	return fmt.Sprintf("{in_tps=%.1f out_tps=%.1f max_out_tps=%.1f queue=%d queued_in=%d running=%d total_in=%d in_proc=%d out_gen=%d kv=%d/%d sources=%v}",
		s.LastMeanInputTPS, s.OutputTPS, s.MaxOutputTPS, s.QueueSize, s.QueuedInputSize, s.NumRunningQueries,
		s.TotalQueryInputSize, s.InputProcessingQueries, s.OutputGenerationQueries, s.KVCacheUsedTokens,
		s.KVCacheCapacityTokens, s.StatsSources)
}

type debugMember struct {
	ID       string     `json:"id"`
	RTTNanos int64      `json:"rtt_ns"`
	Stats    modelStats `json:"stats"`
}

type debugCluster struct {
	ClusterID      string        `json:"cluster_id"`
	StatsSource    string        `json:"stats_source_backend_id"`
	ActiveBackends int           `json:"active_backends"`
	RTTNanos       int64         `json:"rtt_ns"`
	Stats          modelStats    `json:"stats"`
	Base           modelStats    `json:"stats_without_reservations"`
	Backends       []debugMember `json:"backends"`
}

type debugState struct {
	Sessions []struct {
		ID        string `json:"inference_server_id"`
		ClusterID string `json:"cluster_id"`
		LastRTT   int64  `json:"last_rtt_ns"`
		RTTKnown  bool   `json:"rtt_known"`
	} `json:"sessions"`
	Routing struct {
		Targets []struct {
			RoutingKey string         `json:"routing_key"`
			Model      string         `json:"model"`
			Clusters   []debugCluster `json:"clusters"`
		} `json:"targets"`
	} `json:"routing"`
}

// cluster returns the unscoped target's cluster for model.
func (d *debugState) cluster(m, clusterID string) (debugCluster, bool) {
	for _, t := range d.Routing.Targets {
		if t.RoutingKey != "" || t.Model != m {
			continue
		}
		for _, c := range t.Clusters {
			if c.ClusterID == clusterID {
				return c, true
			}
		}
	}
	return debugCluster{}, false
}

// member returns a backend of a cluster.
func (c debugCluster) member(id string) (debugMember, bool) {
	for _, b := range c.Backends {
		if b.ID == id {
			return b, true
		}
	}
	return debugMember{}, false
}

// getJSON GETs url, with the bearer token when not empty, and decodes
// its 200 body into v.
func getJSON(cl *http.Client, url, token string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// state reads the hub's GET /debug/state, on its admin listener.
func (h *hubProc) state(cl *http.Client) (debugState, error) {
	var d debugState
	err := getJSON(cl, h.adminURL+"/debug/state", "", &d)
	return d, err
}

// models reads the hub's GET /v1/models ids.
func (h *hubProc) models(cl *http.Client) ([]string, error) {
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := getJSON(cl, h.url+"/v1/models", h.token, &out); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(out.Data))
	for _, m := range out.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// clusterView returns the cluster of model, or why it cannot (for polls).
func (h *hubProc) clusterView(cl *http.Client, clusterID string) (debugCluster, string) {
	st, err := h.state(cl)
	if err != nil {
		return debugCluster{}, err.Error()
	}
	c, ok := st.cluster(model, clusterID)
	if !ok {
		return debugCluster{}, "cluster " + clusterID + " not in /debug/state"
	}
	return c, ""
}

// waitRegistered waits until every pylon is an active backend of model.
func (e *env) waitRegistered(h *hubProc, pylons ...*pylonProc) {
	e.t.Helper()
	waitFor(e.t, 15*time.Second, "pylons registered with the hub", func() (bool, string) {
		st, err := h.state(e.cl)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pylons {
			c, ok := st.cluster(model, p.cluster)
			if !ok {
				return false, "no cluster " + p.cluster
			}
			if _, ok := c.member(p.id); !ok {
				return false, "no backend " + p.id
			}
		}
		return true, ""
	})
}

// ---- Prometheus text ----

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is one scrape.
type metrics []sample

// scrape GETs a Prometheus text exposition.
func scrape(cl *http.Client, url string) (metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(string(b))
}

// mustScrape is scrape that fails the test.
func mustScrape(t *testing.T, cl *http.Client, url string) metrics {
	t.Helper()
	m, err := scrape(cl, url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	return m
}

// parseMetrics reads the sample lines of the text format (comments and
// blank lines skipped): name{k="v",...} value [timestamp].
func parseMetrics(text string) (metrics, error) {
	var out metrics
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, errors.New("no metric name")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if rest, ok := strings.CutPrefix(line, "}"); ok {
				line = rest
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || eq+1 >= len(line) || line[eq+1] != '"' {
				return s, errors.New("malformed label")
			}
			key := strings.TrimSpace(line[:eq])
			line = line[eq+2:]
			var v strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					if line[j] == 'n' {
						v.WriteByte('\n')
						continue
					}
				}
				v.WriteByte(line[j])
			}
			if j >= len(line) {
				return s, errors.New("unterminated label value")
			}
			s.labels[key] = v.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, errors.New("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// value sums the samples named name whose labels include every given
// key, value pair (0 when none matches, as for a counter never touched).
func (m metrics) value(name string, kv ...string) float64 {
	sum := 0.0
	for _, s := range m {
		if s.name == name && s.matches(kv) {
			sum += s.value
		}
	}
	return sum
}

func (s sample) matches(kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if s.labels[kv[i]] != kv[i+1] {
			return false
		}
	}
	return true
}

// ---- waiting ----

// waitFor polls cond every 20 ms until it holds and returns how long that
// took; after timeout it fails the test with cond's last explanation.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return waitEvery(t, 20*time.Millisecond, timeout, what, cond)
}

// waitEvery is waitFor with a chosen poll interval. cond reads what a
// client or operator can observe (an answer, /debug/state, a scrape);
// timeout is only the failure deadline.
func waitEvery(t *testing.T, every, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(every)
	defer poll.Stop()
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, why)
		case <-poll.C:
		}
	}
}

// within reports |got - want| <= tol x want.
func within(got, want, tol float64) bool {
	return got >= want*(1-tol) && got <= want*(1+tol)
}

func hasLabel(list []string, v string) bool { return slices.Contains(list, v) }
