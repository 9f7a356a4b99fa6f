package state_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// A refusal marks its backend full until the backend's next registration
// (docs/design/routing-state.md#queue-refusals): the free-slot rule stops
// applying, the queue estimate is at least the refusal's, reservations add
// on top, and the next registration brings the reported numbers back.
func TestMarkFullUntilNextRegistration(t *testing.T) {
	s, clk := newStore()
	free := protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 4, NumRunningQueries: 1,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 5}}
	s.Apply(backend("b", "c"), one("m", free), time.Millisecond, true)
	before := s.Snapshot(target("m"))
	if v := before.Clusters[0]; !lb.FreeSlot(&v.Stats) {
		t.Fatalf("fixture must have a free slot: %+v", v.Stats)
	}

	clk.Advance(time.Second)
	if !s.MarkFull(target("m"), "c", "b", 184) {
		t.Fatal("MarkFull did not mark an active backend")
	}
	v := cluster(t, s, target("m"), "c")
	if lb.FreeSlot(&v.Stats) || v.Stats.NumRunningQueries != 4 {
		t.Fatalf("a marked cluster keeps a free slot: running %d of %d", v.Stats.NumRunningQueries, v.Stats.MaxEngineConcurrency)
	}
	for _, p := range []uint32{0, 3, 9} {
		if ms, ok := lb.ViewQueueEstimate(&v, p); !ok || ms != 184 {
			t.Errorf("queue estimate at priority %d = %d (%v), want 184", p, ms, ok)
		}
	}
	if got := before.Clusters[0].Stats; got.NumRunningQueries != 1 || got.QueueTimeEstimateMsByPriority[0] != 5 {
		t.Fatalf("the snapshot published before the mark changed: %+v", got)
	}

	// Pending reservations add on top of the floor: 500 tokens at 1000/s.
	s.Reserve(target("m"), "c", "b", 500, 0)
	v = cluster(t, s, target("m"), "c")
	if ms, _ := lb.ViewQueueEstimate(&v, 0); ms != 684 || v.Stats.NumRunningQueries != 5 {
		t.Fatalf("with a reservation: estimate %d running %d, want 684 and 5", ms, v.Stats.NumRunningQueries)
	}

	// A later refusal before the registration replaces the floor.
	s.MarkFull(target("m"), "c", "b", 90)
	v = cluster(t, s, target("m"), "c")
	if ms, _ := lb.ViewQueueEstimate(&v, 0); ms != 590 {
		t.Fatalf("after a second refusal the estimate is %d, want 90 + 500", ms)
	}

	s.Apply(backend("b", "c"), one("m", free), time.Millisecond, true)
	v = cluster(t, s, target("m"), "c")
	if !lb.FreeSlot(&v.Stats) || v.Stats.NumRunningQueries != 1 || !reflect.DeepEqual(v.Stats.QueueTimeEstimateMsByPriority, map[uint32]uint64{0: 5}) {
		t.Fatalf("the next registration must clear the mark: %+v", v.Stats)
	}
	d := s.Debug().(state.DebugState)
	if c := d.Targets[0].Clusters[0]; c.FullByRefusal || c.Backends[0].QueueRefusal != nil {
		t.Fatalf("debug still shows the mark: %+v", c)
	}
}

// How the floor enters each shape of queue estimate; the raw statistics
// are never changed.
func TestMarkFullQueueFloor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stats protocol.ModelStats
		floor uint64
		// want is the estimate at priorities 0, 1 and 7; -1 is undefined.
		want [3]int64
	}{
		{"map: raised everywhere, key 0 added",
			protocol.ModelStats{LastMeanInputTPS: 1000, QueueTimeEstimateMsByPriority: map[uint32]uint64{2: 20, 5: 500}},
			100, [3]int64{100, 100, 500}},
		{"no map, tokens/TPS below the floor",
			protocol.ModelStats{LastMeanInputTPS: 1000, QueuedInputSize: 30}, 100, [3]int64{100, 100, 100}},
		{"no map, tokens/TPS above the floor is kept",
			protocol.ModelStats{LastMeanInputTPS: 1000, QueuedInputSize: 3000}, 100, [3]int64{3000, 3000, 3000}},
		{"no map, nothing queued, no TPS",
			protocol.ModelStats{}, 100, [3]int64{100, 100, 100}},
		{"undefined estimate stays undefined",
			protocol.ModelStats{QueuedInputSize: 500}, 100, [3]int64{-1, -1, -1}},
		{"unknown concurrency: only the floor",
			protocol.ModelStats{LastMeanInputTPS: 1000, NumRunningQueries: 3}, 40, [3]int64{40, 40, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			s.Apply(backend("b", "c"), one("m", tc.stats), time.Millisecond, true)
			raw, _ := json.Marshal(cluster(t, s, target("m"), "c").Stats)
			s.MarkFull(target("m"), "c", "b", tc.floor)
			v := cluster(t, s, target("m"), "c")
			for i, p := range []uint32{0, 1, 7} {
				got := int64(-1)
				if ms, ok := lb.ViewQueueEstimate(&v, p); ok {
					got = int64(ms)
				}
				if got != tc.want[i] {
					t.Errorf("estimate at priority %d = %d, want %d", p, got, tc.want[i])
				}
			}
			if v.Stats.NumRunningQueries != tc.stats.NumRunningQueries {
				t.Errorf("running %d: an unknown concurrency must not be invented", v.Stats.NumRunningQueries)
			}
			d := s.Debug().(state.DebugState)
			c := d.Targets[0].Clusters[0]
			if base, _ := json.Marshal(c.BaseStats); string(base) != string(raw) {
				t.Errorf("base stats changed:\n%s\n%s", raw, base)
			}
			if m := c.Backends[0].Stats; !reflect.DeepEqual(m.QueueTimeEstimateMsByPriority, tc.stats.QueueTimeEstimateMsByPriority) ||
				m.NumRunningQueries != tc.stats.NumRunningQueries {
				t.Errorf("the backend's stored stats changed: %+v", m)
			}
		})
	}
}

// A cluster counts as full only when every backend is marked: a sibling
// without a mark may still have room. Its floor is the smallest refusal;
// the marks end one by one with each backend's registration or removal.
func TestMarkFullSeveralBackends(t *testing.T) {
	s, clk := newStore()
	st := protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 8, NumRunningQueries: 2}
	s.Apply(backend("a", "c"), one("m", st), time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m", st), time.Millisecond, true)
	s.Apply(backend("x", "other"), one("m", st), time.Millisecond, true)
	full := func() (bool, uint64) {
		v := cluster(t, s, target("m"), "c")
		ms, _ := lb.ViewQueueEstimate(&v, 0)
		return !lb.FreeSlot(&v.Stats), ms
	}

	s.MarkFull(target("m"), "c", "a", 300)
	if f, ms := full(); f || ms != 0 {
		t.Fatalf("one of two marked: full %v estimate %d, want a free slot", f, ms)
	}
	clk.Advance(time.Second)
	s.MarkFull(target("m"), "c", "b", 120)
	if f, ms := full(); !f || ms != 120 {
		t.Fatalf("both marked: full %v estimate %d, want full at 120", f, ms)
	}
	if v := cluster(t, s, target("m"), "other"); !lb.FreeSlot(&v.Stats) {
		t.Fatal("another cluster must not be marked")
	}
	d := s.Debug().(state.DebugState)
	c := d.Targets[0].Clusters[0]
	if !c.FullByRefusal || c.Backends[0].QueueRefusal == nil || c.Backends[0].QueueRefusal.ActualQueueMs != 300 ||
		!c.Backends[0].QueueRefusal.At.Equal(t0) || !c.Backends[1].QueueRefusal.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("debug %+v", c)
	}

	s.Remove("b") // a, still marked, is the cluster now
	if f, ms := full(); !f || ms != 300 {
		t.Fatalf("after b left: full %v estimate %d, want full at 300", f, ms)
	}
	s.Apply(backend("b", "c"), one("m", st), time.Millisecond, true)
	if f, _ := full(); f {
		t.Fatal("b came back unmarked: the cluster has room again")
	}
	s.MarkFull(target("m"), "c", "b", 50)
	s.Apply(backend("a", "c"), one("m", st), time.Millisecond, true)
	if f, _ := full(); f {
		t.Fatal("a's registration cleared its mark: the cluster has room")
	}
	s.Apply(backend("b", "c"), one("m", st), time.Millisecond, true)
	if d := s.Debug().(state.DebugState); d.Targets[0].Clusters[0].FullByRefusal {
		t.Fatal("no mark left, debug still says full")
	}
}

// MarkFull marks nothing outside an active backend of the named cluster.
func TestMarkFullUnknown(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{MaxEngineConcurrency: 2}), time.Millisecond, true)
	s.Apply(backend("i", "c"), reg(map[string]protocol.ModelEntry{"m": {Status: protocol.StatusInactive}}), time.Millisecond, true)
	version := s.Snapshot(target("m")).Version
	for _, tc := range []struct {
		t                  routing.Target
		cluster, backendID string
	}{
		{target("nope"), "c", "b"},
		{target("m"), "other", "b"},
		{target("m"), "c", "missing"},
		{target("m"), "c", "i"}, // registered, inactive
	} {
		if s.MarkFull(tc.t, tc.cluster, tc.backendID, 10) {
			t.Errorf("MarkFull(%v, %s, %s) marked", tc.t, tc.cluster, tc.backendID)
		}
	}
	if got := s.Snapshot(target("m")).Version; got != version {
		t.Fatalf("a failed mark published a snapshot: version %d → %d", version, got)
	}
	if v := cluster(t, s, target("m"), "c"); !lb.FreeSlot(&v.Stats) {
		t.Fatal("nothing may be marked")
	}
}
