package state_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

type res struct {
	tok  uint64
	prio uint32
}

// Reservations change a cluster's view exactly as
// docs/design/routing-state.md#reservations says.
func TestReservationAppliedFields(t *testing.T) {
	base := func(tps float64, pm map[uint32]uint64) protocol.ModelStats {
		return protocol.ModelStats{LastMeanInputTPS: tps, QueueSize: 2, QueuedInputSize: 100,
			NumRunningQueries: 3, TotalQueryInputSize: 700, QueueTimeEstimateMsByPriority: pm}
	}
	for _, tc := range []struct {
		name    string
		stats   protocol.ModelStats
		res     []res
		wantMap map[uint32]uint64
	}{
		{"no map: counters only", base(1000, nil), []res{{500, 1}}, nil},
		{"key p exists: it and every key above get δ",
			base(1000, map[uint32]uint64{0: 10, 2: 20, 5: 50}), []res{{1500, 2}},
			map[uint32]uint64{0: 10, 2: 1520, 5: 1550}}, // δ = ceil(1000·1500/1000) = 1500
		{"key p missing: created from the lookup for p",
			base(1000, map[uint32]uint64{0: 10, 2: 20, 5: 50}), []res{{1500, 3}},
			map[uint32]uint64{0: 10, 2: 20, 3: 1520, 5: 1550}},
		{"p below every key: created from 0",
			base(1000, map[uint32]uint64{2: 20, 5: 50}), []res{{1500, 1}},
			map[uint32]uint64{1: 1500, 2: 1520, 5: 1550}},
		{"δ is rounded up",
			base(3, map[uint32]uint64{0: 1}), []res{{1, 0}},
			map[uint32]uint64{0: 335}}, // ceil(1000/3) = 334
		{"invalid tps and tokens clear the map",
			base(0, map[uint32]uint64{0: 10, 2: 20}), []res{{1, 0}}, map[uint32]uint64{}},
		{"invalid tps without tokens keeps it (δ = 0)",
			base(math.NaN(), map[uint32]uint64{0: 10}), []res{{0, 3}},
			map[uint32]uint64{0: 10, 3: 10}},
		{"reservations apply in order",
			base(1000, map[uint32]uint64{0: 0}), []res{{100, 2}, {200, 0}, {300, 1}},
			// +100 at 2: {0:0, 2:100}; +200 at 0: {0:200, 2:300}; +300 at 1: {0:200, 1:500, 2:600}
			map[uint32]uint64{0: 200, 1: 500, 2: 600}},
		{"a cleared map stays cleared",
			base(0, map[uint32]uint64{0: 10}), []res{{5, 0}, {0, 1}}, map[uint32]uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			s.Apply(backend("b", "c"), one("m", tc.stats), time.Millisecond, true)
			var tokens uint64
			for _, r := range tc.res {
				if !s.Reserve(target("m"), "c", "b", r.tok, r.prio).Valid() {
					t.Fatal("reservation not placed")
				}
				tokens += r.tok
			}
			got := cluster(t, s, target("m"), "c").Stats
			n := uint64(len(tc.res))
			if got.QueueSize != 2+n || got.NumRunningQueries != 3+n ||
				got.QueuedInputSize != 100+tokens || got.TotalQueryInputSize != 700+tokens {
				t.Errorf("counters: queue %d running %d queued %d total %d", got.QueueSize, got.NumRunningQueries,
					got.QueuedInputSize, got.TotalQueryInputSize)
			}
			if len(got.QueueTimeEstimateMsByPriority) != len(tc.wantMap) ||
				(len(tc.wantMap) > 0 && !reflect.DeepEqual(got.QueueTimeEstimateMsByPriority, tc.wantMap)) {
				t.Errorf("map = %v, want %v", got.QueueTimeEstimateMsByPriority, tc.wantMap)
			}
		})
	}
}

// The view a load balancer reads after a reservation agrees with lb's own
// estimate: qest(p) grows by exactly δ, for keys at or above p.
func TestReservationAgreesWithQueueEstimate(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{LastMeanInputTPS: 700,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{1: 30, 4: 90}}), time.Millisecond, true)
	before := cluster(t, s, target("m"), "c").Stats
	s.Reserve(target("m"), "c", "b", 1234, 2)
	after := cluster(t, s, target("m"), "c").Stats
	delta, _ := lb.QueueTimeDeltaMs(1234, 700)
	for p, grows := range map[uint32]bool{0: false, 1: false, 2: true, 3: true, 4: true, 99: true} {
		b, _ := lb.QueueEstimate(&before, p)
		a, _ := lb.QueueEstimate(&after, p)
		want := b
		if grows {
			want += delta
		}
		if a != want {
			t.Errorf("p=%d: qest %d → %d, want %d", p, b, a, want)
		}
	}
	// Without a map, qest follows queued input, which now includes the tokens.
	s.Apply(backend("n", "nomap"), one("m", protocol.ModelStats{LastMeanInputTPS: 1000, QueuedInputSize: 100}), time.Millisecond, true)
	s.Reserve(target("m"), "nomap", "n", 500, 0)
	st := cluster(t, s, target("m"), "nomap").Stats
	if q, ok := lb.QueueEstimate(&st, 0); !ok || q != 600 {
		t.Errorf("qest without map = %d, %v; want 600", q, ok)
	}
}

// A backend's next registration snapshot drops all of its reservations, in
// every target, and only its own.
func TestReservationsDroppedByNextApply(t *testing.T) {
	s, _ := newStore()
	two := reg(map[string]protocol.ModelEntry{"m1": active(protocol.ModelStats{}), "m2": active(protocol.ModelStats{})})
	s.Apply(backend("a", "c"), two, time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m1", protocol.ModelStats{}), time.Millisecond, true)
	s.Reserve(target("m1"), "c", "a", 10, 0)
	s.Reserve(target("m1"), "c", "a", 20, 0)
	s.Reserve(target("m2"), "c", "a", 40, 0)
	rb := s.Reserve(target("m1"), "c", "b", 30, 0)
	if got := cluster(t, s, target("m1"), "c").Stats.QueuedInputSize; got != 60 {
		t.Fatalf("queued = %d, want 60", got)
	}
	s.Apply(backend("a", "c"), two, time.Millisecond, true)
	if got := cluster(t, s, target("m1"), "c").Stats; got.QueuedInputSize != 30 || got.QueueSize != 1 {
		t.Fatalf("after a's heartbeat m1 keeps only b's reservation: %+v", got)
	}
	if got := cluster(t, s, target("m2"), "c").Stats.QueuedInputSize; got != 0 {
		t.Fatalf("a's reservation on m2 must be dropped too: %d", got)
	}
	rb.Release()
	if got := cluster(t, s, target("m1"), "c").Stats.QueueSize; got != 0 {
		t.Fatalf("after release queue = %d", got)
	}
}

func TestReservationRelease(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	r1 := s.Reserve(target("m"), "c", "a", 10, 0)
	r2 := s.Reserve(target("m"), "c", "a", 20, 0)
	r1.Release()
	r1.Release() // idempotent
	if got := cluster(t, s, target("m"), "c").Stats; got.QueuedInputSize != 20 || got.QueueSize != 1 {
		t.Fatalf("after releasing r1 twice: %+v", got)
	}
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true) // drops r2
	r3 := s.Reserve(target("m"), "c", "a", 40, 0)
	r2.Release() // already dropped: must not touch r3
	if got := cluster(t, s, target("m"), "c").Stats.QueuedInputSize; got != 40 {
		t.Fatalf("a stale release touched another reservation: %d", got)
	}
	s.Remove("a")
	r3.Release() // after removal: nothing left to release
	var zero state.Reservation
	zero.Release()
	if zero.Valid() {
		t.Fatal("the zero Reservation is not valid")
	}
}

// Reserve places nothing unless the backend is active in that cluster of the
// target, and the handle it returns then does nothing.
func TestReserveNoOp(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("a", "c"), reg(map[string]protocol.ModelEntry{
		"m": active(protocol.ModelStats{}), "off": {Status: protocol.StatusInactive},
	}), time.Millisecond, true)
	s.Apply(backend("b", "c2"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	version := s.Snapshot(target("m")).Version
	for _, tc := range []struct {
		name             string
		t                routing.Target
		cluster, backend string
	}{
		{"unknown target", target("nope"), "c", "a"},
		{"inactive target", target("off"), "c", "a"},
		{"unknown cluster", target("m"), "zz", "a"},
		{"backend of another cluster", target("m"), "c", "b"},
		{"unknown backend", target("m"), "c", "zz"},
	} {
		r := s.Reserve(tc.t, tc.cluster, tc.backend, 10, 0)
		if r.Valid() {
			t.Errorf("%s: reservation placed", tc.name)
		}
		r.Release()
	}
	if s.Snapshot(target("m")).Version != version {
		t.Error("a reservation that placed nothing must not republish")
	}
}

// A backend leaving (inactive, no RTT, withdrawn, removed) takes its
// reservations with it; siblings keep theirs.
func TestReservationsLeaveWithBackend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave *protocol.Registration
		rtt   bool
	}{
		{"inactive", reg(map[string]protocol.ModelEntry{"m": {Status: protocol.StatusInactive}}), true},
		{"no RTT", one("m", protocol.ModelStats{}), false},
		{"withdrawn", reg(nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
			s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
			s.Reserve(target("m"), "c", "a", 10, 0)
			s.Reserve(target("m"), "c", "b", 5, 0)
			s.Apply(backend("a", "c"), tc.leave, time.Millisecond, tc.rtt)
			if got := cluster(t, s, target("m"), "c").Stats.QueuedInputSize; got != 5 {
				t.Fatalf("queued = %d, want b's 5", got)
			}
			s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
			if got := cluster(t, s, target("m"), "c").Stats.QueuedInputSize; got != 5 {
				t.Fatalf("a's reservation came back: %d", got)
			}
		})
	}
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	s.Reserve(target("m"), "c", "a", 10, 0)
	s.Remove("a")
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	if got := cluster(t, s, target("m"), "c").Stats.QueuedInputSize; got != 0 {
		t.Fatalf("a removed backend's reservation survived: %d", got)
	}
}

// Each reservation is applied on top of the published view: the snapshots
// published before it stay as they were (their priority map is never
// written), and after a release the full recompute from the remaining
// reservations agrees with applying them one by one.
func TestIncrementalReservationsKeepSnapshotsAndAgreeWithRecompute(t *testing.T) {
	stats := protocol.ModelStats{LastMeanInputTPS: 1000, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 10, 2: 20}}
	s, _ := newStore()
	s.Apply(backend("b", "c"), one("m", stats), time.Millisecond, true)
	before := cluster(t, s, target("m"), "c")
	first := s.Reserve(target("m"), "c", "b", 1000, 1)
	afterFirst := cluster(t, s, target("m"), "c")
	s.Reserve(target("m"), "c", "b", 2000, 0)
	afterBoth := cluster(t, s, target("m"), "c")
	if want := map[uint32]uint64{0: 10, 2: 20}; !reflect.DeepEqual(before.Stats.QueueTimeEstimateMsByPriority, want) {
		t.Errorf("snapshot before any reservation changed: %v", before.Stats.QueueTimeEstimateMsByPriority)
	}
	// +1000 tokens at 1: {0:10, 1:1010, 2:1020}
	if want := map[uint32]uint64{0: 10, 1: 1010, 2: 1020}; !reflect.DeepEqual(afterFirst.Stats.QueueTimeEstimateMsByPriority, want) ||
		afterFirst.Stats.QueueSize != 1 {
		t.Errorf("snapshot after the first reservation: %+v", afterFirst.Stats)
	}
	// then +2000 at 0: every key gets 2000
	if want := map[uint32]uint64{0: 2010, 1: 3010, 2: 3020}; !reflect.DeepEqual(afterBoth.Stats.QueueTimeEstimateMsByPriority, want) ||
		afterBoth.Stats.QueueSize != 2 || len(afterBoth.Priorities) != 3 {
		t.Errorf("snapshot after both: %+v, priorities %v", afterBoth.Stats, afterBoth.Priorities)
	}
	first.Release()
	// Recomputed from the base with the second alone: +2000 at 0.
	got := cluster(t, s, target("m"), "c")
	if want := map[uint32]uint64{0: 2010, 2: 2020}; !reflect.DeepEqual(got.Stats.QueueTimeEstimateMsByPriority, want) || got.Stats.QueueSize != 1 {
		t.Errorf("after releasing the first: %+v", got.Stats)
	}
}
