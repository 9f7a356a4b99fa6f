package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// register applies the fixture registration of backend id again: its
// next registration snapshot, a waking publication of its targets.
func (h *harness) register(id string) {
	h.store.Apply(state.Backend{ID: id, ClusterID: clusterOf[id], URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
		fixtureRegistration(id), time.Millisecond, true)
}

// With x-max-wait-ms and no timed wait the request waits for a change of
// its target: each registration of the target ends the sleep at once, on
// the same clock instant; another target's registration does not
// (docs/design/hub-request.md#waits).
func TestUntimedWaitWakesOnPublication(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	sp := newScripted(t, 2)
	h := newHarness(t, sp.route(), withClock(clk))
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "1000")
	done := h.sendAsync(context.Background(), hdr)
	wait(t, sp.calls, "the first pick")
	waitTimers(t, clk, 1)
	h.register("s1") // model solo's: no pass
	h.register("b1") // model m's: a pass now
	if p := wait(t, sp.calls, "the pass after m's registration"); !p.now.Equal(t0) {
		t.Fatalf("passed at +%v, want at the registration", p.now.Sub(t0))
	}
	// Declined again, it sleeps; had solo's registration woken it, this
	// second pass would have chosen and the request would be over.
	waitTimers(t, clk, 1)
	h.register("a1")
	if p := wait(t, sp.calls, "the pass after the next registration"); !p.now.Equal(t0) {
		t.Fatalf("passed at +%v, want at the registration", p.now.Sub(t0))
	}
	res := wait(t, done, "the response")
	if res.err != nil || res.status != http.StatusOK || res.header.Get(headers.StargateClusterID) != "ca" {
		t.Fatalf("response %+v", res)
	}
	h.inflight.Wait()
	if n := len(sp.calls); n != 0 {
		t.Errorf("%d passes more than the registrations of m explain", n)
	}
	wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|scripted|primary": 1})
}

// A waiter sleeps through every publication of other targets and through
// the reservations of its own target (they only add load), and ends at
// its deadline: exactly two passes, the second at the deadline, on
// virtual time.
func TestWaitEndsAtDeadlineThroughOtherPublications(t *testing.T) {
	for _, untimed := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			clk := clock.Real{}
			store := state.New(clk)
			store.Apply(wakeBackend, wakeRegistration(0), time.Millisecond, true)
			sp := &slotPicker{timed: !untimed, clk: clk}
			h := wakeProxy(store, clk, sp)
			other := state.Backend{ID: "o", ClusterID: "c", URL: "http://o", RoutingKey: rk}
			stop := make(chan struct{})
			go func() { // another target's pylon, reporting every 5 ms
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					s := &protocol.ModelStats{LastMeanInputTPS: 1000}
					store.Apply(other, &protocol.Registration{V: protocol.Version, InferenceServerID: "o", ClusterID: "c",
						Models: map[string]protocol.ModelEntry{"other": {Status: protocol.StatusActive, Stats: s}}}, time.Millisecond, true)
					store.Reserve(routing.Target{RoutingKey: rk, Model: model}, "c", "w", 1, 0)
				}
			}()
			start := time.Now()
			req := wakeRequest(context.Background(), untimed)
			req.Header.Set(headers.MaxWaitMs, "300")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			close(stop)
			if rec.Code != http.StatusServiceUnavailable || time.Since(start) != 300*time.Millisecond {
				t.Errorf("untimed=%v: %d after %v, want the 503 at the 300 ms deadline", untimed, rec.Code, time.Since(start))
			}
			if n := sp.passes.Load(); n != 2 {
				t.Errorf("untimed=%v: %d passes, want 2: at the start and at the deadline", untimed, n)
			}
		})
	}
}

// A waiting request whose client leaves ends at that instant with nothing
// written, leaving no timer or goroutine behind (synctest fails a test
// that leaves one blocked in its bubble).
func TestWaitingClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.Real{}
		store := state.New(clk)
		store.Apply(wakeBackend, wakeRegistration(0), time.Millisecond, true)
		h := wakeProxy(store, clk, &slotPicker{timed: true, clk: clk})
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		ended := make(chan time.Time, 1)
		go func() {
			h.ServeHTTP(rec, wakeRequest(ctx, false))
			ended <- time.Now()
		}()
		time.Sleep(3 * time.Second) // asleep in its wait
		left := time.Now()
		cancel()
		synctest.Wait()
		select {
		case at := <-ended:
			if at != left || rec.Body.Len() != 0 {
				t.Fatalf("ended %v after the client left, %d bytes written", at.Sub(left), rec.Body.Len())
			}
		default:
			t.Fatal("the request still waits after its client left")
		}
	})
}
