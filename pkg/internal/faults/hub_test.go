package faults

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// Bounds of TestHubRestartUnderLoad.
const (
	// servedAgainBound bounds the time from the restarted hub being ready
	// to every pylon routable again and a request served: a pylon's first
	// redial comes within its backoff (1 s, doubling, with jitter) and
	// the hub routes a pylon after its first RTT probe (1 s).
	servedAgainBound = 15 * time.Second
	// answerBound bounds any request's wait for its answer: the gateway's
	// max_wait_ms (10 s, the hub's wait for a backend while its pylons
	// reconnect) plus margin. A client past it would be a hung request.
	answerBound = 15 * time.Second
)

// phase is where a request was sent, relative to the hub's restart.
type phase int32

const (
	beforeStop phase = iota // the hub was up
	outage                  // stopping, stopped or starting
	reconnect               // the hub was ready, its pylons not all routable yet
	recovered               // every pylon routable again
)

// TestHubRestartUnderLoad: two clusters under a steady load; the hub is
// stopped (SIGTERM, then in a second round SIGKILL), restarted on the same
// ports, and its pylons reconnect.
//
// Bounds: every request ends complete, with a typed error (502 or 503 in
// the OpenAI shape) or, for a stream cut by the stop, with an error the
// client sees; none ends cleanly cut, none hangs, none waits longer than
// answerBound. Every pylon is routable again and requests are served
// within servedAgainBound of the restart; from then on 0 requests fail.
func TestHubRestartUnderLoad(t *testing.T) {
	st := startStack(t, stack.Options{Fleet: fleet(2)})
	ep := st.Endpoints()
	cl := newClient(httpClient(t), ep.APIKey)

	for _, v := range []struct {
		name string
		stop func() error
	}{
		{"sigterm", func() error { _, err := st.Terminate("hub", 10*time.Second); return err }},
		{"sigkill", func() error { return st.Kill("hub") }},
	} {
		t.Run(v.name, func(t *testing.T) {
			var now atomic.Int32
			var inPhase [4]atomic.Int64
			stop := make(chan struct{})
			done := make(chan []result, 1) // buffered: a failed test does not wait for the load
			go func() {
				done <- load(t.Context(), 8, stop, func(w, k int) result {
					p := phase(now.Load())
					r := cl.chat(t.Context(), ep.Gateway, "", 20)
					r.tag = phaseName[p]
					inPhase[p].Add(1)
					return r
				})
			}()
			eventually(t, 20*time.Second, "20 requests before the stop", func() bool { return inPhase[beforeStop].Load() >= 20 })
			now.Store(int32(outage))
			if err := v.stop(); err != nil {
				t.Fatal(err)
			}
			if err := st.Restart(t.Context(), "hub"); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			now.Store(int32(reconnect))
			if err := st.WaitRoutable(t.Context(), []string{"a", "b"}); err != nil {
				t.Fatal(err)
			}
			routable := time.Since(restarted)
			now.Store(int32(recovered))
			eventually(t, 30*time.Second, "40 requests after recovery", func() bool { return inPhase[recovered].Load() >= 40 })
			close(stop)
			rs := <-done

			byPhase := map[string][]result{}
			for _, r := range rs {
				byPhase[r.tag] = append(byPhase[r.tag], r)
			}
			for _, p := range []phase{beforeStop, outage, reconnect, recovered} {
				t.Logf("%-10s %3d requests: %s", phaseName[p], len(byPhase[phaseName[p]]), tally(byPhase[phaseName[p]]))
			}
			t.Logf("every pylon routable %v after the restarted hub was ready (bound %v)", routable.Round(100*time.Millisecond), servedAgainBound)
			if routable > servedAgainBound {
				t.Errorf("pylons routable %v after the restart (bound %v)", routable, servedAgainBound)
			}
			if n := count(byPhase[phaseName[recovered]], func(r result) bool { return r.outcome != complete }); n != 0 {
				t.Errorf("%d requests failed after every pylon was back (bound 0)", n)
			}
			var slowest time.Duration
			for _, r := range rs {
				slowest = max(slowest, r.took)
				switch r.outcome {
				case complete, errorEvent, broken:
				case typedError:
					if r.status != http.StatusBadGateway && r.status != http.StatusServiceUnavailable && r.status != http.StatusGatewayTimeout {
						t.Errorf("request %d: typed error with status %d, want 502, 503 or 504", r.seq, r.status)
					}
				default:
					t.Errorf("request %d (%s) ended %v (bound: none)", r.seq, r.tag, r.outcome)
				}
				if r.took > answerBound {
					t.Errorf("request %d (%s) took %v (bound %v)", r.seq, r.tag, r.took, answerBound)
				}
			}
			t.Logf("slowest request %v (bound %v)", slowest.Round(10*time.Millisecond), answerBound)
		})
	}
}

var phaseName = [...]string{"before", "outage", "reconnect", "recovered"}
