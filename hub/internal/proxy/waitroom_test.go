package proxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/waitroom"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// roomPicker chooses cluster ca while it has room and asks to wait 40 ms
// otherwise. Room is units of free, each one request of 100 input tokens,
// less the hub's reservations on ca (which the snapshot shows as queued
// input): like the real load balancers, it sees a request the moment the
// hub reserves for it. Reservations stay until the backend's next
// statistics, which the harness never sends, so a test adds room by
// raising free. A request with a last-cluster hint is a returning
// session, any other a new one.
type roomPicker struct {
	free  atomic.Int32
	calls chan string // request ids, one per pick
}

func (p *roomPicker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	select {
	case p.calls <- req.ID:
	default: // nobody is looking at the picks now
	}
	session := routing.SessionNew
	if req.LastClusterID != "" {
		session = routing.SessionReturning
	}
	for i := range snap.Clusters {
		c := &snap.Clusters[i]
		if c.ClusterID == "ca" && uint64(p.free.Load())*100 > c.Stats.QueuedInputSize {
			d := lb.NewDecision(snap, i, 1, req)
			d.Session, d.GroupSize = session, 1
			return d, true
		}
	}
	return routing.Decision{Wait: 40 * time.Millisecond, Session: session}, false
}

// roomHarness is a harness on a fake clock whose ca backends report the
// request ids in arrival order and hold every answer until release is
// closed.
func roomHarness(t *testing.T, wr waitroom.Config) (h *harness, clk *clock.Fake, rp *roomPicker, served chan string, release chan struct{}) {
	t.Helper()
	clk = clock.NewFake(t0)
	rp = &roomPicker{calls: make(chan string, 100)}
	h = newHarness(t, fixedResolver{lb.Route{Algorithm: "room", Picker: rp, LastClusterAffinity: true}},
		withClock(clk), func(c *Config) { c.WaitingRoom = wr })
	served, release = make(chan string, 10), make(chan struct{})
	for _, id := range []string{"a1", "a2"} {
		h.backends[id].handle(func(w http.ResponseWriter, r *http.Request) {
			served <- r.Header.Get(headers.RequestID)
			<-release
			ok(w, r)
		})
	}
	return h, clk, rp, served, release
}

func roomHeaders(id string, returning bool) http.Header {
	hdr := validHeaders()
	hdr.Set(headers.RequestID, id)
	hdr.Set(headers.MaxWaitMs, "10000")
	if returning {
		hdr.Set(headers.StargateLastClusterID, "ca")
	}
	return hdr
}

// pickOf waits for the pick of request id, skipping other requests' picks.
func pickOf(t *testing.T, calls <-chan string, id string) {
	t.Helper()
	for {
		if got := wait(t, calls, "a pick of "+id); got == id {
			return
		}
	}
}

// advanceUntil moves clk 40 ms (the room picker's wait, which nothing
// publishes to cut short: a test adds room by raising free) at a time
// until done delivers: each time
// at least n timers are armed (n counts the waiting requests' sleeps), it
// advances and then waits for a pick or for done, so the clock never runs
// ahead of a request that is passing or has reached a backend.
func advanceUntil[T any](t *testing.T, clk *clock.Fake, picks <-chan string, n int, done <-chan T) T {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for len(picks) > 0 { // picks from before: every waiter is asleep now
		<-picks
	}
	for {
		for changed := clk.Changed(); clk.Timers() < n; changed = clk.Changed() {
			select {
			case v := <-done:
				return v
			case <-changed:
			case <-deadline:
				t.Fatal("timed out waiting for the waiters to sleep")
			}
		}
		clk.Advance(40 * time.Millisecond)
		select {
		case <-picks:
		case v := <-done:
			return v
		case <-deadline:
			t.Fatal("timed out waiting for a pick")
		}
	}
}

// When room frees while a returning session waits, a new request about to
// take it yields: the returning session passes first and takes it, and the
// new one waits. With the policy off the new request takes it.
func TestReturningSessionTakesFreedRoomFirst(t *testing.T) {
	t.Parallel()
	for _, policy := range []bool{true, false} {
		h, clk, rp, served, release := roomHarness(t, waitroom.Config{Limit: 16, ReturningFirst: policy})
		ret := h.sendAsync(context.Background(), roomHeaders("ret", true))
		pickOf(t, rp.calls, "ret")
		waitTimers(t, clk, 1) // ret sleeps in the room
		rp.free.Store(1)
		fresh := h.sendAsync(context.Background(), roomHeaders("new", false))
		first := wait(t, served, "the first request served")
		want, winner, loser := "ret", ret, fresh
		if !policy {
			want, winner, loser = "new", fresh, ret
		}
		if first != want {
			t.Fatalf("policy %v: %q took the freed room, want %q", policy, first, want)
		}
		close(release)
		if res := wait(t, winner, "the winner's response"); res.status != http.StatusOK {
			t.Fatalf("policy %v: winner status %d", policy, res.status)
		}
		waitTimers(t, clk, 1) // the loser sleeps in the room
		n := clk.Timers()
		rp.free.Store(2)
		if res := advanceUntil(t, clk, rp.calls, n, loser); res.status != http.StatusOK {
			t.Fatalf("policy %v: loser status %d code %q", policy, res.status, res.header.Get(headers.StargateErrorCode))
		}
		h.inflight.Wait()
	}
}

// A registration wakes every waiter of the target at once, but the room
// it shows still goes to the returning session first: the new request,
// waiting longer and woken with it, yields when its pass is given the
// cluster. Repeated so that either may run first after the wake.
func TestPublicationWakeKeepsReturningFirst(t *testing.T) {
	t.Parallel()
	for range 10 {
		h, clk, rp, served, release := roomHarness(t, waitroom.Config{Limit: 16, ReturningFirst: true})
		// Cleanups run last-registered first: a failing test cancels its
		// requests before the harness's servers wait for them.
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		released := false
		t.Cleanup(func() {
			if !released {
				close(release)
			}
		})
		fresh := h.sendAsync(ctx, roomHeaders("new", false))
		pickOf(t, rp.calls, "new")
		waitTimers(t, clk, 1)
		ret := h.sendAsync(ctx, roomHeaders("ret", true))
		pickOf(t, rp.calls, "ret")
		waitTimers(t, clk, 2) // both sleep in the room
		rp.free.Store(1)
		h.register("b1") // a registration of m wakes both, the clock still
		if first := wait(t, served, "the first request served"); first != "ret" {
			t.Fatalf("%q took the room a registration showed, want the returning session", first)
		}
		close(release)
		released = true
		if res := wait(t, ret, "the returning session's response"); res.status != http.StatusOK {
			t.Fatalf("returning status %d", res.status)
		}
		waitTimers(t, clk, 1) // the new request waits on
		rp.free.Store(2)
		h.register("b1")
		if res := wait(t, fresh, "the new request's response"); res.status != http.StatusOK {
			t.Fatalf("new status %d", res.status)
		}
		h.inflight.Wait()
	}
}

// A full room refuses a new arrival at once and lets a returning arrival
// displace the newest new waiter; both answers are typed 503s.
func TestFullWaitingRoomShedsNewRequestsFirst(t *testing.T) {
	t.Parallel()
	h, clk, rp, _, release := roomHarness(t, waitroom.Config{Limit: 2, ReturningFirst: true})
	first := h.sendAsync(context.Background(), roomHeaders("n1", false))
	pickOf(t, rp.calls, "n1")
	waitTimers(t, clk, 1)
	second := h.sendAsync(context.Background(), roomHeaders("n2", false))
	pickOf(t, rp.calls, "n2")
	waitTimers(t, clk, 2)
	full := h.sendAsync(context.Background(), roomHeaders("n3", false))
	res := wait(t, full, "the refusal of n3")
	if res.status != http.StatusServiceUnavailable || res.header.Get(headers.StargateErrorCode) != ReasonWaitingRoomFull ||
		res.header.Get("Retry-After") == "" {
		t.Fatalf("n3: status %d, code %q, Retry-After %q; want 503 %s with Retry-After", res.status,
			res.header.Get(headers.StargateErrorCode), res.header.Get("Retry-After"), ReasonWaitingRoomFull)
	}
	ret := h.sendAsync(context.Background(), roomHeaders("ret", true))
	res = wait(t, second, "the displacement of n2, the newest waiter")
	if res.status != http.StatusServiceUnavailable || res.header.Get(headers.StargateErrorCode) != ReasonDisplaced {
		t.Fatalf("n2: status %d, code %q; want 503 %s", res.status, res.header.Get(headers.StargateErrorCode), ReasonDisplaced)
	}
	select {
	case r := <-first:
		t.Fatalf("n1, the older waiter, ended with %d", r.status)
	default:
	}
	if r, o := h.p.rooms.Waiting(routing.Target{RoutingKey: rk, Model: model}); r != 1 || o != 1 {
		t.Fatalf("room holds %d returning, %d other; want 1, 1", r, o)
	}
	wantSeries(t, "admission_rejections_total", h.m.admissions, series{
		"rk|m|" + ReasonWaitingRoomFull: 1, "rk|m|" + ReasonDisplaced: 1})
	// Room for two: both waiters are served.
	waitTimers(t, clk, 2) // n1 and ret sleep in the room
	n := clk.Timers()
	rp.free.Store(3) // room for n1 and ret
	close(release)
	if r := advanceUntil(t, clk, rp.calls, n, ret); r.status != http.StatusOK {
		t.Fatalf("ret: status %d", r.status)
	}
	if r := advanceUntil(t, clk, rp.calls, n-1, first); r.status != http.StatusOK {
		t.Fatalf("n1: status %d", r.status)
	}
	h.inflight.Wait()
}
