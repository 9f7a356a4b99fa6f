package state_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Poisoned statistics never reach a snapshot as sent: rates that are NaN,
// infinite or negative read as 0 (no valid rate), finite rates and counts
// beyond their bounds are clamped, and a reservation on top of clamped
// figures still adds exactly.
func TestPoisonedStatsAreBounded(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{
		LastMeanInputTPS: math.NaN(), OutputTPS: math.Inf(1), MaxOutputTPS: -5, MaxInputTPS: math.MaxFloat64,
		QueueSize: math.MaxUint64, QueuedInputSize: math.MaxUint64, KVCacheCapacityTokens: math.MaxUint64,
		KVCacheUsedTokens: math.MaxUint64, KVCacheFreeTokens: math.MaxUint64, NumRunningQueries: math.MaxUint64,
		MaxEngineConcurrency: math.MaxUint64, TotalQueryInputSize: math.MaxUint64,
		InputProcessingQueries: math.MaxUint64, OutputGenerationQueries: math.MaxUint64,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: math.MaxUint64, 7: 12},
	}), time.Millisecond, true)
	st := cluster(t, s, target("m"), "c").Stats
	for name, got := range map[string]float64{"last_mean_input_tps": st.LastMeanInputTPS, "output_tps": st.OutputTPS,
		"max_output_tps": st.MaxOutputTPS} {
		if got != 0 {
			t.Errorf("%s = %v, want 0", name, got)
		}
	}
	if st.MaxInputTPS != state.MaxStatRate {
		t.Errorf("max_input_tps = %v, want MaxStatRate", st.MaxInputTPS)
	}
	for name, got := range map[string]uint64{"queue_size": st.QueueSize, "queued_input_size": st.QueuedInputSize,
		"kv_cache_capacity_tokens": st.KVCacheCapacityTokens, "kv_cache_used_tokens": st.KVCacheUsedTokens,
		"kv_cache_free_tokens": st.KVCacheFreeTokens, "num_running_queries": st.NumRunningQueries,
		"max_engine_concurrency": st.MaxEngineConcurrency, "total_query_input_size": st.TotalQueryInputSize,
		"input_processing_queries": st.InputProcessingQueries, "output_generation_queries": st.OutputGenerationQueries,
		"queue_time_estimate_ms_by_priority[0]": st.QueueTimeEstimateMsByPriority[0],
	} {
		if got != state.MaxStatCount {
			t.Errorf("%s = %d, want MaxStatCount", name, got)
		}
	}
	if got := st.QueueTimeEstimateMsByPriority[7]; got != 12 {
		t.Errorf("an in-range priority estimate changed: %d", got)
	}

	if !s.Reserve(target("m"), "c", "b", 1000, 0).Valid() {
		t.Fatal("reservation not placed")
	}
	st = cluster(t, s, target("m"), "c").Stats
	if st.QueuedInputSize != state.MaxStatCount+1000 || st.QueueSize != state.MaxStatCount+1 {
		t.Errorf("after a reservation: queued_input_size %d queue_size %d, want exact sums", st.QueuedInputSize, st.QueueSize)
	}
}

// The caller's statistics stay the caller's: changing them after Apply
// changes nothing the store publishes.
func TestSanitizedStatsAreACopy(t *testing.T) {
	s, _ := newStore()
	in := protocol.ModelStats{LastMeanInputTPS: 10, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 5},
		StatsSources: []string{"kv_cache_stats"}}
	s.Apply(backend("b", "c"), one("m", in), time.Millisecond, true)
	in.QueueTimeEstimateMsByPriority[0] = 99
	in.StatsSources[0] = "changed"
	st := cluster(t, s, target("m"), "c").Stats
	if st.QueueTimeEstimateMsByPriority[0] != 5 || st.StatsSources[0] != "kv_cache_stats" {
		t.Errorf("the store shares the caller's statistics: %+v", st)
	}
}

// Known remembers every target a registration listed, whatever its status,
// after the registration is gone; it forgets the least recently listed
// beyond its bound, and never remembers an oversized key.
func TestKnown(t *testing.T) {
	s, _ := newStore(state.RememberTargets(2))
	if s.Known(target("m1")) {
		t.Fatal("a target nothing listed is known")
	}
	s.Apply(backend("b", "c"), reg(map[string]protocol.ModelEntry{
		"m1": active(protocol.ModelStats{}),
		"m2": {Status: protocol.StatusInactive},
	}), time.Millisecond, true)
	s.Remove("b")
	for _, m := range []string{"m1", "m2"} {
		if s.Registered(target(m)) || !s.Known(target(m)) {
			t.Errorf("%s after its backend left: registered %v known %v, want false, true", m, s.Registered(target(m)), s.Known(target(m)))
		}
	}
	if s.Known(routing.Target{Model: "m1"}) {
		t.Error("m1 under another routing key is known")
	}
	// A third target evicts the least recently listed, m1 or m2 (one
	// registration lists both in map order); listing m2 again first makes
	// m1 the oldest.
	s.Apply(backend("b", "c"), one("m2", protocol.ModelStats{}), time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m3", protocol.ModelStats{}), time.Millisecond, true)
	s.Remove("b")
	if s.Known(target("m1")) || !s.Known(target("m2")) || !s.Known(target("m3")) {
		t.Errorf("after a third target: known m1 %v m2 %v m3 %v, want false, true, true",
			s.Known(target("m1")), s.Known(target("m2")), s.Known(target("m3")))
	}
	huge := strings.Repeat("x", 600)
	s.Apply(backend("b", "c"), one(huge, protocol.ModelStats{}), time.Millisecond, true)
	if !s.Known(target(huge)) {
		t.Error("a registered target must be known")
	}
	s.Remove("b")
	if s.Known(target(huge)) {
		t.Error("an oversized model id was remembered")
	}
}

// Activated is closed when a target gains its first active backend, not
// when a registration changes nothing routable, and a new channel takes
// its place.
func TestActivated(t *testing.T) {
	s, _ := newStore()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := s.Activated()
	s.Apply(backend("b", "c"), reg(map[string]protocol.ModelEntry{"m": {Status: protocol.StatusInactive}}), time.Millisecond, true)
	if closed(ch) {
		t.Fatal("closed by an inactive registration")
	}
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), time.Millisecond, false)
	if closed(ch) {
		t.Fatal("closed by a registration without an RTT")
	}
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	if !closed(ch) {
		t.Fatal("not closed when m became routable")
	}
	next := s.Activated()
	if closed(next) {
		t.Fatal("the next channel is already closed")
	}
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{QueueSize: 1}), time.Millisecond, true)
	if closed(next) {
		t.Fatal("closed by an update of an already active target")
	}
	s.Remove("b")
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	if !closed(next) {
		t.Fatal("not closed when m came back")
	}
}
