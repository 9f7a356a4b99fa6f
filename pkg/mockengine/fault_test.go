package mockengine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/openai/openai-go/v3"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// putControl sends a test-control PUT and returns the response.
func putControl(t *testing.T, url, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// setControl sends a test-control PUT that must succeed.
func setControl(t *testing.T, url, path, body string) {
	t.Helper()
	resp := putControl(t, url, path, body)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s %s: %d %s", path, body, resp.StatusCode, b)
	}
}

func controlSnapshot(t *testing.T, url string) snapshotJSON {
	t.Helper()
	resp, err := http.Get(url + "/test-control")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap snapshotJSON
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

// rawStream is what a client read from one streamed answer: the data
// payloads in order and how the body ended.
type rawStream struct {
	status int
	data   []string
	err    error // nil: the body ended cleanly
}

func streamChat(t *testing.T, url, path, body string) rawStream {
	t.Helper()
	resp := postJSON(t, url+path, body, nil)
	defer resp.Body.Close()
	out := rawStream{status: resp.StatusCode}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
			out.data = append(out.data, d)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				out.err = err
			}
			return out
		}
	}
}

// contentTokens counts the chunks that carry an output token.
func contentTokens(data []string) int {
	n := 0
	for _, d := range data {
		var c struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(d), &c) == nil && len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			n++
		}
	}
	return n
}

func TestFaultStatusAnswersTheGivenStatusInOpenAIShape(t *testing.T) {
	_, url := startServer(t, fastConfig())
	setControl(t, url, "/test-control/fault", `{"mode":"status","status":503,"retryable":true}`)
	resp := postJSON(t, url+"/v1/chat/completions", chatBody(true, "x"), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(headers.StargateUpstreamRetryable) != "true" {
		t.Fatalf("status %d, retryable %q; want 503 marked retryable", resp.StatusCode, resp.Header.Get(headers.StargateUpstreamRetryable))
	}
	if e := decodeError(t, resp); e.Error.Code != "injected_fault" || e.Error.Type != "server_error" {
		t.Fatalf("error %+v", e)
	}
	// The default status is 500, without the retry mark; the other
	// inference endpoints are hit too.
	setControl(t, url, "/test-control/fault", `{"mode":"status"}`)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"test-model","prompt":"hi"}`},
		{"/v1/responses", `{"model":"test-model","input":"hi"}`},
		{"/v1/embeddings", `{"model":"test-model","input":"hi"}`},
	} {
		resp := postJSON(t, url+c.path, c.body, nil)
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get(headers.StargateUpstreamRetryable) != "" {
			t.Errorf("%s: status %d, retryable %q", c.path, resp.StatusCode, resp.Header.Get(headers.StargateUpstreamRetryable))
		}
		decodeError(t, resp)
	}
	setControl(t, url, "/test-control/fault", `{"mode":"none"}`)
	resp = postJSON(t, url+"/v1/chat/completions", chatBody(false, "x"), nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after mode none: %d", resp.StatusCode)
	}
	snap := controlSnapshot(t, url)
	if snap.FaultsInjected[faultStatus] != 4 || snap.Fault.Mode != faultNone {
		t.Fatalf("snapshot fault %+v injected %v; want mode none after 4 status faults", snap.Fault, snap.FaultsInjected)
	}
	// Requests hit by a fault are still counted, as any request is.
	counts := map[string]uint64{}
	for _, c := range snap.Counters {
		counts[c.Endpoint] += c.Count
	}
	if counts["chat_completions"] != 2 || counts["embeddings"] != 1 {
		t.Fatalf("counters %v", counts)
	}
}

// Of the first n requests after a fault with fraction f is set, exactly
// floor(n x f) are hit, evenly spread; setting the fault again restarts
// the count.
func TestFaultFractionIsExactAndEven(t *testing.T) {
	_, url := startServer(t, fastConfig())
	statuses := func(n int) string {
		var b strings.Builder
		for range n {
			resp := postJSON(t, url+"/v1/chat/completions", chatBody(false, "x"), nil)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				b.WriteByte('.')
			} else {
				b.WriteByte('x')
			}
		}
		return b.String()
	}
	setControl(t, url, "/test-control/fault", `{"mode":"status","status":502,"fraction":0.25}`)
	if got := statuses(8); got != "...x...x" {
		t.Fatalf("fraction 0.25: %s", got)
	}
	setControl(t, url, "/test-control/fault", `{"mode":"status","fraction":0.5}`)
	if got := statuses(5); got != ".x.x." {
		t.Fatalf("fraction 0.5 after a reset: %s", got)
	}
	setControl(t, url, "/test-control/fault", `{"mode":"status","fraction":0.1}`)
	if got := strings.Count(statuses(30), "x"); got != 3 {
		t.Fatalf("fraction 0.1 hit %d of 30, want 3", got)
	}
}

func TestFaultControlRejectsWhatItCannotApply(t *testing.T) {
	_, url := startServer(t, fastConfig())
	for _, body := range []string{
		`{}`,
		`{"mode":"explode"}`,
		`{"mode":"status","status":404}`,
		`{"mode":"status","status":600}`,
		`{"mode":"status","fraction":1.5}`,
		`{"mode":"status","fraction":-0.5}`,
		`{"mode":"hang","status":500}`,
		`{"mode":"hang","after_tokens":3}`,
		`{"mode":"drop","after_tokens":-1}`,
		`{"mode":"drop","retryable":true}`,
		`{"mode":"none","fraction":0.5}`,
		`{"mode":"drop","after_token":3}`,
		`{"mode":"drop","after_tokens":"3"}`,
		`not json`,
	} {
		resp := putControl(t, url, "/test-control/fault", body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", body, resp.StatusCode)
		}
		decodeError(t, resp)
	}
	for _, body := range []string{`{"poison":"zero"}`, `{}`, `{"poison":"nan","extra":1}`} {
		resp := putControl(t, url, "/test-control/stats", body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("stats %s: status %d, want 400", body, resp.StatusCode)
		}
		decodeError(t, resp)
	}
	if snap := controlSnapshot(t, url); snap.Fault.Mode != faultNone || snap.StatsPoison != poisonNone {
		t.Fatalf("a refused change was applied: %+v", snap)
	}
}

// A hung request never gets a response head: not while it waits, not
// when its client leaves. It holds no running slot.
func TestFaultHangSendsNothingUntilTheClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig()
		cfg.MaxConcurrent = 1
		e, _ := newEngine(t, cfg, clock.Real{})
		f := faultSpec{Mode: faultHang}
		if oerr := f.validate(); oerr != nil {
			t.Fatal(oerr)
		}
		e.control.setFault(f)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan *timedWriter)
		go func() { done <- serve(ctx, e, chatBody(true, "x"), nil) }()
		synctest.Wait()
		if running, waiting := e.slots.counts(); running != 0 || waiting != 0 {
			t.Fatalf("a hung request holds %d slots and %d places", running, waiting)
		}
		cancel()
		w := <-done
		if evs := w.snapshot(); len(evs) != 0 {
			t.Fatalf("a hung request wrote %+v", evs)
		}
		if n := e.control.snapshot().FaultsInjected[faultHang]; n != 1 {
			t.Fatalf("hang faults %d, want 1", n)
		}
	})
}

// An engine that shuts down under a hung request drops its connection: a
// handler that returned without writing would read as an empty 200.
func TestFaultHangDropsTheConnectionAtShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, fastConfig(), clock.Real{})
		e.control.setFault(faultSpec{Mode: faultHang, Fraction: 1})
		recovered := make(chan any)
		go func() {
			defer func() { recovered <- recover() }()
			serve(t.Context(), e, chatBody(true, "x"), nil)
		}()
		synctest.Wait()
		e.Close()
		if r := <-recovered; r != http.ErrAbortHandler { //nolint:errorlint // the panic value itself, as net/http compares it
			t.Fatalf("recovered %v, want http.ErrAbortHandler", r)
		}
	})
}

// A drop fault streams exactly after_tokens tokens and then breaks the
// body: the client reads an error, never a [DONE] or a finish event. The
// request's slot and cache pins are released like an aborted request's.
func TestFaultDropBreaksTheStreamAfterNTokens(t *testing.T) {
	cfg := fastConfig() // 8 output tokens
	e, url := startServer(t, cfg)
	for _, c := range []struct {
		after, wantTokens int
	}{{0, 0}, {3, 3}, {8, 8}, {100, 8}} {
		setControl(t, url, "/test-control/fault", `{"mode":"drop","after_tokens":`+strconv.Itoa(c.after)+`}`)
		got := streamChat(t, url, "/v1/chat/completions", chatBody(true, longSystem))
		if got.status != http.StatusOK || !errors.Is(got.err, io.ErrUnexpectedEOF) {
			t.Fatalf("after_tokens %d: status %d, end %v; want 200 then an unexpected EOF", c.after, got.status, got.err)
		}
		if n := contentTokens(got.data); n != c.wantTokens {
			t.Errorf("after_tokens %d: %d tokens before the drop, want %d", c.after, n, c.wantTokens)
		}
		for _, d := range got.data {
			if d == "[DONE]" || strings.Contains(d, `"finish_reason":"stop"`) {
				t.Errorf("after_tokens %d: the stream carried its end %q before the drop", c.after, d)
			}
		}
	}
	setControl(t, url, "/test-control/fault", `{"mode":"none"}`)
	if got := streamChat(t, url, "/v1/chat/completions", chatBody(true, "x")); got.err != nil || got.data[len(got.data)-1] != "[DONE]" {
		t.Fatalf("after mode none: %+v", got)
	}
	if running, _ := e.slots.counts(); running != 0 {
		t.Fatalf("%d slots still held", running)
	}
	if st := e.kv.Stats(); st.PinnedBlocks != 0 {
		t.Fatalf("%d blocks still pinned", st.PinnedBlocks)
	}
	if n := controlSnapshot(t, url).FaultsInjected[faultDrop]; n != 4 {
		t.Fatalf("drop faults %d, want 4", n)
	}
}

// The OpenAI SDK sees a dropped stream as an error, not as a short answer.
func TestFaultDropIsAnErrorForTheSDK(t *testing.T) {
	_, url := startServer(t, fastConfig())
	setControl(t, url, "/test-control/fault", `{"mode":"drop","after_tokens":2}`)
	c := sdk(url)
	stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model: "test-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if stream.Err() == nil {
		t.Fatalf("the SDK read %q and no error", text.String())
	}
	if got := len(strings.Fields(text.String())); got != 2 {
		t.Fatalf("the SDK read %d tokens before the error, want 2", got)
	}
}

// Responses streams, non-streaming answers and embeddings are dropped
// too: a non-streaming client gets no response at all.
func TestFaultDropOtherEndpoints(t *testing.T) {
	_, url := startServer(t, fastConfig())
	setControl(t, url, "/test-control/fault", `{"mode":"drop","after_tokens":1}`)
	got := streamChat(t, url, "/v1/responses", `{"model":"test-model","input":"hi","stream":true}`)
	if !errors.Is(got.err, io.ErrUnexpectedEOF) || strings.Contains(strings.Join(got.data, "\n"), "response.completed") {
		t.Fatalf("responses stream: %+v", got)
	}
	if n := strings.Count(strings.Join(got.data, "\n"), "response.output_text.delta"); n != 1 {
		t.Fatalf("responses stream: %d deltas before the drop, want 1", n)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", chatBody(false, "x")},
		{"/v1/embeddings", `{"model":"test-model","input":"hi"}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			t.Errorf("%s: got HTTP %d, want no response", c.path, resp.StatusCode)
		}
	}
}

// statsLines subscribes to the engine stats stream and returns a function
// that reads its next non-ping line.
func statsLines(t *testing.T, url string) func() string {
	t.Helper()
	resp, err := http.Get(url + "/pylon/v1/stats/stream")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	return func() string {
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(line, `"ping"`) {
				return strings.TrimSpace(line)
			}
		}
	}
}

func kvBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/kv-cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Each statistics poison reaches both of the pylon's sources, the stats
// stream and /kv-cache/stats, as the values a broken engine sends.
func TestStatsPoison(t *testing.T) {
	_, url := startServer(t, fastConfig())
	next := statsLines(t, url)
	request := func() {
		resp := postJSON(t, url+"/v1/chat/completions", chatBody(false, longSystem), map[string]string{"x-request-id": "req"})
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	request()
	clean := next()
	var ev statsEvent
	if err := json.Unmarshal([]byte(clean), &ev); err != nil || ev.TokensGenerated == nil || *ev.TokensGenerated != 8 {
		t.Fatalf("clean event %s (%v)", clean, err)
	}
	if kv := kvBody(t, url); !json.Valid([]byte(kv)) || !strings.Contains(kv, `"kv_cache_capacity_tokens":1600000`) {
		t.Fatalf("clean kv body %s", kv)
	}
	for _, c := range []struct {
		poison, event, kv string
	}{
		{"nan", `"tokens_processed":NaN,"tokens_generated":NaN,"finished":true`, `"kv_cache_capacity_tokens":NaN`},
		{"negative", `"tokens_generated":-8,"finished":true`, `"kv_cache_capacity_tokens":-1600000`},
		{"huge", `"tokens_generated":18446744073709551615`, `"kv_cache_free_tokens":18446744073709551615`},
	} {
		setControl(t, url, "/test-control/stats", `{"poison":"`+c.poison+`"}`)
		request()
		if got := next(); !strings.Contains(got, c.event) || !strings.HasPrefix(got, `{"type":"stats","v":1,"request_id":"req","model":"test-model"`) {
			t.Errorf("%s: event %s, want it to contain %s", c.poison, got, c.event)
		}
		if got := kvBody(t, url); !strings.Contains(got, c.kv) {
			t.Errorf("%s: kv body %s, want it to contain %s", c.poison, got, c.kv)
		}
	}

	// Stale: no events, and the KV body of the moment it was set, however
	// the cache changes.
	setControl(t, url, "/test-control/stats", `{"poison":"none"}`)
	frozen := kvBody(t, url)
	setControl(t, url, "/test-control/stats", `{"poison":"stale"}`)
	resp := postJSON(t, url+"/v1/chat/completions", chatBody(false, "a prompt of its own "+longSystem), map[string]string{"x-request-id": "stale"})
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if got := kvBody(t, url); got != frozen {
		t.Errorf("stale kv body changed:\n%s\nwant\n%s", got, frozen)
	}
	setControl(t, url, "/test-control/stats", `{"poison":"none"}`)
	request()
	if got := next(); !strings.Contains(got, `"request_id":"req"`) {
		t.Errorf("the first event after stale is %s; the stale request's events should not exist", got)
	}
	if got := kvBody(t, url); got == frozen {
		t.Errorf("kv body still frozen after poison none")
	}
	if snap := controlSnapshot(t, url); snap.StatsPoison != poisonNone || snap.KVStatsReads != 7 {
		t.Errorf("snapshot poison %q, %d kv reads (want 7)", snap.StatsPoison, snap.KVStatsReads)
	}
}

// The hand-written KV body is the JSON the encoder would write, so the
// clean case decodes into every field pylon reads.
func TestKVStatsBodyIsValidJSON(t *testing.T) {
	e, _ := newEngine(t, fastConfig(), clock.Real{})
	rec := httptest.NewRecorder()
	e.serveKVStats(rec, httptest.NewRequest(http.MethodGet, "/kv-cache/stats", nil))
	var kv map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &kv); err != nil || len(kv) != 12 || kv["kv_cache_free_tokens"] != float64(1_600_000) {
		t.Fatalf("kv body %s (%v)", rec.Body, err)
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
	}
}
