package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// hungHub accepts requests and never answers them: a hub that hangs.
// got receives one value per request it holds; done is closed when the
// gateway gives up on a request (its context ends).
type hungHub struct {
	srv  *httptest.Server
	got  chan struct{}
	done chan struct{}
	// release frees every held request; a test registers it as a cleanup
	// after its harness, so that it runs first and a gateway still
	// waiting on the hub (the defect) cannot block the harness's close.
	release func()
}

func newHungHub(t *testing.T) *hungHub {
	t.Helper()
	h := &hungHub{got: make(chan struct{}, 16), done: make(chan struct{}, 16)}
	release := make(chan struct{})
	h.release = sync.OnceFunc(func() { close(release) })
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the whole body, as the hub does, lets the server see
		// the gateway hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		h.got <- struct{}{}
		select {
		case <-r.Context().Done():
			h.done <- struct{}{}
		case <-release:
		}
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.release) // runs first: frees the handlers
	return h
}

// result is one client request's outcome.
type result struct {
	status int
	body   string
	err    error
}

// send runs req in the background; the gateway's answer arrives on the
// returned channel.
func (h *harness) send(method, path, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		ch <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	return ch
}

// await returns the outcome, failing the test if none arrives in real
// time: the bound only turns a hang (the defect) into a failure, it
// orders nothing.
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from the gateway: the request hangs")
		return result{}
	}
}

// waitTimers blocks until exactly n timers are armed on the harness's
// fake clock, woken by every change to its timer set (no polling).
func (h *harness) waitTimers(n int) {
	h.t.Helper()
	guard := time.After(10 * time.Second)
	for {
		changed := h.clock.Changed()
		if got := h.clock.Timers(); got == n {
			return
		}
		select {
		case <-changed:
		case <-guard:
			h.t.Fatalf("%d timers armed, want %d", h.clock.Timers(), n)
		}
	}
}

// TestHubHeadTimeout: a hub that never sends its response head costs a
// client exactly --hub-response-header-timeout on the injected clock,
// streams and non-streaming requests alike, then a 504 upstream_timeout
// in the OpenAI shape; the gateway cancels its request to the hub.
func TestHubHeadTimeout(t *testing.T) {
	const head = 5 * time.Minute
	hub := newHungHub(t)
	h := newHarness(t, opts{upstream: hub.srv, headTimeout: head, requestTimeout: 15 * time.Minute})
	t.Cleanup(hub.release)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`},
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{http.MethodPost, "/v1/responses", `{"model":"m","stream":true,"input":"x"}`},
		{http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`},
		{http.MethodGet, "/v1/models", ""},
	} {
		ch := h.send(tc.method, tc.path, tc.body)
		<-hub.got // the hub holds the request: the gateway's timers are armed
		armed := h.clock.Timers()
		h.clock.Advance(head - time.Millisecond)
		if h.clock.Timers() != armed {
			t.Fatalf("%s %s: a timer fired before the head timeout", tc.method, tc.path)
		}
		h.clock.Advance(time.Millisecond)
		r := await(t, ch)
		var e struct {
			Error struct{ Type, Code string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(r.body), &e)
		if r.status != http.StatusGatewayTimeout || e.Error.Type != "server_error" || e.Error.Code != "upstream_timeout" {
			t.Errorf("%s %s: %d %s, want 504 server_error upstream_timeout", tc.method, tc.path, r.status, r.body)
		}
		<-hub.done      // the gateway cancelled its hub request
		h.waitTimers(0) // and stopped its timers: the next request starts clean
	}
}

// TestHeadTimeoutSparesStartedStreams: once the hub's head has arrived,
// neither the head timeout nor --hub-request-timeout cuts a stream,
// however long it runs.
func TestHeadTimeoutSparesStartedStreams(t *testing.T) {
	hub := newFakeHub(t)
	hub.gate, hub.firstOut = make(chan struct{}), make(chan struct{})
	h := newHarness(t, opts{hub: hub, headTimeout: time.Minute, requestTimeout: time.Minute})
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"Hel"`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	if n := h.clock.Timers(); n != 0 {
		t.Fatalf("%d timers armed on a started stream, want none", n)
	}
	h.clock.Advance(time.Hour)
	close(hub.gate)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") || strings.Contains(string(rest), "error") {
		t.Fatalf("rest of the stream %q", rest)
	}
}

// TestRequestTimeoutNonStreaming: a non-streaming exchange whose head
// arrived but whose body does not finish within --hub-request-timeout is
// a 504, not a 502 and not a hang.
func TestRequestTimeoutNonStreaming(t *testing.T) {
	hub := newFakeHub(t)
	hub.gate, hub.firstOut = make(chan struct{}), make(chan struct{})
	const whole = 15 * time.Minute
	h := newHarness(t, opts{hub: hub, headTimeout: 5 * time.Minute, requestTimeout: whole})
	t.Cleanup(func() { close(hub.gate) }) // before the harness closes: frees a held stream
	ch := h.send(http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	<-hub.firstOut
	h.waitTimers(1) // the head arrived: only the whole-exchange timer is left
	h.clock.Advance(whole)
	r := await(t, ch)
	if r.status != http.StatusGatewayTimeout || !strings.Contains(r.body, `"code":"upstream_timeout"`) {
		t.Fatalf("%d %s, want 504 upstream_timeout", r.status, r.body)
	}
}
