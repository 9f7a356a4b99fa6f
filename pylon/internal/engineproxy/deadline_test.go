package engineproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// The engine request ends at the request's deadline on the injected
// clock, not a moment before: the engine sees its request cancelled, the
// hub gets a 504 in the pylon's problem shape, and the engine is neither
// marked down nor retried (the deadline is not its failure). The engine
// never sees x-stargate-deadline-ms.
func TestDeadlineCancelsEngineRequest(t *testing.T) {
	cancelled := make(chan struct{})
	up := newScripted(t, func(_ http.ResponseWriter, r *http.Request, _ recorded) {
		<-r.Context().Done()
		close(cancelled)
	})
	h := newHarness(t, up.srv.URL, options{})
	hd := validHeaders("deadline")
	hd.Set(headers.StargateDeadlineMs, "1500")
	done := make(chan *http.Response, 1)
	go func() { done <- h.request(context.Background(), http.MethodPost, "/v1/chat/completions", hd, chatBody) }()
	rec := up.next(t)
	if v, ok := rec.Header[http.CanonicalHeaderKey(headers.StargateDeadlineMs)]; ok {
		t.Errorf("the engine got x-stargate-deadline-ms %q", v)
	}
	h.clk.WaitForTimers(1)
	h.clk.Advance(1500*time.Millisecond - time.Nanosecond)
	select {
	case <-cancelled:
		t.Fatal("the engine request was cancelled before the deadline")
	default:
	}
	h.clk.Advance(time.Nanosecond)
	select {
	case <-cancelled:
	case <-time.After(hangGuard):
		t.Fatal("the engine request was not cancelled at the deadline")
	}
	var resp *http.Response
	select {
	case resp = <-done:
	case <-time.After(hangGuard):
		t.Fatal("no answer after the deadline")
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d (%s), want 504", resp.StatusCode, b)
	}
	if p := problemBody(t, resp, b); p["reason"] != headers.ErrorCodeDeadlineExceeded {
		t.Errorf("problem %v, want reason %s", p, headers.ErrorCodeDeadlineExceeded)
	}
	if got := resp.Header.Get(headers.StargateErrorCode); got != headers.ErrorCodeDeadlineExceeded {
		t.Errorf("x-stargate-error-code %q, want %s (the hub tells it from an engine's 504 by it)", got, headers.ErrorCodeDeadlineExceeded)
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Cancelled {
		t.Errorf("observer %v, want cancelled", s)
	}
	for _, c := range []struct{ name, labels string }{
		{"pylon_deadline_exceeded_total", "model=test-model,routing_key=,stage=engine"},
		{"pylon_requests_total", "model=test-model,routing_key=,status=cancelled"},
		{"pylon_upstream_engine_requests_total", "engine=" + label(t, up.srv.URL) + ",status=cancelled"},
	} {
		if got := h.metric(c.name, c.labels); got != 1 {
			t.Errorf("%s{%s} = %v, want 1", c.name, c.labels, got)
		}
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+label(t, up.srv.URL)); got != 1 {
		t.Errorf("engine up = %v after the deadline, want 1", got)
	}
	if n := len(up.received()); n != 1 {
		t.Errorf("the engine got %d requests, want 1 (no retry)", n)
	}
}

// A request whose deadline has passed when it arrives (0 ms left) is a
// 504 at once; the engine is never called.
func TestDeadlineExpiredNeverCallsEngine(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{})
	hd := validHeaders("late")
	hd.Set(headers.StargateDeadlineMs, "0")
	resp, b := h.post("/v1/chat/completions", hd, chatBody)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d (%s), want 504", resp.StatusCode, b)
	}
	problemBody(t, resp, b)
	if n := len(up.received()); n != 0 {
		t.Errorf("the engine got %d requests, want none", n)
	}
	if got := h.metric("pylon_deadline_exceeded_total", "model=test-model,routing_key=,stage=received"); got != 1 {
		t.Errorf("deadline_exceeded{received} = %v, want 1", got)
	}
}

// A malformed or out-of-range x-stargate-deadline-ms is a 400, and the
// engine is never called.
func TestDeadlineHeaderInvalid(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{})
	for _, v := range []string{"soon", "-5", "", "86400001"} {
		hd := validHeaders("bad")
		hd.Set(headers.StargateDeadlineMs, v)
		resp, b := h.post("/v1/chat/completions", hd, chatBody)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q: status %d (%s), want 400", v, resp.StatusCode, b)
		}
		if p := problemBody(t, resp, b); p["detail"] != "invalid x-stargate-deadline-ms header" {
			t.Errorf("%q: detail %v", v, p["detail"])
		}
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("the engine got %d requests, want none", n)
	}
}

// A deadline that passes mid-stream cancels the engine request and resets
// the hub's stream (never a clean end, which would pass for a whole
// answer).
func TestDeadlineCutsStream(t *testing.T) {
	up := newCommanded(t)
	h := newHarness(t, up.srv.URL, options{})
	hd := validHeaders("cut")
	hd.Set(headers.StargateDeadlineMs, "2000")
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", hd, chatBody)
	defer func() { _ = resp.Body.Close() }()
	er := readEvents(resp.Body)
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
	up.send(t, ev)
	if got := er.next(t); got != ev {
		t.Fatalf("client got %q, want %q", got, ev)
	}
	h.clk.Advance(2 * time.Second)
	up.waitCancelled(t)
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("a stream the deadline cut ended cleanly; want it reset")
	}
	h.waitServed(1)
	if s := h.onlyObserver().State(); s != stats.Cancelled {
		t.Errorf("observer %v, want cancelled", s)
	}
	if got := h.metric("pylon_deadline_exceeded_total", "model=test-model,routing_key=,stage=streaming"); got != 1 {
		t.Errorf("deadline_exceeded{streaming} = %v, want 1", got)
	}
}
