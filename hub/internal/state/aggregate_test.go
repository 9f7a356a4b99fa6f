package state_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Two backends of one cluster, field by field
// (docs/design/routing-state.md#cluster-aggregation): b is processed last,
// so it is the latest-wins source.
func TestAggregateTwoBackends(t *testing.T) {
	s, clk := newStore()
	a := protocol.ModelStats{
		LastMeanInputTPS: 1000, OutputTPS: 10, QueueSize: 2, QueuedInputSize: 300, MaxOutputTPS: 50,
		KVCacheCapacityTokens: 1000, KVCacheUsedTokens: 400, KVCacheFreeTokens: 600,
		NumRunningQueries: 3, MaxEngineConcurrency: 8, TotalQueryInputSize: 900,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 10, 2: 20},
		InputProcessingQueries:        1, OutputGenerationQueries: 1, StatsObservedAtUnixMs: 5000,
		StatsCapabilities: []string{"x", "y"}, StatsSources: []string{"s1"},
	}
	b := protocol.ModelStats{
		LastMeanInputTPS: 500, OutputTPS: 5, QueueSize: 1, QueuedInputSize: 100, MaxOutputTPS: 70,
		KVCacheCapacityTokens: 2000, KVCacheUsedTokens: 100, KVCacheFreeTokens: 1900,
		NumRunningQueries: 1, MaxEngineConcurrency: 4, TotalQueryInputSize: 100,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 1},
		InputProcessingQueries:        2, OutputGenerationQueries: 3, StatsObservedAtUnixMs: 4000,
		StatsCapabilities: []string{"y", "z"}, StatsSources: []string{"s2", "s1"},
	}
	// Backend ids sort "c-a" < "c-b"; apply b first, then a, then b again so
	// that b is the source while the union order follows the ids.
	s.Apply(backend("c-b", "c"), one("m", b), 15*time.Millisecond, true)
	s.Apply(backend("c-a", "c"), one("m", a), 10*time.Millisecond, true)
	clk.Advance(time.Second)
	s.Apply(backend("c-b", "c"), one("m", b), 15*time.Millisecond, true)

	got := cluster(t, s, target("m"), "c")
	want := protocol.ModelStats{
		LastMeanInputTPS:              1500,                    // sum
		OutputTPS:                     15,                      // sum
		QueueSize:                     3,                       // sum
		QueuedInputSize:               400,                     // sum
		MaxOutputTPS:                  70,                      // latest-wins (b)
		KVCacheCapacityTokens:         2000,                    // latest-wins
		KVCacheUsedTokens:             100,                     // latest-wins
		KVCacheFreeTokens:             1900,                    // latest-wins
		NumRunningQueries:             1,                       // latest-wins
		MaxEngineConcurrency:          4,                       // latest-wins
		TotalQueryInputSize:           100,                     // latest-wins
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 1}, // latest-wins
		InputProcessingQueries:        3,                       // sum
		OutputGenerationQueries:       4,                       // sum
		StatsObservedAtUnixMs:         5000,                    // max
		StatsCapabilities:             []string{"x", "y", "z"}, // ordered union, by backend id
		StatsSources:                  []string{"s1", "s2"},
	}
	if !reflect.DeepEqual(got.Stats, want) {
		t.Errorf("stats\n got %+v\nwant %+v", got.Stats, want)
	}
	if got.RTT != 12500*time.Microsecond {
		t.Errorf("RTT = %v, want 12.5ms", got.RTT)
	}
	if !got.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("UpdatedAt = %v, want the source's receive time", got.UpdatedAt)
	}
	if got.ActiveBackends != 2 {
		t.Errorf("ActiveBackends = %d", got.ActiveBackends)
	}

	// a's next heartbeat makes it the source.
	clk.Advance(time.Second)
	s.Apply(backend("c-a", "c"), one("m", a), 10*time.Millisecond, true)
	got = cluster(t, s, target("m"), "c")
	if got.Stats.KVCacheCapacityTokens != 1000 || got.Stats.NumRunningQueries != 3 || got.Stats.MaxOutputTPS != 50 ||
		!reflect.DeepEqual(got.Stats.QueueTimeEstimateMsByPriority, a.QueueTimeEstimateMsByPriority) ||
		!got.UpdatedAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("after a's heartbeat, latest-wins fields must come from a: %+v", got)
	}
	if got.Stats.LastMeanInputTPS != 1500 || got.Stats.QueueSize != 3 {
		t.Errorf("sums must not depend on the source: %+v", got.Stats)
	}
}

// Only valid reports (positive and finite) add to the cluster's input TPS.
func TestAggregateInputTPSSumsValidOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		tps  []float64
		want float64
	}{
		{"all valid", []float64{100, 250.5}, 350.5},
		{"zero skipped", []float64{100, 0}, 100},
		{"negative skipped", []float64{100, -50}, 100},
		{"NaN skipped", []float64{math.NaN(), 70}, 70},
		{"+Inf skipped", []float64{math.Inf(1), 70}, 70},
		{"none valid", []float64{0, math.NaN()}, 0},
		{"huge values clamped before they are summed", []float64{math.MaxFloat64, math.MaxFloat64}, 2 * state.MaxStatRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			for i, v := range tc.tps {
				s.Apply(backend(string(rune('a'+i)), "c"), one("m", protocol.ModelStats{LastMeanInputTPS: v}), time.Millisecond, true)
			}
			if got := cluster(t, s, target("m"), "c").Stats.LastMeanInputTPS; got != tc.want {
				t.Errorf("tps = %v, want %v", got, tc.want)
			}
		})
	}
}

// A count near the uint64 limit is clamped to MaxStatCount before it is
// stored, so the cluster's sum is exact instead of saturated (satAdd
// itself is pinned in internal_test.go).
func TestAggregateSumsClampedCounts(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{QueueSize: math.MaxUint64 - 1, QueuedInputSize: math.MaxUint64}), 0, true)
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{QueueSize: 5, QueuedInputSize: 1}), 0, true)
	st := cluster(t, s, target("m"), "c").Stats
	if st.QueueSize != state.MaxStatCount+5 || st.QueuedInputSize != state.MaxStatCount+1 {
		t.Fatalf("sums = %d %d, want MaxStatCount+5 and MaxStatCount+1", st.QueueSize, st.QueuedInputSize)
	}
}

// The latest-wins source is the backend processed last; when it leaves, the
// one received most recently takes over, and a departure of any other
// backend keeps the source
// (docs/design/routing-state.md#cluster-aggregation).
func TestLatestWinsSourceAfterRemoval(t *testing.T) {
	s, clk := newStore()
	// Each backend's KV capacity names it: w=1, x=2, y=3, z=4.
	kv := map[string]uint64{"w": 1, "x": 2, "y": 3, "z": 4}
	apply := func(id string) {
		s.Apply(backend(id, "c"), one("m", protocol.ModelStats{KVCacheCapacityTokens: kv[id]}), time.Millisecond, true)
		clk.Advance(time.Second)
	}
	source := func() uint64 { return cluster(t, s, target("m"), "c").Stats.KVCacheCapacityTokens }
	withdraw := func(id string) { // a registration without the model: a removal for this target
		s.Apply(backend(id, "c"), reg(map[string]protocol.ModelEntry{}), time.Millisecond, true)
	}

	for _, id := range []string{"w", "x", "y", "z", "w"} { // receive times w=4s, x=1s, y=2s, z=3s
		apply(id)
	}
	steps := []struct {
		name string
		do   func()
		want uint64
	}{
		{"the last heartbeat is the source", func() {}, kv["w"]},
		{"a non-source leaving keeps the source", func() { s.Remove("x") }, kv["w"]},
		{"the source leaving hands over to the newest receive time", func() { s.Remove("w") }, kv["z"]},
		{"a heartbeat takes over", func() { apply("y") }, kv["y"]},
		{"withdrawing the source's model is a removal too", func() { withdraw("y") }, kv["z"]},
	}
	for _, st := range steps {
		st.do()
		if got := source(); got != st.want {
			t.Fatalf("%s: source KV = %d, want %d", st.name, got, st.want)
		}
	}
}

// With equal receive times (one fake instant), the backend processed last
// among the remaining ones takes over.
func TestLatestWinsTieOnReceiveTime(t *testing.T) {
	s, _ := newStore()
	for i, id := range []string{"b", "c", "a"} {
		s.Apply(backend(id, "c"), one("m", protocol.ModelStats{KVCacheCapacityTokens: uint64(i + 1)}), 0, true)
	}
	s.Remove("a") // the source
	if got := cluster(t, s, target("m"), "c").Stats.KVCacheCapacityTokens; got != 2 {
		t.Fatalf("source KV = %d, want 2 (c, processed after b)", got)
	}
}

func TestClusterRTTMean(t *testing.T) {
	for _, tc := range []struct {
		name string
		rtts []time.Duration
		want time.Duration
	}{
		{"one", []time.Duration{7 * time.Millisecond}, 7 * time.Millisecond},
		{"floor", []time.Duration{1, 2}, 1},
		{"exact", []time.Duration{10 * time.Millisecond, 15 * time.Millisecond}, 12500 * time.Microsecond},
		{"floor of three", []time.Duration{3, 3, 4}, 3},
		{"no overflow", []time.Duration{math.MaxInt64, math.MaxInt64, math.MaxInt64}, math.MaxInt64},
		{"no overflow, floor", []time.Duration{math.MaxInt64, 1}, 1 << 62},
		{"negative counts as 0", []time.Duration{-5, 4}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			for i, r := range tc.rtts {
				s.Apply(backend(string(rune('a'+i)), "c"), one("m", protocol.ModelStats{}), r, true)
			}
			if got := cluster(t, s, target("m"), "c").RTT; got != tc.want {
				t.Errorf("RTT = %d, want %d", got, tc.want)
			}
		})
	}
	// The mean is recomputed on every replace and removal.
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), 10*time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), 20*time.Millisecond, true)
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), 30*time.Millisecond, true)
	if got := cluster(t, s, target("m"), "c").RTT; got != 25*time.Millisecond {
		t.Errorf("after replace RTT = %v, want 25ms", got)
	}
	s.Remove("b")
	if got := cluster(t, s, target("m"), "c").RTT; got != 30*time.Millisecond {
		t.Errorf("after removal RTT = %v, want 30ms", got)
	}
}

// Clusters are separate per cluster id and sorted by it; each counts its own
// backends.
func TestClustersSortedAndSeparate(t *testing.T) {
	s, _ := newStore()
	for _, b := range []struct{ id, cluster string }{{"1", "zeta"}, {"2", "alpha"}, {"3", "mid"}, {"4", "alpha"}} {
		s.Apply(backend(b.id, b.cluster), one("m", protocol.ModelStats{QueueSize: 1}), time.Millisecond, true)
	}
	snap := s.Snapshot(target("m"))
	var ids []string
	var counts []int
	for _, c := range snap.Clusters {
		ids = append(ids, c.ClusterID)
		counts = append(counts, c.ActiveBackends)
	}
	if !reflect.DeepEqual(ids, []string{"alpha", "mid", "zeta"}) || !reflect.DeepEqual(counts, []int{2, 1, 1}) {
		t.Fatalf("clusters %v with %v backends", ids, counts)
	}
	if snap.Target != (routing.Target{RoutingKey: "rk", Model: "m"}) {
		t.Fatalf("target %+v", snap.Target)
	}
}
