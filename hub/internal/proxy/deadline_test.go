package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// wantDeadline504 fails t unless res is the hub's 504 deadline_exceeded:
// the OpenAI error shape with the code in x-stargate-error-code too.
func wantDeadline504(t *testing.T, res respond) {
	t.Helper()
	var e struct{ Error openai.Error }
	_ = json.Unmarshal([]byte(res.body), &e)
	if res.err != nil || res.status != http.StatusGatewayTimeout || e.Error.Code != headers.ErrorCodeDeadlineExceeded ||
		e.Error.Type != openai.TypeServer || res.header.Get(headers.StargateErrorCode) != headers.ErrorCodeDeadlineExceeded {
		t.Fatalf("response %+v; want 504 %s", res, headers.ErrorCodeDeadlineExceeded)
	}
}

// A request waiting for a cluster with room stops waiting at its
// deadline, far inside its x-max-wait-ms: 504 deadline_exceeded, no pass
// after the deadline, counted as a routing-stage expiry (not a 499).
func TestDeadlineEndsRoutingWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	sp := newScripted(t, -1)
	h := newHarness(t, sp.route(), withClock(clk))
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "60000")
	hdr.Set(headers.StargateDeadlineMs, "500")
	deadline := t0.Add(500 * time.Millisecond)
	done := h.sendAsync(context.Background(), hdr)
	wait(t, sp.calls, "the first pick")
	picks := 1
	waitTimers(t, clk, 2) // the deadline and the wait for a change
	for clk.Now().Before(deadline) {
		clk.Advance(100 * time.Millisecond)
	}
	wantDeadline504(t, wait(t, done, "the response"))
	h.inflight.Wait()
	for len(sp.calls) > 0 {
		picks++
		if p := <-sp.calls; p.now.After(deadline) {
			t.Errorf("a pass at %v, after the deadline %v", p.now.Sub(t0), deadline.Sub(t0))
		}
	}
	if picks != 1 {
		t.Errorf("%d passes in a 500 ms wait with nothing published; want 1, then the 1 s sleep cut by the deadline", picks)
	}
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||504": 1})
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|routing": 1})
}

// A request for a known model without a backend stops waiting for one at
// its deadline, before --proxy-model-unavailable-wait-ms.
func TestDeadlineEndsBackendWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	h.addGone()
	h.store.Remove("g1")
	hdr := goneHeaders()
	hdr.Set(headers.StargateDeadlineMs, "2000")
	done := h.sendAsync(context.Background(), hdr)
	waitTimers(t, clk, 2) // the deadline and the wait for a backend
	clk.Advance(2*time.Second - time.Millisecond)
	waitTimers(t, clk, 2)
	select {
	case got := <-done:
		t.Fatalf("answered %+v before the deadline", got)
	default:
	}
	clk.Advance(time.Millisecond)
	wantDeadline504(t, wait(t, done, "the response"))
	h.inflight.Wait()
	wantSeries(t, "requests_total", h.m.requests, series{"rk|gone||504": 1})
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|gone|routing": 1})
}

// A deadline that passes while the pylon works cancels the attempt (its
// tunnel stream is reset, so the pylon and its engine stop) and answers
// 504 at once: no wait for --tunnel-request-timeout-ms, no retry on a
// sibling, no breaker failure charged to the backend.
func TestDeadlineCancelsUpstream(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	entered, cancelled := make(chan struct{}), make(chan struct{})
	h.backends["a1"].handle(func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		close(cancelled)
	})
	hdr := validHeaders()
	hdr.Set(headers.StargateDeadlineMs, "1000")
	done := h.sendAsync(context.Background(), hdr)
	wait(t, entered, "a1 to receive the request")
	clk.Advance(time.Second - time.Millisecond)
	select {
	case <-cancelled:
		t.Fatal("attempt cancelled before the deadline")
	default:
	}
	clk.Advance(time.Millisecond)
	wait(t, cancelled, "the attempt to be cancelled")
	wantDeadline504(t, wait(t, done, "the response"))
	h.inflight.Wait()
	if hits := h.hits(); len(hits) != 1 || hits["a1"] != 1 {
		t.Errorf("backends hit %v; want a1 once", hits)
	}
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|proxy_504": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|504": 1})
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|upstream": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})
}

// The pylon is told what is left of the deadline when each attempt is
// sent: a retry after 300 ms of the first attempt's work sends 300 ms less.
// A request without a deadline forwards none.
func TestDeadlineForwardedRemaining(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		clk.Advance(300 * time.Millisecond) // a1 works, then refuses
		retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected)(w, r)
	})
	hdr := validHeaders()
	hdr.Set(headers.StargateDeadlineMs, "2000")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "b1" {
		t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get(headers.InferenceServerID), body)
	}
	for id, want := range map[string]string{"a1": "2000", "b1": "1700"} {
		reqs := h.backends[id].requests()
		if len(reqs) != 1 {
			t.Fatalf("%s got %d requests; want 1", id, len(reqs))
		}
		if got := reqs[0].Header.Values(headers.StargateDeadlineMs); len(got) != 1 || got[0] != want {
			t.Errorf("%s got x-stargate-deadline-ms %q; want %q", id, got, want)
		}
	}

	resp, body = h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for id, b := range h.backends {
		for _, r := range b.requests()[min(len(b.requests()), 1):] {
			if v := r.Header.Values(headers.StargateDeadlineMs); len(v) > 0 {
				t.Errorf("%s got x-stargate-deadline-ms %q from a request without a deadline", id, v)
			}
		}
	}
}

// A deadline that passes while the answer streams cuts the stream: the
// client's read fails (the response is aborted, never ended cleanly), and
// the expiry is counted at the streaming stage.
func TestDeadlineCutsStream(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	cancelled := make(chan struct{})
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(sseChunk1))
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	hdr := validHeaders()
	hdr.Set(headers.StargateDeadlineMs, "5000")
	resp := h.send(context.Background(), hdr, chatBody)
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev != sseChunk1 {
		t.Fatalf("event 1 = %q", ev)
	}
	clk.Advance(5 * time.Second)
	wait(t, cancelled, "the upstream stream to be cancelled")
	rest, err := readRest(br)
	if err == nil || strings.Contains(rest, "[DONE]") {
		t.Fatalf("rest %q, read error %v; want an aborted stream", rest, err)
	}
	h.inflight.Wait()
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|streaming": 1})
}

// readRest reads what is left of a body within a generous bound.
func readRest(br *bufio.Reader) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(br)
		ch <- res{string(b), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(10 * time.Second):
		return "", nil
	}
}

// A request whose deadline has passed when it arrives (0 ms left) is
// answered at once: no routing, no backend.
func TestDeadlineExpiredOnArrival(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	hdr := validHeaders()
	hdr.Set(headers.StargateDeadlineMs, "0")
	resp, body := h.do(hdr, chatBody)
	wantDeadline504(t, respond{status: resp.StatusCode, header: resp.Header, body: body})
	if hits := h.hits(); len(hits) != 0 {
		t.Errorf("backends hit %v; want none", hits)
	}
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||504": 1})
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|received": 1})
}

// A malformed or out-of-range x-stargate-deadline-ms is a 400 naming the
// header, like any malformed numeric header.
func TestDeadlineHeaderInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, v := range []string{"soon", "-1", "1.5", "", "86400001"} {
		hdr := validHeaders()
		hdr.Set(headers.StargateDeadlineMs, v)
		resp, body := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q: status %d, want 400: %s", v, resp.StatusCode, body)
		}
		if e := openAIError(t, resp, body); e.Param != headers.StargateDeadlineMs || e.Code != "invalid_header" {
			t.Errorf("%q: error %+v; want invalid_header naming %s", v, e, headers.StargateDeadlineMs)
		}
	}
	if hits := h.hits(); len(hits) != 0 {
		t.Errorf("backends hit %v; want none", hits)
	}
}

// The pylon's own deadline answer (504, x-stargate-error-code:
// deadline_exceeded), which only comes when it wins a race with the hub's
// timer, is answered as the hub's deadline: the OpenAI 504, no retry, no
// failure charged to the backend. An engine's plain 504 still passes
// through.
func TestPylonDeadlineAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.backends["a1"].handle(answer(http.StatusGatewayTimeout, headers.StargateErrorCode, headers.ErrorCodeDeadlineExceeded))
	hdr := validHeaders()
	hdr.Set(headers.StargateDeadlineMs, "60000")
	resp, body := h.do(hdr, chatBody)
	wantDeadline504(t, respond{status: resp.StatusCode, header: resp.Header, body: body})
	if hits := h.hits(); len(hits) != 1 || hits["a1"] != 1 {
		t.Errorf("backends hit %v; want a1 once", hits)
	}
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|upstream": 1})

	for _, id := range []string{"a1", "a2"} {
		h.backends[id].handle(answer(http.StatusGatewayTimeout))
	}
	resp, body = h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, `"upstream_status":504`) {
		t.Fatalf("an engine's 504: %d %s; want it passed through", resp.StatusCode, body)
	}
	wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|upstream": 1})
}

// lateTimers is a fake clock whose AfterFunc timers never fire: the
// request's deadline timer as a busy machine may run it, after the
// pylon's own deadline (which falls just after the hub's) has ended the
// attempt.
type lateTimers struct{ *clock.Fake }

func (lateTimers) AfterFunc(time.Duration, func()) clock.Timer { return idleTimer{} }

// idleTimer is a timer that never fires.
type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return nil }
func (idleTimer) Stop() bool               { return true }
func (idleTimer) Reset(time.Duration) bool { return true }

// An attempt the pylon ends once the request's deadline has passed on the
// hub's clock is the deadline's doing even before the hub's own timer has
// fired: a reset before the head is the 504 (no retry), a reset mid-stream
// aborts the client's stream, and neither is charged to the backend's
// breaker.
func TestDeadlinePassedBeforeTheTimer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		head  bool
		stage string
	}{{"before the head", false, "upstream"}, {"mid-stream", true, "streaming"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := lateTimers{clock.NewFake(t0)}
			brk, err := breaker.New(breaker.DefaultConfig(), clk)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, nil, withClock(clk), func(c *Config) { c.Breakers = brk })
			for _, id := range []string{"a1", "a2"} {
				h.backends[id].handle(func(w http.ResponseWriter, _ *http.Request) {
					if tc.head {
						w.Header().Set("Content-Type", "text/event-stream")
						w.WriteHeader(http.StatusOK)
						_, _ = w.Write([]byte(sseChunk1))
						_ = http.NewResponseController(w).Flush()
					}
					clk.Advance(2 * time.Second) // past the deadline; the hub's timer has not fired
					panic(http.ErrAbortHandler)  // the pylon's deadline resets the stream
				})
			}
			hdr := validHeaders()
			hdr.Set(headers.StargateDeadlineMs, "1000")
			res := wait(t, h.sendAsync(context.Background(), hdr), "the response")
			if tc.head {
				if res.err == nil {
					t.Fatalf("response %+v; want the stream aborted", res)
				}
			} else {
				wantDeadline504(t, res)
			}
			h.inflight.Wait()
			if hits := h.hits(); len(hits) != 1 {
				t.Errorf("backends hit %v; want one, no retry", hits)
			}
			wantSeries(t, "deadline_exceeded_total", h.m.deadlines, series{"rk|m|" + tc.stage: 1})
			for _, b := range brk.Snapshot() {
				if b.Failures != 0 {
					t.Errorf("breaker of %s charged %d failures for the deadline", b.Backend, b.Failures)
				}
			}
		})
	}
}
