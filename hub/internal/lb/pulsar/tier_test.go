package pulsar

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

const ms = time.Millisecond

// regions is two near clusters 2 ms away and two far ones 40 ms away, the
// routing simulator's default fleet shape.
func regions() *routing.Snapshot { return lbtest.Regions(2, 2, 2*ms, 40*ms) }

// farFirstKey is the first key "key-N" whose RTT-blind rank 1 on snap is a
// far cluster: the key region-aware placement must bring near.
func farFirstKey(t *testing.T, snap *routing.Snapshot) string {
	t.Helper()
	r := NewRanker("", WeightMaxInputTPS)
	for i := range 100 {
		key := fmt.Sprintf("key-%d", i)
		if strings.HasPrefix(snap.Clusters[r.Rank(&routing.Request{AffinityKey: key}, snap)[0].Index].ClusterID, "far-") {
			return key
		}
	}
	t.Fatal("no key ranks a far cluster first")
	return ""
}

func TestRTTTiers(t *testing.T) {
	for _, tc := range []struct {
		name string
		rtts []time.Duration // 0: the cluster has no weight
		gap  time.Duration
		want []int32
	}{
		{"two regions", []time.Duration{2 * ms, 40 * ms, 3 * ms, 41 * ms}, 10 * ms, []int32{0, 1, 0, 1}},
		{"three regions", []time.Duration{80 * ms, 2 * ms, 25 * ms, 81 * ms, 26 * ms}, 10 * ms, []int32{2, 0, 1, 2, 1}},
		// Tiers break at gaps, not at fixed offsets: 1, 9, 17, 25 ms are
		// 8 ms apart each, one tier at a 10 ms gap.
		{"a chain within the gap", []time.Duration{1 * ms, 9 * ms, 17 * ms, 25 * ms}, 10 * ms, []int32{0, 0, 0, 0}},
		{"exactly the gap stays together", []time.Duration{2 * ms, 12 * ms}, 10 * ms, []int32{0, 0}},
		{"just over the gap splits", []time.Duration{2 * ms, 12*ms + 1}, 10 * ms, []int32{0, 1}},
		{"equal RTTs", []time.Duration{5 * ms, 5 * ms, 5 * ms}, 0, []int32{0, 0, 0}},
		// An unweighted cluster is not ranked and bridges nothing: 2 and
		// 18 stay apart although 10 lies within the gap of both.
		{"unweighted clusters take no part", []time.Duration{2 * ms, 0, 18 * ms}, 10 * ms, []int32{0, noTier, 1}},
	} {
		snap := &routing.Snapshot{}
		for i, rtt := range tc.rtts {
			c := routing.ClusterView{ClusterID: fmt.Sprintf("c%d", i), RTT: rtt}
			if rtt != 0 {
				c.Stats.MaxInputTPS = 1
			} else {
				c.RTT = 10 * ms
			}
			snap.Clusters = append(snap.Clusters, c)
		}
		if got := rttTiers(make([]int32, len(snap.Clusters)), snap, WeightMaxInputTPS, tc.gap); !slices.Equal(got, tc.want) {
			t.Errorf("%s: tiers %v, want %v", tc.name, got, tc.want)
		}
	}
}

// With tiers a key whose RTT-blind first choice is far starts near, keeps
// the rendezvous order inside each region, and still goes far when the
// near clusters cannot take it.
func TestTieredRankingStartsNear(t *testing.T) {
	snap := regions()
	key := farFirstKey(t, snap)
	blind := ids(snap, NewRanker("", WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: key}, snap))
	var near, far []string
	for _, id := range blind {
		if strings.HasPrefix(id, "near-") {
			near = append(near, id)
		} else {
			far = append(far, id)
		}
	}
	p := mustNew(t, Config{RTTTier: 10 * ms, ConsiderKVFreeTokens: true})
	req := &routing.Request{AffinityKey: key, InputTokens: 1000}
	if got, want := ids(snap, p.Ranker().Rank(req, snap)), append(slices.Clone(near), far...); !slices.Equal(got, want) {
		t.Fatalf("tiered ranking %v, want near in rendezvous order then far: %v (blind %v)", got, want, blind)
	}
	if d, ok := pick(t, p, req, snap); !ok || d.ClusterID != near[0] || d.RankDepth != 1 {
		t.Fatalf("near has room: %+v ok=%v, want %s at rank 1 (blind rank 1 is %s)", d, ok, near[0], blind[0])
	}
	// The near region's KV caches are full: the key goes far.
	kvFull := lbtest.With(snap, func(c *routing.ClusterView) { c.Stats.KVCacheFreeTokens = 0 }, near...)
	if d, ok := pick(t, p, req, kvFull); !ok || d.ClusterID != far[0] || d.RankDepth != 3 || !d.SelectedAfterKVFreeTokensSkip {
		t.Fatalf("near KV full: %+v ok=%v, want %s at rank 3 after a KV skip", d, ok, far[0])
	}
	// Retries that excluded the near clusters go far too.
	retry := &routing.Request{AffinityKey: key, InputTokens: 1000, Excluded: near}
	if d, ok := pick(t, p, retry, snap); !ok || d.ClusterID != far[0] {
		t.Fatalf("near excluded: %+v ok=%v, want %s", d, ok, far[0])
	}
	// Off, the far cluster is first again.
	if d, ok := pick(t, mustNew(t, Config{ConsiderKVFreeTokens: true}), req, snap); !ok || d.ClusterID != blind[0] {
		t.Fatalf("tiers off: %+v ok=%v, want the RTT-blind rank 1 %s", d, ok, blind[0])
	}
}

// jittered returns snap with every RTT moved by up to ±1 ms, as another hub
// replica, or the same one a probe later, measures it.
func jittered(snap *routing.Snapshot, r *rand.Rand, version uint64) *routing.Snapshot {
	s := clone(snap, version)
	for i := range s.Clusters {
		s.Clusters[i].RTT += time.Duration(r.IntN(2*int(ms)+1)) - ms
	}
	return s
}

// RTT jitter inside a tier changes no ranking, and the ranker keeps its
// cache across it: hub replicas that measure slightly different RTTs rank
// every key alike.
func TestTierJitterKeepsRankings(t *testing.T) {
	base := regions()
	base.Clusters = append(base.Clusters, lbtest.Cluster("mid-0", 20*ms), lbtest.Cluster("near-2", 3*ms))
	slices.SortFunc(base.Clusters, func(a, b routing.ClusterView) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	p := mustNew(t, Config{RTTTier: 10 * ms})
	want := map[string][]string{}
	for i := range 200 {
		key := fmt.Sprintf("key-%d", i)
		want[key] = ids(base, p.Ranker().Rank(&routing.Request{AffinityKey: key}, base))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for v := range uint64(50) {
		snap := jittered(base, r, 100+v)
		for i := range 200 {
			key := fmt.Sprintf("key-%d", i)
			got := ids(snap, p.Ranker().Rank(&routing.Request{AffinityKey: key}, snap))
			if !slices.Equal(got, want[key]) {
				t.Fatalf("jitter %d key %s: ranking %v, want %v", v, key, got, want[key])
			}
			if fresh := ids(snap, p.Ranker().compute(key, snap)); !slices.Equal(fresh, want[key]) {
				t.Fatalf("jitter %d key %s: fresh ranking %v, want %v", v, key, fresh, want[key])
			}
		}
		if n := p.Ranker().rankings.len(); n != 200 {
			t.Fatalf("jitter %d emptied the cache: %d keys cached, want 200", v, n)
		}
	}
}

// A cluster whose RTT moves it to another tier changes the rankings, and
// the cache follows: cached answers always match a fresh ranking.
func TestTierChangeInvalidatesCache(t *testing.T) {
	snap := regions()
	key := farFirstKey(t, snap)
	p := mustNew(t, Config{RTTTier: 10 * ms})
	req := &routing.Request{AffinityKey: key}
	before := ids(snap, p.Ranker().Rank(req, snap))
	blindFirst := ids(snap, NewRanker("", WeightMaxInputTPS).Rank(req, snap))[0]
	// The far rank-1 cluster moves next door: it joins the near tier, where
	// it outranks the near clusters for this key.
	moved := lbtest.With(snap, func(c *routing.ClusterView) { c.RTT = 3 * ms }, blindFirst)
	after := ids(moved, p.Ranker().Rank(req, moved))
	if after[0] != blindFirst || slices.Equal(after, before) {
		t.Fatalf("after %s moved near: ranking %v (before %v), want it first", blindFirst, after, before)
	}
	checkAgainstFresh(t, p, req, moved)
	// And back: the old ranking returns.
	back := clone(snap, moved.Version+1)
	if got := ids(back, p.Ranker().Rank(req, back)); !slices.Equal(got, before) {
		t.Fatalf("moved back: %v, want %v", got, before)
	}
	checkAgainstFresh(t, p, req, back)
}

// With rtt_tier_ms 0 the ranking is upstream Stargate's exactly, whatever
// the RTTs: score descending, then cluster id, computed here from the
// pinned hash without the ranker's code.
func TestTiersOffIsTheRendezvousRanking(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for iter := range 300 {
		snap := &routing.Snapshot{Target: goldenTarget}
		for i := range 1 + r.IntN(10) {
			c := routing.ClusterView{ClusterID: fmt.Sprintf("c%02d", i), RTT: time.Duration(r.IntN(200)) * ms}
			c.Stats.MaxInputTPS = float64(1 + r.IntN(5))
			snap.Clusters = append(snap.Clusters, c)
		}
		key := fmt.Sprintf("k%d", iter)
		type ranked struct {
			id    string
			score float64
		}
		var want []ranked
		for _, c := range snap.Clusters {
			if s, ok := score(c.Stats.MaxInputTPS, hashOf("", goldenTarget, key, c.ClusterID)); ok {
				want = append(want, ranked{c.ClusterID, s})
			}
		}
		slices.SortFunc(want, func(a, b ranked) int {
			if a.score != b.score {
				if a.score > b.score {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		var wantIDs []string
		for _, w := range want {
			wantIDs = append(wantIDs, w.id)
		}
		p := mustNew(t, Config{RTTTier: 0})
		if got := ids(snap, p.Ranker().Rank(&routing.Request{AffinityKey: key}, snap)); !slices.Equal(got, wantIDs) {
			t.Fatalf("iteration %d: ranking %v, want %v", iter, got, wantIDs)
		}
	}
}
