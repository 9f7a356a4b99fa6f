package faults

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// TestPylonKilledMidLoad: three clusters under a steady load of streams;
// pylon b is killed (SIGKILL) while streams run through it.
//
// Bounds: 0 requests fail that could have been served (every request that
// had not received its head from b completes, on a or c); every stream
// cut by the kill ends with an error the client sees (an error event or a
// broken connection), never a clean end; no request reaches b after the
// kill; none hangs.
func TestPylonKilledMidLoad(t *testing.T) {
	st := startStack(t, stack.Options{Fleet: fleet(3)})
	ep := st.Endpoints()
	cl := newClient(httpClient(t), ep.APIKey)

	stop := make(chan struct{})
	var killSeq atomic.Int64 // the last request sent before the kill
	killSeq.Store(1 << 62)
	var afterKill atomic.Int64
	done := make(chan []result, 1) // buffered: a failed test does not wait for the load
	go func() {
		done <- load(t.Context(), 12, stop, func(w, k int) result {
			r := cl.chat(t.Context(), ep.Gateway, "", 40)
			if r.seq > killSeq.Load() {
				afterKill.Add(1)
			}
			return r
		})
	}()
	// Kill while at least two streams run through b, so the kill cuts
	// streams and not only idle capacity.
	eventually(t, 20*time.Second, "two streams in flight on b", func() bool { return cl.streaming("b") >= 2 })
	killSeq.Store(cl.seq.Load())
	cutAtKill := cl.streaming("b")
	if err := st.Kill("pylon-b"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "60 requests after the kill", func() bool { return afterKill.Load() >= 60 })
	close(stop)
	rs := <-done

	cut := func(r result) bool { return r.engine == "b" && r.status == http.StatusOK && r.seq <= killSeq.Load() }
	servable := count(rs, func(r result) bool { return !cut(r) })
	failedServable := count(rs, func(r result) bool { return !cut(r) && r.outcome != complete })
	cutFailed := count(rs, func(r result) bool { return cut(r) && r.outcome != complete })
	t.Logf("%d requests (%s); %d streams on b at the kill, %d of b's ended with an error; %d servable, %d of them failed",
		len(rs), tally(rs), cutAtKill, cutFailed, servable, failedServable)

	if n := count(rs, func(r result) bool { return r.outcome == cleanEnd }); n != 0 {
		t.Errorf("%d streams ended cleanly without [DONE]: a cut answer a client takes for a whole one (bound 0)", n)
	}
	if failedServable != 0 {
		t.Errorf("%d requests failed that could have been served on a or c (bound 0): %s", failedServable,
			tally(filter(rs, func(r result) bool { return !cut(r) && r.outcome != complete })))
	}
	if cutFailed < 1 {
		t.Errorf("no stream of b ended with an error: the kill cut nothing (the test did not test)")
	}
	if n := count(rs, func(r result) bool { return r.engine == "b" && r.seq > killSeq.Load() }); n != 0 {
		t.Errorf("%d requests sent after the kill were answered by b's engine (bound 0)", n)
	}
	if n := count(rs, func(r result) bool { return r.outcome == hung }); n != 0 {
		t.Errorf("%d requests hung past %v (bound 0)", n, cl.timeout)
	}
}

// filter returns the results keep selects.
func filter(rs []result, keep func(result) bool) []result {
	var out []result
	for _, r := range rs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}
