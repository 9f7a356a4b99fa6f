package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
)

// outcome is how one client request ended, read from the raw bytes the
// client got: what an OpenAI SDK would report.
type outcome int

const (
	// complete: 200 and the stream's [DONE], no error event.
	complete outcome = iota
	// errorEvent: 200, then an error event and no [DONE]: the SDKs raise
	// it.
	errorEvent
	// broken: 200, then the connection broke before [DONE]: the SDKs
	// raise a read error.
	broken
	// cleanEnd: 200, then the body ended without [DONE] and without an
	// error: a cut answer that reads as a finished one. Never allowed.
	cleanEnd
	// typedError: not 200, with an OpenAI error body.
	typedError
	// untypedError: not 200, without one. Never allowed.
	untypedError
	// refused: no HTTP answer at all (connection refused or reset before
	// a head).
	refused
	// hung: the client's deadline passed first. Never allowed.
	hung
)

func (o outcome) String() string {
	return [...]string{"complete", "error_event", "broken", "clean_end", "typed_error", "untyped_error", "refused", "hung"}[o]
}

// result is one request's outcome and what the client saw of it.
type result struct {
	outcome outcome
	status  int
	// code is the OpenAI error code of a typed error or an error event.
	code string
	// engine is x-mock-engine-id: which cluster's engine answered.
	engine string
	// tokens counts the content chunks received.
	tokens int
	// seq numbers the requests in the order they were sent.
	seq int64
	// took is the request's wall time.
	took time.Duration
	// tag is the test's label for the request (a phase, a gateway).
	tag string
}

// client sends chat requests to the gateways as an OpenAI client does.
type client struct {
	http    *http.Client
	apiKey  string
	timeout time.Duration
	seq     atomic.Int64

	mu sync.Mutex
	// inFlight is every stream whose head arrived and that has not ended,
	// by engine.
	inFlight map[string]int
}

func newClient(c *http.Client, apiKey string) *client {
	return &client{http: c, apiKey: apiKey, timeout: 30 * time.Second, inFlight: map[string]int{}}
}

// streaming reports how many streams of engine are between their head
// and their end now.
func (c *client) streaming(engine string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight[engine]
}

func (c *client) track(engine string, d int) {
	c.mu.Lock()
	c.inFlight[engine] += d
	c.mu.Unlock()
}

// chat sends one streamed chat request for session (empty: none) to the
// gateway at base, asking for tokens output tokens, and classifies how it
// ended.
func (c *client) chat(ctx context.Context, base, session string, tokens int) (res result) {
	res.seq = c.seq.Add(1)
	start := time.Now()
	defer func() { res.took = time.Since(start) }()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body := map[string]any{"model": model, "stream": true, "max_tokens": tokens,
		"messages": []map[string]string{{"role": "user", "content": "fault suite request " + session}}}
	if session != "" {
		body["prompt_cache_key"] = session
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(string(b)))
	if err != nil {
		res.outcome = untypedError
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	resp, err := c.http.Do(req)
	if err != nil {
		res.outcome = refused
		if ctx.Err() != nil {
			res.outcome = hung
		}
		return res
	}
	defer func() { _ = resp.Body.Close() }()
	res.status, res.engine = resp.StatusCode, resp.Header.Get(headers.MockEngineID)
	if resp.StatusCode != http.StatusOK {
		res.outcome, res.code = typedOrNot(resp.Body)
		if ctx.Err() != nil {
			res.outcome = hung
		}
		return res
	}
	c.track(res.engine, 1)
	defer c.track(res.engine, -1)
	res.outcome, res.code, res.tokens = readStream(resp.Body)
	if ctx.Err() != nil && res.outcome != complete {
		res.outcome = hung
	}
	return res
}

// typedOrNot reads an error body: typed when it is the OpenAI shape.
func typedOrNot(body io.Reader) (outcome, string) {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
	if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return untypedError, ""
	}
	return typedError, e.Error.Code
}

// readStream reads an event stream to its end.
func readStream(body io.Reader) (outcome, string, int) {
	rd := bufio.NewReader(body)
	done, errEvent, code, tokens := false, false, "", 0
	for {
		line, err := rd.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			if data == "[DONE]" {
				done = true
			} else if isErr, c, token := inspect(data); isErr {
				errEvent, code = true, c
			} else if token {
				tokens++
			}
		}
		if err == nil {
			continue
		}
		switch {
		case errEvent:
			return errorEvent, code, tokens
		case done && errors.Is(err, io.EOF):
			return complete, "", tokens
		case !errors.Is(err, io.EOF):
			return broken, "", tokens
		}
		return cleanEnd, "", tokens
	}
}

// inspect reads one event's data: an error event (with its code), or a
// chunk carrying an output token.
func inspect(data string) (isErr bool, code string, token bool) {
	var ev struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(data), &ev) != nil {
		return false, "", false
	}
	if ev.Error != nil {
		return true, ev.Error.Code, false
	}
	return false, "", len(ev.Choices) > 0 && ev.Choices[0].Delta.Content != ""
}

// load runs workers that send requests until stop is closed or ctx ends
// (a test that fails half way), each one after the other, and returns
// every result once they have all ended. send makes one request; worker
// i's k-th request is send(i, k).
func load(ctx context.Context, workers int, stop <-chan struct{}, send func(worker, k int) result) []result {
	var mu sync.Mutex
	var all []result
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				r := send(i, k)
				mu.Lock()
				all = append(all, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b result) int { return int(a.seq - b.seq) })
	return all
}

// tally counts results by outcome (and status for errors), for messages.
func tally(rs []result) string {
	counts := map[string]int{}
	for _, r := range rs {
		k := r.outcome.String()
		if r.status != 0 && r.status != http.StatusOK {
			k += fmt.Sprintf("(%d %s)", r.status, r.code)
		} else if r.code != "" {
			k += "(" + r.code + ")"
		}
		counts[k]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, counts[k])
	}
	return strings.TrimSpace(b.String())
}

// count returns how many of rs satisfy keep.
func count(rs []result, keep func(result) bool) int {
	n := 0
	for _, r := range rs {
		if keep(r) {
			n++
		}
	}
	return n
}

// runN sends n requests from workers at once, each worker's after the
// other, and returns their results in sending order.
func runN(n, workers int, send func(k int) result) []result {
	var next atomic.Int64
	var mu sync.Mutex
	var all []result
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k := int(next.Add(1))
				if k > n {
					return
				}
				r := send(k)
				mu.Lock()
				all = append(all, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b result) int { return int(a.seq - b.seq) })
	return all
}
