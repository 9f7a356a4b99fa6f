package engineproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// commanded is a scripted SSE engine: it sends the 200 head at once, then
// writes each string it is given on its channel, flushed, and returns when
// the channel closes or its client leaves. cancelled is closed when the
// engine saw its request context end.
type commanded struct {
	*scripted
	cmds      chan string
	cancelled chan struct{}
}

func newCommanded(t *testing.T) *commanded {
	t.Helper()
	c := &commanded{cmds: make(chan string), cancelled: make(chan struct{})}
	c.scripted = newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
		rc := sseStart(w, http.StatusOK)
		for {
			select {
			case raw, ok := <-c.cmds:
				if !ok {
					return
				}
				if raw == "!abort" {
					panic(http.ErrAbortHandler)
				}
				sseSend(w, rc, raw)
			case <-r.Context().Done():
				close(c.cancelled)
				return
			}
		}
	})
	return c
}

func (c *commanded) send(t *testing.T, raw string) {
	t.Helper()
	select {
	case c.cmds <- raw:
	case <-time.After(hangGuard):
		t.Fatal("the engine is not streaming")
	}
}

func (c *commanded) waitCancelled(t *testing.T) {
	t.Helper()
	select {
	case <-c.cancelled:
	case <-time.After(hangGuard):
		t.Fatal("the engine request was not cancelled")
	}
}

func (h *harness) onlyObserver() *stats.Observer {
	h.t.Helper()
	obs := h.tr.begun()
	if len(obs) != 1 {
		h.t.Fatalf("%d observers, want 1", len(obs))
	}
	return obs[0]
}

func TestStreamedChatThroughMockEngine(t *testing.T) {
	m := newMockEngine(t, nil)
	h := newHarness(t, m.srv.URL, options{})
	// Long enough for whole KV blocks, so the second turn hits the cache.
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 8)
	body := `{"model":"test-model","messages":[{"role":"user","content":"` + prompt + `"}],"stream":true}`

	for turn, wantHit := range []string{"false", "true"} {
		id := "stream-" + strconv.Itoa(turn)
		resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders(id), body)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("turn %d: %d %q", turn, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := resp.Header.Get(headers.KVCacheHit); got != wantHit {
			t.Errorf("turn %d: %s = %q, want %s", turn, headers.KVCacheHit, got, wantHit)
		}
		for _, k := range []string{headers.KVCacheHitTokens, headers.KVCacheReusedInputTokens, headers.KVCacheUncachedInputTokens,
			headers.KVCacheEvictedEntries, headers.KVCacheEvictedTokens} {
			if _, err := strconv.ParseUint(resp.Header.Get(k), 10, 64); err != nil {
				t.Errorf("turn %d: %s = %q", turn, k, resp.Header.Get(k))
			}
		}
		if wantHit == "true" && resp.Header.Get(headers.KVCacheHitTokens) == "0" {
			t.Errorf("turn %d: cache hit with 0 hit tokens", turn)
		}
		if got := resp.Header.Get(headers.RequestID); got != id {
			t.Errorf("turn %d: x-request-id = %q", turn, got)
		}

		er := readEvents(resp.Body)
		var content []string
		var events []string
		for {
			ev := er.next(t)
			events = append(events, ev)
			if !strings.HasPrefix(ev, "data: ") || !strings.HasSuffix(ev, "\n\n") || strings.Count(ev, "\n\n") != 1 {
				t.Fatalf("turn %d: malformed event %q", turn, ev)
			}
			payload := strings.TrimSuffix(strings.TrimPrefix(ev, "data: "), "\n\n")
			if payload == "[DONE]" {
				break
			}
			var chunk struct {
				Choices []struct {
					Delta struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(payload), &chunk); err != nil || len(chunk.Choices) != 1 {
				t.Fatalf("turn %d: chunk %q: %v", turn, payload, err)
			}
			if len(events) == 1 && chunk.Choices[0].Delta.Role != "assistant" {
				t.Errorf("turn %d: first event is not the role chunk: %q", turn, payload)
			}
			if c := chunk.Choices[0].Delta.Content; c != "" {
				content = append(content, c)
			}
		}
		if err := er.end(t); !errors.Is(err, io.EOF) {
			t.Fatalf("turn %d: stream ended with %v, want a clean end", turn, err)
		}
		_ = resp.Body.Close()
		// Role chunk, 4 tokens, the finish chunk, [DONE].
		if len(events) != 7 || len(content) != 4 {
			t.Errorf("turn %d: %d events, %d content chunks; want 7 and 4: %q", turn, len(events), len(content), events)
		}
		h.waitServed(1)
	}

	for i, o := range h.tr.begun() {
		if o.State() != stats.Complete {
			t.Errorf("request %d: observer %v, want complete", i, o.State())
		}
	}
	st, _ := h.coll.Stats(testModel)
	if st.NumRunningQueries != 0 || st.QueueSize != 0 || st.OutputGenerationQueries != 0 {
		t.Errorf("collector still holds the requests: %+v", st)
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=complete"); got != 2 {
		t.Errorf("requests_total{complete} = %v, want 2", got)
	}
	if got := h.metric("pylon_request_time_to_first_output_seconds", "model=test-model,routing_key="); got != 2 {
		t.Errorf("first-output samples = %v, want 2", got)
	}
	if got := h.metric("pylon_queue_admission_decisions_total", "inference_server_id=pylon-test,model_id=test-model,result=missing_estimate"); got != 2 {
		t.Errorf("decisions{missing_estimate} = %v, want 2", got)
	}
}

func TestSSEEventsForwardedOneAtATime(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	// Each event is sent only after the previous one reached the client,
	// so the proxy must flush every event as it completes.
	events := []string{
		": keep-alive comment\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
		"event: message\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"a b\"}}]}\r\n\r\n",
		"id: 7\ndata: first line\ndata: second line\n\n",
		"data: not json at all\n\n",
	}
	for _, ev := range events {
		up.send(t, ev)
		if got := er.next(t); got != ev {
			t.Fatalf("client got %q, want %q", got, ev)
		}
	}
	// An event written in pieces reaches the client whole.
	up.send(t, "data: {\"choices\":[{\"delta\":")
	up.send(t, "{\"content\":\"c\"}}]}\n")
	up.send(t, "\n")
	if got := er.next(t); got != "data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n" {
		t.Fatalf("client got %q", got)
	}
	up.send(t, "data: [DONE]\n\n")
	if got := er.next(t); got != "data: [DONE]\n\n" {
		t.Fatalf("client got %q", got)
	}
	close(up.cmds)
	if err := er.end(t); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Complete {
		t.Fatalf("observer %v, want complete", s)
	}
}

func TestSSEFirstOutputTimeout(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) {
		c.FirstOutputTimeout = 5 * time.Second
		c.InterEventTimeout = time.Second
	}})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	h.clk.WaitForTimers(1)

	// Events that are not output do not count as the first output.
	for _, ev := range []string{": ping\n\n", "data:\n\n", "event: response.created\ndata: {\"type\":\"response.created\"}\n\n"} {
		up.send(t, ev)
		if got := er.next(t); got != ev {
			t.Fatalf("client got %q, want %q", got, ev)
		}
	}
	h.clk.Advance(5*time.Second - time.Nanosecond)
	if n := h.clk.Timers(); n != 1 {
		t.Fatalf("the first-output timeout fired early (%d timers armed)", n)
	}
	h.clk.Advance(time.Nanosecond)

	up.waitCancelled(t)
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("a timed-out stream ended cleanly; want it aborted")
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Failed {
		t.Fatalf("observer %v, want failed", s)
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=failed"); got != 1 {
		t.Errorf("requests_total{failed} = %v", got)
	}
	if st, _ := h.coll.Stats(testModel); st.NumRunningQueries != 0 {
		t.Errorf("num_running_queries = %d", st.NumRunningQueries)
	}
}

func TestSSEInterEventTimeout(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) {
		c.FirstOutputTimeout = 5 * time.Second
		c.InterEventTimeout = 2 * time.Second
	}})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	h.clk.WaitForTimers(1)
	h.clk.Advance(4 * time.Second) // most of the first-output budget

	rearmed := h.clk.Changed()
	out := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	up.send(t, out)
	if got := er.next(t); got != out {
		t.Fatalf("client got %q", got)
	}
	select {
	case <-rearmed: // the output re-armed the watchdog for the gap
	case <-time.After(hangGuard):
		t.Fatal("output did not re-arm the watchdog")
	}
	// The old first-output deadline (1 s away) no longer applies.
	h.clk.Advance(2*time.Second - time.Nanosecond)
	if n := h.clk.Timers(); n != 1 {
		t.Fatalf("the inter-event timeout fired early (%d timers armed)", n)
	}
	up.send(t, ": ping\n\n") // not output: does not re-arm
	if got := er.next(t); got != ": ping\n\n" {
		t.Fatalf("client got %q", got)
	}
	h.clk.Advance(time.Nanosecond)

	up.waitCancelled(t)
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("a timed-out stream ended cleanly; want it aborted")
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Failed {
		t.Fatalf("observer %v, want failed", s)
	}
}

func TestSSEEventTooLarge(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) { c.MaxEventBytes = 1024 }})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)

	fits := "data: " + strings.Repeat("a", 1014) + "\n\n" // 1022 bytes
	up.send(t, fits)
	if got := er.next(t); got != fits {
		t.Fatalf("an event within the limit was not relayed")
	}
	up.send(t, "data: "+strings.Repeat("b", 2000)) // unfinished, over the limit
	up.waitCancelled(t)
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("an oversized event ended the stream cleanly; want it aborted")
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Failed {
		t.Fatalf("observer %v, want failed", s)
	}
}

func TestSSEUpstreamBreaks(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	out := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	up.send(t, out)
	if got := er.next(t); got != out {
		t.Fatalf("client got %q", got)
	}
	up.send(t, "!abort")
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("a broken upstream stream ended cleanly downstream; want it aborted")
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Failed {
		t.Fatalf("observer %v, want failed", s)
	}
}

func TestSSEEndsBeforeOutput(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("r"), chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	up.send(t, "data: [DONE]\n\n")
	er.next(t)
	close(up.cmds)
	// The engine ended its stream normally: the client gets it whole, but
	// the request has no output and fails.
	if err := er.end(t); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Failed {
		t.Fatalf("observer %v, want failed", s)
	}
}

func TestResponsesStream(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/responses", validHeaders("r"), `{"stream":true,"input":"x"}`)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	h.clk.WaitForTimers(1)
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n"
	up.send(t, created)
	er.next(t)
	h.clk.Advance(1500 * time.Millisecond)
	for _, ev := range []string{
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi there\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"output_tokens\":2}}}\n\n",
	} {
		up.send(t, ev)
		if got := er.next(t); got != ev {
			t.Fatalf("client got %q", got)
		}
	}
	close(up.cmds) // no [DONE]: the Responses API ends without it
	if err := er.end(t); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Complete {
		t.Fatalf("observer %v, want complete", s)
	}
	// response.created is not the first output: it came 1.5 s later.
	if got := histogramSum(t, h.reg, "pylon_request_time_to_first_output_seconds"); got != 1.5 {
		t.Errorf("time to first output = %v s, want 1.5", got)
	}
}

// TestOtherEndpointStreamsThrough: an SSE answer on a path the proxy does
// not parse (legacy completions) is still copied through as it arrives,
// not buffered to the end.
func TestOtherEndpointStreamsThrough(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/completions", validHeaders("r"), `{"prompt":"x","stream":true}`)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	for _, ev := range []string{"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", "data: [DONE]\n\n"} {
		up.send(t, ev)
		if got := er.next(t); got != ev {
			t.Fatalf("client got %q", got)
		}
	}
	close(up.cmds)
	if err := er.end(t); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Complete {
		t.Fatalf("observer %v, want complete", s)
	}
}

func TestNonSSEBodies(t *testing.T) {
	const embedding = `{"data":[{"embedding":[1]}]}`
	up := newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/bad" {
			w.WriteHeader(http.StatusBadRequest)
		}
		_, _ = io.WriteString(w, embedding)
	})
	h := newHarness(t, up.srv.URL, options{})
	resp, b := h.post("/v1/embeddings", validHeaders("e"), `{"input":"x"}`)
	if resp.StatusCode != http.StatusOK || string(b) != embedding {
		t.Fatalf("embeddings = %d %q", resp.StatusCode, b)
	}
	h.waitServed(1)
	resp, b = h.post("/v1/bad", validHeaders("b"), `{}`)
	if resp.StatusCode != http.StatusBadRequest || string(b) != embedding {
		t.Fatalf("bad = %d %q", resp.StatusCode, b)
	}
	h.waitServed(1)
	obs := h.tr.begun()
	if obs[0].State() != stats.Complete || obs[1].State() != stats.Failed {
		t.Fatalf("observers %v/%v, want complete/failed", obs[0].State(), obs[1].State())
	}
}

// TestClientCancelMidStream: the hub going away cancels the engine
// request, so the mock engine's running slot frees at once.
func TestClientCancelMidStream(t *testing.T) {
	m := newMockEngine(t, func(c *mockengine.Config) {
		c.TimeScale = 1
		c.TokenDelay = 5 * time.Millisecond
	})
	h := newHarness(t, m.srv.URL, options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hd := validHeaders("long")
	hd.Set(headers.OutputTokens, "100000") // minutes of decode
	resp := h.request(ctx, http.MethodPost, "/v1/chat/completions", hd, chatBody)
	er := readEvents(resp.Body)
	er.next(t) // role chunk
	er.next(t) // first token
	if got := m.metric(t, "vllm:num_requests_running", ""); got != 1 {
		t.Fatalf("engine running = %v, want 1", got)
	}
	if st, _ := h.coll.Stats(testModel); st.OutputGenerationQueries != 1 {
		t.Fatalf("collector: %+v", st)
	}
	cancel()
	_ = resp.Body.Close()

	m.waitDone(t, "/v1/chat/completions")
	h.waitServed(1)
	if got := m.metric(t, "vllm:num_requests_running", ""); got != 0 {
		t.Errorf("engine running = %v after the client left, want 0", got)
	}
	if got := m.metric(t, "vllm:request_success_total", "finished_reason=abort"); got != 1 {
		t.Errorf("engine aborts = %v, want 1", got)
	}
	if s := h.onlyObserver().State(); s != stats.Cancelled {
		t.Errorf("observer %v, want cancelled", s)
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=cancelled"); got != 1 {
		t.Errorf("requests_total{cancelled} = %v", got)
	}
	if st, _ := h.coll.Stats(testModel); st.NumRunningQueries != 0 {
		t.Errorf("num_running_queries = %d", st.NumRunningQueries)
	}
}

// --- splitter and classifier ---

func TestClassify(t *testing.T) {
	cases := []struct {
		ev   string
		want eventKind
	}{
		{"data: [DONE]", eventDone},
		{"data:[DONE]", eventDone},
		{"data:  [DONE] ", eventDone},
		{"data: {\"choices\":[]}", eventOutput},
		{"data: plain text", eventOutput},
		{"data:", eventOther},
		{"data: ", eventOther},
		{": comment", eventOther},
		{"event: ping", eventOther},
		{"event: response.created\ndata: {\"type\":\"response.created\"}", eventOther},
		{"event: response.created\r\ndata: {}", eventOther},
		{"data: {\"type\":\"response.created\",\"response\":{}}", eventOther},
		{"data: {\"type\":\"response.in_progress\"}", eventOutput},
		{"event: response.output_text.delta\ndata: {\"delta\":\"x\"}", eventOutput},
		{"data: {\"type\":\"response\\u002ecreated\"}", eventOther},
		{"data: {\"Type\":\"\\u0072esponse.created\"}", eventOther},
		{"data: {\"type\":\"response.created\",\"type\":\"x\"}", eventOutput},
		{"data: {\"delta\":\"line\\nbreak \\\"q\\\"\"}", eventOutput},
		{"data: \"response.created\"", eventOutput},
	}
	for _, tc := range cases {
		if got := classify([]byte(tc.ev)); got != tc.want {
			t.Errorf("classify(%q) = %v, want %v", tc.ev, got, tc.want)
		}
	}
}

func TestDataOf(t *testing.T) {
	cases := []struct{ ev, want string }{
		{"data: a", "a"},
		{"data:a", "a"},
		{"data:  a", " a"},
		{"data: a\ndata: b", "a\nb"},
		{"data: a\r\ndata: b\r", "a\nb"},
		{"id: 1\nevent: x\ndata: {}\n: c", "{}"},
		{"no data", ""},
	}
	for _, tc := range cases {
		if got := string(dataOf([]byte(tc.ev))); got != tc.want {
			t.Errorf("dataOf(%q) = %q, want %q", tc.ev, got, tc.want)
		}
	}
}

func TestEventBoundary(t *testing.T) {
	cases := []struct {
		in       string
		end, sep int
	}{
		{"", -1, 0},
		{"data: x\n", -1, 0},
		{"data: x\n\n", 7, 2},
		{"data: x\r\n\r\n", 7, 4},
		{"data: x\r\n\r\ndata: y\n\n", 7, 4},
		{"data: x\n\ndata: y\r\n\r\n", 7, 2},
		{"a\r\n\n", 2, 2},
		{"\n\n", 0, 2},
		{"\r\n\r\n", 0, 4},
		{"a\n\r\n\r\n", 2, 4},
		{"a\r\n\r\r\n\n", 5, 2},
	}
	for _, tc := range cases {
		end, sep := eventBoundary([]byte(tc.in), 0)
		if end != tc.end || sep != tc.sep {
			t.Errorf("eventBoundary(%q) = %d, %d; want %d, %d", tc.in, end, sep, tc.end, tc.sep)
		}
	}
}

var sseSeeds = []string{
	"",
	"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
	"event: message\r\ndata: x\r\n\r\ndata: y\n\n",
	"data: a\ndata: b\n\n: comment\n\ntrailing",
	"\n\n\n\n\r\n\r\n\r\n",
	"data: {\"type\":\"response.created\"}\n\nevent: response.created\n\n",
	"a\r\n\nb\n\r\n\r\nc",
	"data:[DONE]\r\n\r\n",
	"data: x\r\n\r\r\n\ndata:  y\r\ndata:\n\n",
	" event: response.created \ndata: z\n\ndata: {\"type\":\"Response.created\"}\n\n",
	"data: {\"TYPE\":\"response\\u002ecreated\"}\n\ndata: {\"type\":\"\\u0072esponse.created\",\"x\":\"a\\nb\"}\n\n",
	"data: {\"type\":\"response.created\",\"type\":1}\n\ndata: {\"delta\":\"a\\\"b\\n\"}\n\n",
}

// refEvent is one event of a stream as refSplitSSE cuts it.
type refEvent struct {
	raw    []byte // the event with its blank line, as relayed
	data   []byte // its data lines' values joined by LF
	output bool   // it counts as output
}

// refSplitSSE states how the pylon cuts an event stream, without the
// proxy's code: scanning byte by byte, an event ends with the first LF LF
// or CR LF CR LF; the bytes after the last one are an unfinished event. An event's data is the value of every
// line (LF-separated, one CR removed) that starts with "data:", less one
// space after the colon, joined by LF. It is output unless its data is
// blank or [DONE], a line names the event response.created, or its data
// is a JSON object of type response.created.
func refSplitSSE(stream []byte) (events []refEvent, rest []byte) {
	start := 0
	for i := 0; i < len(stream); i++ {
		sep := 0
		switch {
		case i+1 < len(stream) && stream[i] == '\n' && stream[i+1] == '\n':
			sep = 2
		case i+3 < len(stream) && stream[i] == '\r' && stream[i+1] == '\n' && stream[i+2] == '\r' && stream[i+3] == '\n':
			sep = 4
		default:
			continue
		}
		body := stream[start:i]
		events = append(events, refEvent{raw: stream[start : i+sep], data: refData(body), output: refOutput(body)})
		start = i + sep
		i = start - 1
	}
	return events, stream[start:]
}

func refData(body []byte) []byte {
	var vals []string
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			vals = append(vals, strings.TrimPrefix(v, " "))
		}
	}
	if vals == nil {
		return nil
	}
	return []byte(strings.Join(vals, "\n"))
}

func refOutput(body []byte) bool {
	for _, line := range strings.Split(string(body), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "event:"); ok && strings.TrimSpace(name) == "response.created" {
			return false
		}
	}
	data := strings.TrimSpace(string(refData(body)))
	if data == "" || data == "[DONE]" {
		return false
	}
	var typed struct {
		Type string `json:"type"`
	}
	created := json.Unmarshal([]byte(data), &typed) == nil && typed.Type == "response.created"
	return !created
}

// FuzzSSESplit: the proxy's event cutting (eventBoundary, dataOf,
// classify) agrees with refSplitSSE on any byte stream, and the events and
// the unfinished rest re-join to the input.
func FuzzSSESplit(f *testing.F) {
	for _, s := range sseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantRest := refSplitSSE(data)
		var joined []byte
		rest := data
		for i := 0; ; i++ {
			end, sep := eventBoundary(rest, 0)
			if end < 0 {
				break
			}
			if i >= len(want) {
				t.Fatalf("%q: event %d %q beyond the %d the rules find", data, i, rest[:end+sep], len(want))
			}
			ev, body := rest[:end+sep], rest[:end]
			if !bytes.Equal(ev, want[i].raw) {
				t.Fatalf("%q: event %d is %q, want %q", data, i, ev, want[i].raw)
			}
			if d := dataOf(body); !bytes.Equal(d, want[i].data) {
				t.Fatalf("%q: event %d data %q, want %q", data, i, d, want[i].data)
			}
			if out := classify(body) == eventOutput; out != want[i].output {
				t.Fatalf("%q: event %d output %v, want %v", data, i, out, want[i].output)
			}
			if classify(body) == eventDone && string(bytes.TrimSpace(want[i].data)) != "[DONE]" {
				t.Fatalf("%q: event %d classified [DONE] with data %q", data, i, want[i].data)
			}
			joined = append(joined, ev...)
			rest = rest[end+sep:]
			if i == len(want)-1 && !bytes.Equal(rest, wantRest) {
				t.Fatalf("%q: unfinished rest %q, want %q", data, rest, wantRest)
			}
		}
		if !bytes.Equal(append(joined, rest...), data) {
			t.Fatalf("events and rest re-join to %q, not the input %q", append(joined, rest...), data)
		}
	})
}

// FuzzStreamSSE: streamSSE, fed any stream in reads of a fuzzed size with
// empty reads mixed in, relays exactly the input, reports exactly the
// output events' data (refSplitSSE), never reads past the end, and, with a
// fuzzed limit on an unfinished event, aborts exactly when refSplitSSE's
// unfinished event outgrows it after a read, having relayed exactly the
// events finished by then.
func FuzzStreamSSE(f *testing.F) {
	for i, s := range sseSeeds {
		f.Add([]byte(s), uint8(i+1), uint8(0), uint8(i%3))
	}
	f.Add([]byte("data: abcdefgh\n\ndata: abcdefghijklmnop"), uint8(3), uint8(10), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk, limit, stall uint8) {
		n := max(int(chunk), 1)
		maxEvent := 1 << 20
		if limit > 0 {
			maxEvent = int(limit)
		}
		// The reads streamSSE makes and where it stands after each.
		wantBytes, wantOutputs := data, [][]byte(nil)
		wantAbort := false
		events, _ := refSplitSSE(data)
		for pos := 0; ; pos = min(pos+n, len(data)) {
			done := 0 // the bytes of events finished within data[:pos]
			var outs [][]byte
			for _, ev := range events {
				if done+len(ev.raw) > pos {
					break
				}
				done += len(ev.raw)
				if ev.output {
					outs = append(outs, ev.data)
				}
			}
			if pos-done > maxEvent {
				wantBytes, wantOutputs, wantAbort = data[:done], outs, true
				break
			}
			if pos == len(data) {
				wantOutputs = outs
				break
			}
		}

		clk := clock.NewFake(epoch)
		px := &Proxy{cfg: Config{Clock: clk, Log: slog.New(slog.DiscardHandler), MaxEventBytes: maxEvent,
			FirstOutputTimeout: time.Hour, InterEventTimeout: time.Hour}}
		rec := httptest.NewRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := &recordingObs{}
		r := &chunkReader{t: t, data: data, n: n, stallEvery: int(stall)}
		got, abort := px.streamSSE(ctx, cancel, rec, http.NewResponseController(rec), r, RequestInfo{}, obs, clk.Now(), true)
		if !bytes.Equal(rec.Body.Bytes(), wantBytes) {
			t.Fatalf("relayed %q, want %q", rec.Body.Bytes(), wantBytes)
		}
		if len(obs.outputs) != len(wantOutputs) {
			t.Fatalf("%d outputs reported, want %d", len(obs.outputs), len(wantOutputs))
		}
		for i := range wantOutputs {
			if !bytes.Equal(obs.outputs[i], wantOutputs[i]) {
				t.Fatalf("output %d = %q, want %q", i, obs.outputs[i], wantOutputs[i])
			}
		}
		wantOutcome := outcomeComplete
		if wantAbort || len(wantOutputs) == 0 {
			wantOutcome = outcomeFailed
		}
		if got != wantOutcome || abort != wantAbort {
			t.Fatalf("outcome %v abort %v, want %v abort %v", got, abort, wantOutcome, wantAbort)
		}
		if !wantAbort && r.eofs != 1 {
			t.Fatalf("streamSSE saw EOF %d times; it must stop reading at the first", r.eofs)
		}
		if clk.Timers() != 0 {
			t.Fatalf("watchdog left armed")
		}
	})
}

// chunkReader hands out data n bytes at a time, with an empty read before
// every stallEvery-th one (0: none), as a slow upstream does. It fails the
// test when it is read again after returning EOF more than a few times: a
// reader loop that ignores EOF would otherwise spin forever.
type chunkReader struct {
	t          *testing.T
	data       []byte
	n          int
	stallEvery int
	reads      int
	eofs       int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.reads++
	if c.stallEvery > 0 && c.reads%(c.stallEvery+1) == 0 {
		return 0, nil
	}
	if len(c.data) == 0 {
		c.eofs++
		if c.eofs > 3 {
			c.t.Fatalf("read %d times after EOF", c.eofs)
		}
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

type recordingObs struct{ outputs [][]byte }

func (r *recordingObs) Headers(int) {}
func (r *recordingObs) Output(chunk []byte) {
	r.outputs = append(r.outputs, bytes.Clone(chunk))
}
func (r *recordingObs) Complete() {}
func (r *recordingObs) Fail()     {}
func (r *recordingObs) Cancel()   {}

// writeLog is a ResponseWriter that records each write and flush.
type writeLog struct {
	h   http.Header
	ops []string // "w:<bytes>" or "flush"
}

func (w *writeLog) Header() http.Header { return w.h }
func (w *writeLog) Write(p []byte) (int, error) {
	w.ops = append(w.ops, "w:"+string(p))
	return len(p), nil
}
func (w *writeLog) WriteHeader(int) {}
func (w *writeLog) Flush()          { w.ops = append(w.ops, "flush") }

// scriptedReader returns its reads in order, then io.EOF, recording what
// the writer had received when each read was made. before, when set, runs
// first at each read with its index (to move a clock between reads).
type scriptedReader struct {
	reads  []string
	w      *writeLog
	seen   [][]string
	before func(i int)
}

func (r *scriptedReader) Read(p []byte) (int, error) {
	if r.before != nil {
		r.before(len(r.seen))
	}
	r.seen = append(r.seen, slices.Clone(r.w.ops))
	if len(r.reads) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.reads[0])
	r.reads = r.reads[1:]
	return n, nil
}

// TestSSEOneFlushPerRead: the events one read completes leave in one write
// and one flush before the next read (nothing waits for more bytes), an
// event finished by a later read leaves with that read, and every output
// event is still observed on its own.
func TestSSEOneFlushPerRead(t *testing.T) {
	ev := func(s string) string { return `data: {"choices":[{"delta":{"content":"` + s + `"}}]}` + "\n\n" }
	w := &writeLog{h: http.Header{}}
	r := &scriptedReader{w: w, reads: []string{
		ev("a") + ev("b") + "data: [DONE]\r\n\r\n" + ev("c")[:10],
		ev("c")[10:] + ev("d")[:len(ev("d"))-1],
		"\n",
	}}
	clk := clock.NewFake(epoch)
	px := &Proxy{cfg: Config{Clock: clk, Log: slog.New(slog.DiscardHandler), MaxEventBytes: 1 << 20,
		FirstOutputTimeout: time.Hour, InterEventTimeout: time.Hour}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := &recordingObs{}
	out, abort := px.streamSSE(ctx, cancel, w, http.NewResponseController(w), r, RequestInfo{}, obs, clk.Now(), true)
	if out != outcomeComplete || abort {
		t.Fatalf("outcome %v abort %v", out, abort)
	}
	want := [][]string{
		nil,
		{"w:" + ev("a") + ev("b") + "data: [DONE]\r\n\r\n", "flush"},
		{"w:" + ev("a") + ev("b") + "data: [DONE]\r\n\r\n", "flush", "w:" + ev("c"), "flush"},
		{"w:" + ev("a") + ev("b") + "data: [DONE]\r\n\r\n", "flush", "w:" + ev("c"), "flush", "w:" + ev("d"), "flush"},
	}
	if !reflect.DeepEqual(r.seen, want) {
		t.Fatalf("writer before each read:\n%q\nwant\n%q", r.seen, want)
	}
	var got []string
	for _, o := range obs.outputs {
		got = append(got, string(o))
	}
	if wantOut := []string{
		`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"delta":{"content":"b"}}]}`,
		`{"choices":[{"delta":{"content":"c"}}]}`, `{"choices":[{"delta":{"content":"d"}}]}`,
	}; !slices.Equal(got, wantOut) {
		t.Fatalf("outputs %q, want %q", got, wantOut)
	}
}

// TestSSEAggregatedFlushes: for an aggregated answer the reads are flushed
// one by one until the first event carrying text (a role chunk or a
// reasoning delta is not text), then held for the tunnel stream's buffer,
// except that a read a second or more after the last flush is flushed;
// without the hint every read is flushed. Every event is written either
// way, in order, and observed.
func TestSSEAggregatedFlushes(t *testing.T) {
	ev := func(s string) string { return `data: {"choices":[{"delta":{"content":"` + s + `"}}]}` + "\n\n" }
	role := `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	reasoning := `data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}` + "\n\n"
	reads := []string{role, reasoning, ev("a"), ev("b"), ev("c"), ev("d"), "data: [DONE]\n\n"}
	for _, tc := range []struct {
		name       string
		aggregated bool
		flushed    []bool // per read
	}{
		{"aggregated", true, []bool{true, true, true, false, false, true, false}},
		{"streamed", false, []bool{true, true, true, true, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			w := &writeLog{h: http.Header{}}
			r := &scriptedReader{w: w, reads: slices.Clone(reads), before: func(i int) {
				if i == 5 { // ev("d") arrives a second after ev("a") was flushed
					clk.Advance(time.Second)
				}
			}}
			px := &Proxy{cfg: Config{Clock: clk, Log: slog.New(slog.DiscardHandler), MaxEventBytes: 1 << 20,
				FirstOutputTimeout: time.Hour, InterEventTimeout: time.Hour}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			obs := &recordingObs{}
			info := RequestInfo{Aggregated: tc.aggregated}
			out, abort := px.streamSSE(ctx, cancel, w, http.NewResponseController(w), r, info, obs, clk.Now(), true)
			if out != outcomeComplete || abort {
				t.Fatalf("outcome %v abort %v", out, abort)
			}
			var want []string
			for i, rd := range reads {
				want = append(want, "w:"+rd)
				if tc.flushed[i] {
					want = append(want, "flush")
				}
			}
			if !slices.Equal(w.ops, want) {
				t.Fatalf("writer got\n%q\nwant\n%q", w.ops, want)
			}
			if len(obs.outputs) != 6 {
				t.Fatalf("%d outputs observed, want 6", len(obs.outputs))
			}
		})
	}
}

// carriesTextCases pin the pylon's side of the gateway's first-token
// rule: true only where the gateway certainly sees text, false on any
// doubt. They seed FuzzCarriesText.
var carriesTextCases = []struct {
	data string
	want bool
}{
	{`{"choices":[{"delta":{"content":"hi"}}]}`, true},
	{`{"choices":[{"delta":{"content":" "}}]}`, true},
	{`{"choices":[{"delta":{"content":"\u0000"}}]}`, true},
	{`{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{"content":"x"}}]}`, true},
	{`{"choices":[{"text":"hi"}]}`, true},
	{` {"id":"c","choices":[null,7,{"delta":{"role":"assistant","content":"a"},"logprobs":null}]} `, true},
	{`{"type":"response.output_text.delta","delta":"hi"}`, true},
	{`{"type":"response.output_text.delta","delta":"\u0068"}`, true},
	{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
	{`{"choices":[{"delta":{"content":null}}]}`, false},
	{`{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, false},
	{`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`, false},
	{`{"choices":[{"delta":{"content":[{"type":"text","text":"x"}]}}]}`, false},
	{`{"choices":[],"usage":{"completion_tokens":3}}`, false},
	{`{"type":"response.output_text.delta","delta":""}`, false},
	{`{"type":"response.output_text.delta","delta":{"text":"x"}}`, false},
	{`{"type":"response.reasoning_text.delta","delta":"hm"}`, false},
	{`{"type":"response.content_part.added","part":{"type":"output_text","text":""}}`, false},
	// What encoding/json reads differently from the bytes is doubt.
	{`{"choices":[{"delta":{"content":"x","content":""}}]}`, false},
	{`{"choices":[{"delta":{"content":"x","Content":""}}]}`, false},
	{`{"choices":[{"delta":{"content":"x","cont\u0065nt":""}}]}`, false},
	{`{"choices":[{"delta":{"content":"x"}}],"choices":[]}`, false},
	{`{"choices":[{"delta":{"content":"x"},"delta":{"role":"assistant"}}]}`, false},
	{`{"choiceſ":[],"choices":[{"delta":{"content":"x"}}]}`, false},
	{`{"CHOICES":[{"delta":{"content":"x"}}]}`, false},
	{`{"choices":[{"delta":{"content":"hi"}}]`, false},
	{`{"choices":[{"delta":{"content":"hi"}}]} x`, false},
	{`not json "content"`, false},
	{`["content"]`, false},
	{``, false},
}

func TestCarriesText(t *testing.T) {
	for _, tc := range carriesTextCases {
		if got := carriesText([]byte(tc.data)); got != tc.want {
			t.Errorf("carriesText(%s) = %v, want %v", tc.data, got, tc.want)
		}
	}
}

// carriesTextByJSON is carriesText's rule read through encoding/json, as
// a client of the gateway's kind would: a type mismatch leaves the field
// empty and the rest decoded.
func carriesTextByJSON(data []byte) bool {
	var ev struct {
		Type    string          `json:"type"`
		Delta   json.RawMessage `json:"delta"`
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return false
		}
	}
	if ev.Type == "response.output_text.delta" {
		var d string
		if json.Unmarshal(ev.Delta, &d) == nil && d != "" {
			return true
		}
	}
	for _, ch := range ev.Choices {
		if ch.Text != "" || ch.Delta.Content != "" {
			return true
		}
	}
	return false
}

// FuzzCarriesText: carriesText never sees text where encoding/json does
// not (it may miss some, which only keeps an aggregated answer flushing),
// and never panics.
func FuzzCarriesText(f *testing.F) {
	for _, tc := range carriesTextCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if carriesText(data) && !carriesTextByJSON(data) {
			t.Fatalf("carriesText(%q) is true; encoding/json sees no text", data)
		}
	})
}

// BenchmarkCarriesText reads the two events an aggregated answer usually
// checks: the role chunk and the first token.
func BenchmarkCarriesText(b *testing.B) {
	for _, tc := range []struct{ name, data string }{
		{"role", `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1764770000,"model":"bench-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
		{"token", `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1764770000,"model":"bench-model","choices":[{"index":0,"delta":{"content":"hello"},"logprobs":null,"finish_reason":null}]}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := []byte(tc.data)
			b.ReportAllocs()
			for b.Loop() {
				if carriesText(d) != (tc.name == "token") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}

// TestSSEAggregatedAnswer: over real HTTP, an aggregated answer reaches
// the client whole and in order, ending cleanly, and one cut short by the
// engine is reset, never ended like a whole one, even with events held.
// A cut answer may lose the events held when it was cut (its caller
// fails it anyway); the ones flushed before, up to the first text, and
// whatever else arrives come in order.
func TestSSEAggregatedAnswer(t *testing.T) {
	events := []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n",
	}
	for _, cut := range []bool{false, true} {
		t.Run("cut="+strconv.FormatBool(cut), func(t *testing.T) {
			up := newCommanded(t)
			h := newHarness(t, up.srv.URL, options{})
			hd := validHeaders("r")
			hd.Set(headers.StargateAggregated, "true")
			resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", hd, chatBody)
			defer func() { _ = resp.Body.Close() }()
			er := readEvents(resp.Body)
			for _, ev := range events {
				up.send(t, ev)
			}
			if cut {
				up.send(t, "!abort")
			} else {
				up.send(t, "data: [DONE]\n\n")
				close(up.cmds)
			}
			got, err := er.rest(t)
			h.waitServed(1)
			state := h.onlyObserver().State()
			if cut {
				if len(got) < 2 || len(got) > len(events) || !slices.Equal(got, events[:len(got)]) {
					t.Fatalf("client got %q; want the events in order, at least the first two", got)
				}
				if errors.Is(err, io.EOF) {
					t.Fatal("a cut aggregated answer ended cleanly; want it reset")
				}
				if state != stats.Failed {
					t.Fatalf("observer %v, want failed", state)
				}
				return
			}
			if want := append(slices.Clone(events), "data: [DONE]\n\n"); !slices.Equal(got, want) {
				t.Fatalf("client got %q, want %q", got, want)
			}
			if !errors.Is(err, io.EOF) || state != stats.Complete {
				t.Fatalf("stream ended with %v, observer %v; want EOF and complete", err, state)
			}
		})
	}
}
