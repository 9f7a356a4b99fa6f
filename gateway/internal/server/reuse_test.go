package server

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/hubclient"
)

// endTrackingBody is a hub body whose events come in one read and whose
// end (io.EOF) comes in the next, as the last chunk of a chunked body
// often arrives after the [DONE] event; it records whether it was closed
// before its end was read.
//
// With hold set, the end is held until hold closes (the client has the
// gateway's answer) or, if the gateway waits for the end first, until a
// bound, which sets heldTooLong.
type endTrackingBody struct {
	mu          sync.Mutex
	rest        string
	atEOF       bool
	closedEarly bool
	hold        <-chan struct{}
	heldTooLong *atomic.Bool
}

func (b *endTrackingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rest == "" {
		if b.hold != nil && !b.atEOF {
			select {
			case <-b.hold:
			case <-time.After(10 * time.Second): // bounds only the failing case
				b.heldTooLong.Store(true)
			}
		}
		b.atEOF = true
		return 0, io.EOF
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *endTrackingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closedEarly = b.closedEarly || !b.atEOF
	return nil
}

// endTrackingHub answers every request with an endTrackingBody, its end
// held on hold when that is set: a chat stream, or with responses set a
// Responses stream (ending with [DONE] when done is set too).
type endTrackingHub struct {
	mu          sync.Mutex
	bodies      []*endTrackingBody
	hold        <-chan struct{}
	heldTooLong atomic.Bool
	responses   bool
	done        bool
}

// The streams endTrackingHub answers with; each carries the text "hi".
const (
	trackedChat      = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	trackedResponses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\",\"output_text\":\"hi\"}}\n\n"
)

func (h *endTrackingHub) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	rest := trackedChat
	if h.responses {
		rest = trackedResponses
		if h.done {
			rest += "data: [DONE]\n\n"
		}
	}
	b := &endTrackingBody{hold: h.hold, heldTooLong: &h.heldTooLong, rest: rest}
	h.mu.Lock()
	h.bodies = append(h.bodies, b)
	h.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: b, Request: r}, nil
}

// aggregatedCases are the JSON clients whose answers the gateway builds
// from the hub's stream: chat (aggregated), and Responses (the terminal
// event's object) with and without [DONE] after it.
var aggregatedCases = []struct {
	name, path, body, want string
	responses, done        bool
}{
	{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, `"content":"hi"`, false, false},
	{"responses", "/v1/responses", `{"model":"m","input":"x"}`, `"output_text":"hi"`, true, false},
	{"responses [DONE]", "/v1/responses", `{"model":"m","input":"x"}`, `"output_text":"hi"`, true, true},
}

// TestAggregatedAnswerReadsHubBodyToItsEnd: a JSON client's answer is
// built from the hub's stream, and the hub body is read to its end
// before it is closed, even when that end comes after [DONE]: net/http
// closes the connection of a body closed early, and the next request
// would dial the hub again.
func TestAggregatedAnswerReadsHubBodyToItsEnd(t *testing.T) {
	for _, tc := range aggregatedCases {
		t.Run(tc.name, func(t *testing.T) {
			hub := &endTrackingHub{responses: tc.responses, done: tc.done}
			u, _ := url.Parse("http://hub.test")
			h := newHarness(t, opts{pool: hubclient.NewWithTransport(u, hub, "")})
			resp, b := h.post(tc.path, tc.body, nil)
			if resp.StatusCode != http.StatusOK || !strings.Contains(b, tc.want) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			hub.mu.Lock()
			defer hub.mu.Unlock()
			if len(hub.bodies) != 1 {
				t.Fatalf("%d hub requests, want 1", len(hub.bodies))
			}
			b0 := hub.bodies[0]
			b0.mu.Lock()
			defer b0.mu.Unlock()
			if b0.closedEarly {
				t.Fatal("the hub body was closed before its end was read")
			}
		})
	}
}

// TestAggregatedAnswerBeforeHubBodyEnds: a JSON client has its whole
// answer once the hub's stream reached [DONE] (chat) or its terminal
// event (Responses); the end of the hub's body, which the gateway still
// reads for the connection's sake, comes after the engine's, the pylon's
// and the hub's own and is not waited for.
func TestAggregatedAnswerBeforeHubBodyEnds(t *testing.T) {
	for _, tc := range aggregatedCases {
		t.Run(tc.name, func(t *testing.T) {
			answered := make(chan struct{})
			hub := &endTrackingHub{hold: answered, responses: tc.responses, done: tc.done}
			u, _ := url.Parse("http://hub.test")
			h := newHarness(t, opts{pool: hubclient.NewWithTransport(u, hub, "")})
			req, _ := http.NewRequest(http.MethodPost, h.ts.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := h.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			close(answered)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%d %s %v", resp.StatusCode, b, err)
			}
			if hub.heldTooLong.Load() {
				t.Fatal("the gateway held the client's answer until the hub's body ended")
			}
		})
	}
}

// redirectingHub answers every request with a 307 to another host and
// records every request it gets, a followed redirect included.
type redirectingHub struct {
	mu   sync.Mutex
	urls []string
}

func (h *redirectingHub) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	h.mu.Lock()
	h.urls = append(h.urls, r.URL.String())
	h.mu.Unlock()
	return &http.Response{StatusCode: http.StatusTemporaryRedirect, Request: r, Body: io.NopCloser(strings.NewReader("")),
		Header: http.Header{"Location": {"http://elsewhere.test/steal"}, "Content-Type": {"text/plain"}}}, nil
}

// TestHubRedirectNotFollowed: a redirect from the hub (an engine's,
// relayed by the pylon and the hub) is answered to the client as an
// upstream error with its status; the gateway never sends the request,
// and so the prompt, to the URL it names.
func TestHubRedirectNotFollowed(t *testing.T) {
	hub := &redirectingHub{}
	u, _ := url.Parse("http://hub.test")
	h := newHarness(t, opts{pool: hubclient.NewWithTransport(u, hub, "")})
	resp, b := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"secret"}]}`, nil)
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(b, `"code":"upstream_error"`) {
		t.Fatalf("%d %s; want the 307 as an OpenAI error", resp.StatusCode, b)
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if len(hub.urls) != 1 || !strings.HasPrefix(hub.urls[0], "http://hub.test/") {
		t.Fatalf("requests sent: %q; want the one to the hub", hub.urls)
	}
}
