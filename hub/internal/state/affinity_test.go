package state_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/affinity"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// affinityCluster registers backends ids in cluster "c" of model m, each
// with stats st, and returns the store.
func affinityCluster(t testing.TB, st protocol.ModelStats, ids []string, opts ...state.Option) *state.Store {
	t.Helper()
	s, _ := newStore(opts...)
	for _, id := range ids {
		s.Apply(backend(id, "c"), one("m", st), time.Millisecond, true)
	}
	return s
}

// preferredOf is the backend of ids key prefers, computed from the
// pinned hashes rather than from the store.
func preferredOf(key string, ids []string) string {
	k := affinity.HashKey(key)
	best, bestScore := "", uint64(0)
	for _, id := range ids {
		if s := affinity.Score(k, affinity.HashID(id)); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

func pick(t testing.TB, s *state.Store, key string, skip func(string) bool) string {
	t.Helper()
	b, ok := s.NextBackend(target("m"), "c", key, skip)
	if !ok {
		return "-"
	}
	return b.ID
}

// On an idle cluster a key lands on the backend it prefers, call after
// call, where round robin would rotate it over all three.
func TestNextBackendSameKeySameBackend(t *testing.T) {
	ids := []string{"b1", "b2", "b3"}
	s := affinityCluster(t, protocol.ModelStats{}, ids)
	for i := range 30 {
		key := fmt.Sprintf("mt:v1:session:%d", i)
		want := preferredOf(key, ids)
		for range 5 {
			if got := pick(t, s, key, nil); got != want {
				t.Fatalf("key %s: got %s, want its preferred %s", key, got, want)
			}
		}
	}
	// A sequential session: each turn is reserved, then the backend's
	// next registration counts it and drops the reservation.
	key := "mt:v1:session:turns"
	want := preferredOf(key, ids)
	for range 5 {
		got := pick(t, s, key, nil)
		if got != want {
			t.Fatalf("turn went to %s, want %s", got, want)
		}
		s.Reserve(target("m"), "c", got, 100, 0)
		s.Apply(backend(got, "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	}
}

// Different keys spread over the backends about evenly.
func TestNextBackendKeysSpread(t *testing.T) {
	ids := []string{"b1", "b2", "b3", "b4"}
	s := affinityCluster(t, protocol.ModelStats{}, ids)
	counts := map[string]int{}
	const keys = 4000
	for i := range keys {
		counts[pick(t, s, fmt.Sprintf("mt:v1:session:%d", i), nil)]++
	}
	for _, id := range ids {
		if c := counts[id]; c < keys/4*80/100 || c > keys/4*120/100 {
			t.Errorf("%s got %d of %d keys, want within 20 %% of %d (%v)", id, c, keys, keys/4, counts)
		}
	}
}

// A preferred backend that is saturated gives the key to another, and gets
// it back once its load falls: full by its stats, over the load bound by
// the hub's own reservations, or marked full by a queue refusal.
func TestNextBackendSaturatedPreferredSpills(t *testing.T) {
	ids := []string{"b1", "b2"}
	key := "mt:v1:session:hot"
	pref := preferredOf(key, ids)
	other := ids[0]
	if other == pref {
		other = ids[1]
	}
	s := affinityCluster(t, protocol.ModelStats{MaxEngineConcurrency: 4}, ids)

	t.Run("full by its stats", func(t *testing.T) {
		s.Apply(backend(pref, "c"), one("m", protocol.ModelStats{NumRunningQueries: 4, MaxEngineConcurrency: 4}), time.Millisecond, true)
		if got := pick(t, s, key, nil); got != other {
			t.Fatalf("got %s, want %s: the preferred backend has no free slot", got, other)
		}
		s.Apply(backend(pref, "c"), one("m", protocol.ModelStats{NumRunningQueries: 1, MaxEngineConcurrency: 4}), time.Millisecond, true)
		if got := pick(t, s, key, nil); got != pref {
			t.Fatalf("got %s, want %s back once it has free slots", got, pref)
		}
	})
	t.Run("over the bound by reservations", func(t *testing.T) {
		// The default factor (2) never binds on two backends; 1.25 does.
		s := affinityCluster(t, protocol.ModelStats{MaxEngineConcurrency: 100}, ids, state.BackendAffinity(true, 1.25))
		// 2 backends at factor 1.25: with 1 in flight on the preferred
		// one and none on the other, ceil(1.25·2/2) = 2 still takes a
		// second; with 2, ceil(1.25·3/2) = 2 does not.
		s.Reserve(target("m"), "c", pref, 10, 0)
		if got := pick(t, s, key, nil); got != pref {
			t.Fatalf("got %s, want %s at 1 in flight", got, pref)
		}
		s.Reserve(target("m"), "c", pref, 10, 0)
		if got := pick(t, s, key, nil); got != other {
			t.Fatalf("got %s, want %s at 2 in flight", got, other)
		}
		s.Apply(backend(pref, "c"), one("m", protocol.ModelStats{MaxEngineConcurrency: 100}), time.Millisecond, true)
		if got := pick(t, s, key, nil); got != pref {
			t.Fatalf("got %s, want %s once its registration dropped the reservations", got, pref)
		}
	})
	t.Run("marked full by a refusal", func(t *testing.T) {
		if !s.MarkFull(target("m"), "c", pref, 500) {
			t.Fatal("MarkFull")
		}
		if got := pick(t, s, key, nil); got != other {
			t.Fatalf("got %s, want %s: the preferred backend refused", got, other)
		}
	})
	t.Run("every backend full", func(t *testing.T) {
		s.MarkFull(target("m"), "c", other, 500)
		s.Reserve(target("m"), "c", pref, 10, 0)
		if got := pick(t, s, key, nil); got != other {
			t.Fatalf("got %s, want the least loaded %s", got, other)
		}
	})
}

// Without a bound only a full backend moves a key.
func TestNextBackendUnbounded(t *testing.T) {
	ids := []string{"b1", "b2"}
	key := "mt:v1:session:hot"
	pref := preferredOf(key, ids)
	s := affinityCluster(t, protocol.ModelStats{}, ids, state.BackendAffinity(true, 0))
	for range 50 {
		s.Reserve(target("m"), "c", pref, 10, 0)
	}
	if got := pick(t, s, key, nil); got != pref {
		t.Fatalf("got %s, want %s: no bound", got, pref)
	}
}

// Without a key the least loaded backend is taken, ties in round-robin
// order.
func TestNextBackendNoKeyLeastLoaded(t *testing.T) {
	s := affinityCluster(t, protocol.ModelStats{}, []string{"b1", "b2", "b3"})
	s.Apply(backend("b1", "c"), one("m", protocol.ModelStats{NumRunningQueries: 2}), time.Millisecond, true)
	var got []string
	for range 4 {
		b := pick(t, s, "", nil)
		got = append(got, b)
		s.Reserve(target("m"), "c", b, 10, 0)
	}
	// Loads (b1, b2, b3) and the round-robin position of each call:
	// (2,0,0) from b1 → b2; (2,1,0) from b2 → b3; (2,1,1) from b3 → b3,
	// the first of the tie from there; (2,1,2) from b1 → b2. b1 waits
	// until the others carry as much.
	if want := "b2,b3,b3,b2"; strings.Join(got, ",") != want {
		t.Fatalf("picks %v, want %s", got, want)
	}
	// (2,2,2): all equal, the round-robin position (4 mod 3) decides.
	if b := pick(t, s, "", nil); b != "b2" {
		t.Fatalf("fifth pick %s, want b2", b)
	}
}

// skip is honoured: a skipped preferred backend gives the key to another,
// and a cluster whose backends are all skipped has none.
func TestNextBackendAffinityHonoursSkip(t *testing.T) {
	ids := []string{"b1", "b2", "b3"}
	s := affinityCluster(t, protocol.ModelStats{}, ids)
	for i := range 20 {
		key := fmt.Sprintf("mt:v1:session:%d", i)
		pref := preferredOf(key, ids)
		skipped := map[string]bool{pref: true}
		got := pick(t, s, key, func(id string) bool { return skipped[id] })
		if got == pref || got == "-" {
			t.Fatalf("key %s: got %s with its preferred %s skipped", key, got, pref)
		}
		skipped[got] = true
		last := pick(t, s, key, func(id string) bool { return skipped[id] })
		if skipped[last] || last == "-" {
			t.Fatalf("key %s: got %s, skipped %v", key, last, skipped)
		}
		if got := pick(t, s, key, func(string) bool { return true }); got != "-" {
			t.Fatalf("every backend skipped, got %s", got)
		}
	}
	single := affinityCluster(t, protocol.ModelStats{}, []string{"only"})
	if got := pick(t, single, "k", func(string) bool { return true }); got != "-" {
		t.Fatalf("the only backend skipped, got %s", got)
	}
	if got := pick(t, single, "k", nil); got != "only" {
		t.Fatalf("got %s", got)
	}
}

// The collector counts the picks of clusters with a choice by outcome, and
// exports nothing with affinity off.
func TestAffinityCollector(t *testing.T) {
	ids := []string{"b1", "b2"}
	key := "mt:v1:session:hot"
	pref := preferredOf(key, ids)
	s := affinityCluster(t, protocol.ModelStats{}, ids)
	s.Apply(backend("solo", "single"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.AffinityCollector("stargate_"))
	pick(t, s, key, nil)
	pick(t, s, key, func(id string) bool { return id == pref })
	pick(t, s, "", nil)
	pick(t, s, "", nil)
	if _, ok := s.NextBackend(target("m"), "single", key, nil); !ok {
		t.Fatal("single-backend cluster")
	}
	want := `
# HELP stargate_backend_affinity_picks_total Backends chosen inside a cluster by the request's affinity key: its first choice (preferred), another one (spilled), or the least loaded for a request without a key (no_key).
# TYPE stargate_backend_affinity_picks_total counter
stargate_backend_affinity_picks_total{model="m",outcome="no_key",routing_key="rk"} 2
stargate_backend_affinity_picks_total{model="m",outcome="preferred",routing_key="rk"} 1
stargate_backend_affinity_picks_total{model="m",outcome="spilled",routing_key="rk"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	off := affinityCluster(t, protocol.ModelStats{}, ids, state.BackendAffinity(false, 1.5))
	pick(t, off, key, nil)
	if n := testutil.CollectAndCount(off.AffinityCollector("stargate_")); n != 0 {
		t.Fatalf("%d series with affinity off", n)
	}
}

func TestCheckBackendAffinityLoadFactor(t *testing.T) {
	for _, tc := range []struct {
		f  float64
		ok bool
	}{{0, true}, {1, true}, {1.5, true}, {100, true}, {0.5, false}, {-1, false}, {math.Inf(1), false}, {math.NaN(), false}} {
		if err := state.CheckBackendAffinityLoadFactor(tc.f); (err == nil) != tc.ok {
			t.Errorf("%v: err %v, want ok=%v", tc.f, err, tc.ok)
		}
	}
}

// The request path stays allocation-free with a key and a skip function.
func TestNextBackendAffinityDoesNotAllocate(t *testing.T) {
	s := affinityCluster(t, protocol.ModelStats{}, []string{"b1", "b2", "b3"})
	skip := func(id string) bool { return id == "b2" }
	if n := testing.AllocsPerRun(100, func() {
		s.NextBackend(target("m"), "c", "mt:v1:session:abc", skip)
		s.NextBackend(target("m"), "c", "", skip)
		s.NextBackend(target("m"), "c", "mt:v1:session:abc", nil)
	}); n != 0 {
		t.Fatalf("%v allocs per pick", n)
	}
}
