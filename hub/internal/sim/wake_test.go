package sim

import (
	"container/heap"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The simulator's wake rule is the proxy's: a sleeping request passes
// again at the end of its wait or at the next report the hub applies,
// whichever is first, sleepers in the order they went to sleep; a
// reservation wakes nobody, and a woken request's wait event goes stale.
func TestSleepersWakeOnAppliedReports(t *testing.T) {
	h, err := newHub([]byte(`{"models":{"m":"round-robin"}}`), "m", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := state.Backend{ID: "e", ClusterID: "c", URL: "http://e"}
	report := func() {
		s := &protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 1, NumRunningQueries: 1}
		h.store.Apply(b, &protocol.Registration{V: protocol.Version, InferenceServerID: "e", ClusterID: "c",
			Models: map[string]protocol.ModelEntry{"m": {Status: protocol.StatusActive, Stats: s}}}, time.Millisecond, true)
	}
	report()
	r := &runner{hub: h}
	first, second := &reqState{idx: 1}, &reqState{idx: 2}
	h.seen = h.store.Publications(h.target) // as a pass reads it
	r.sleep(first, 200*time.Millisecond)
	r.sleep(second, 50*time.Millisecond)
	stale := map[*reqState]uint64{first: h.asleep[first], second: h.asleep[second]}

	r.now = int64(10 * time.Millisecond)
	h.store.Reserve(h.target, "c", "e", 100, 0)
	r.wake()
	if len(r.q) != 2 {
		t.Fatalf("a reservation woke a sleeper: %d events", len(r.q))
	}

	r.now = int64(30 * time.Millisecond)
	report()
	r.wake()
	var woken []*reqState
	for len(r.q) > 0 {
		ev := heap.Pop(&r.q).(event) //nolint:forcetypeassert // the queue holds events
		if ev.kind != evDecide {
			t.Fatalf("event %v", ev.kind)
		}
		due := h.awake(ev.r, ev.n)
		switch {
		case ev.at == r.now && !due:
			t.Errorf("request %d: the wake at the report is stale", ev.r.idx)
		case ev.at == r.now:
			woken = append(woken, ev.r)
		case due || ev.n != stale[ev.r]:
			t.Errorf("request %d: its wait's end at %v is still due after the wake", ev.r.idx, time.Duration(ev.at))
		}
	}
	if len(woken) != 2 || woken[0] != first || woken[1] != second {
		t.Fatalf("woken at the report: %v, want requests 1 then 2", woken)
	}
	if len(h.sleepers) != 0 || len(h.asleep) != 0 {
		t.Errorf("%d sleepers and %d naps left after every request passed", len(h.sleepers), len(h.asleep))
	}
}
