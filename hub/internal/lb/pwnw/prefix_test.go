package pwnw

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// holders is a 40-block summary held whole by the clusters at the given
// snapshot indices, in the index's order (by id).
func holders(snap *routing.Snapshot, idx ...int) routing.PrefixMatch {
	m := routing.PrefixMatch{TotalBlocks: 40, BlockTokens: 16}
	var ids []string
	for _, i := range idx {
		ids = append(ids, snap.Clusters[i].ClusterID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: id, Blocks: 40})
	}
	return m
}

// With prefix_affinity off a summary changes no decision.
func TestPrefixOptionOffChangesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	for iter := range 2000 {
		n := 1 + r.IntN(7)
		snap := fleet(n)
		for i := range snap.Clusters {
			snap.Clusters[i].Stats.NumRunningQueries = uint64(r.IntN(2))
		}
		p := mustNew(t, func(c *Config) {
			c.SelectionCount = r.IntN(3)
			c.AffinityWait = time.Duration(r.IntN(3)) * 50 * time.Millisecond
			c.LastClusterAffinity = r.IntN(2) == 0
			c.ReturningPrefersLast = r.IntN(2) == 0
		})
		with := routing.Request{ReceivedAt: t0, InputTokens: uint64(r.IntN(3000))}
		if r.IntN(3) > 0 {
			with.AffinityKey = fmt.Sprintf("k%d", r.IntN(5))
		}
		if r.IntN(2) == 0 {
			with.LastClusterID = fmt.Sprintf("c%d", r.IntN(n+1))
		}
		var idx []int
		for i := range n {
			if r.IntN(2) == 0 {
				idx = append(idx, i)
			}
		}
		with.Prefix = holders(snap, idx...)
		without := with
		without.Prefix = routing.PrefixMatch{}
		at := t0.Add(time.Duration(r.IntN(200)) * time.Millisecond)
		dw, okw := p.Pick(&with, snap, at, rand.New(rand.NewPCG(uint64(iter), 1)))
		do, oko := p.Pick(&without, snap, at, rand.New(rand.NewPCG(uint64(iter), 1)))
		if dw != do || okw != oko {
			t.Fatalf("iter %d: with a summary %+v %v, without %+v %v", iter, dw, okw, do, oko)
		}
		if dw.PrefixMark || dw.PrefixTier != routing.PrefixTierNone {
			t.Fatalf("iter %d: option off marked %+v", iter, dw)
		}
	}
}

// With prefix_affinity the holders move to the front of the key's ranking,
// behind a returning session's promoted last cluster, and the group (the
// first k) is theirs.
func TestPrefixHoldersLeadTheRanking(t *testing.T) {
	snap := fleet(6)
	r := ranking(snap, "k")
	p := mustNew(t, func(c *Config) { c.PrefixAffinity, c.AffinityWait = true, 100*time.Millisecond })
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", Prefix: holders(snap, r[4])}
	d, ok := pick(t, p, req, snap, 0)
	if !ok || d.Cluster != r[4] || d.RankDepth != 1 || d.PrefixTier != routing.PrefixTierCache || !d.PrefixMark {
		t.Fatalf("holder at rank 5: %+v ok=%v", d, ok)
	}
	// The holder full: the request waits for it (it is the group), then the
	// first band opens over the reordered ranking: the key's own first two
	// ranks, now at ranks 2 and 3.
	busy := full(snap, r[4])
	if d, ok := pick(t, p, req, busy, 0); ok || d.Wait != 100*time.Millisecond {
		t.Fatalf("holder full: %+v ok=%v, want the affinity wait", d, ok)
	}
	for seed := range uint64(10) {
		d, ok = pickSeed(t, p, req, busy, 100*time.Millisecond, seed)
		want := map[int]int{r[0]: 2, r[1]: 3}[d.Cluster]
		if !ok || want == 0 || d.RankDepth != want || d.PrefixTier != routing.PrefixTierLoad || !d.PrefixMark {
			t.Fatalf("after the wait: %+v ok=%v, want %s at rank 2 or %s at rank 3", d, ok,
				snap.Clusters[r[0]].ClusterID, snap.Clusters[r[1]].ClusterID)
		}
	}

	// Returning: last cluster first, then the holders in ranking order.
	pl := mustNew(t, func(c *Config) {
		c.PrefixAffinity, c.LastClusterAffinity, c.SelectionCount, c.ReturningPrefersLast = true, true, 3, false
	})
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[5]].ClusterID,
		Prefix: holders(snap, r[3], r[1])}
	// With the group [r5, r1, r3] all idle, the comparison ties; only the
	// three of them are ever chosen, each at rank ≤ 3.
	seen := map[int]bool{}
	for seed := range uint64(30) {
		req.Session, req.SessionPromoted = 0, false
		d, ok := pickSeed(t, pl, req, snap, 0, seed)
		if !ok || d.RankDepth > 3 || !slices.Contains([]int{r[5], r[1], r[3]}, d.Cluster) {
			t.Fatalf("seed %d: %+v ok=%v", seed, d, ok)
		}
		want := map[int]int{r[5]: 1, r[1]: 2, r[3]: 3}[d.Cluster]
		if d.RankDepth != want {
			t.Fatalf("seed %d: %s at rank %d, want %d", seed, d.ClusterID, d.RankDepth, want)
		}
		seen[d.Cluster] = true
	}
	if len(seen) != 3 {
		t.Fatalf("group members chosen: %v", seen)
	}
}

// A request without an affinity key gets its holders as its group, at the
// front of the (keyless) ranking.
func TestPrefixHoldersWithoutAKey(t *testing.T) {
	snap := fleet(5)
	r := ranking(snap, "")
	p := mustNew(t, func(c *Config) { c.PrefixAffinity = true })
	req := &routing.Request{ReceivedAt: t0, Prefix: holders(snap, r[3])}
	if d, ok := pick(t, p, req, snap, 0); !ok || d.Cluster != r[3] || d.RankDepth != 1 || d.PrefixTier != routing.PrefixTierCache {
		t.Fatalf("keyless: %+v ok=%v", d, ok)
	}
	// A holder the ranking omits (no weight) is not inserted.
	noWeight := full(snap) // a copy
	noWeight.Clusters[r[3]].Stats.MaxInputTPS = 0
	if d, ok := pick(t, p, req, noWeight, 0); !ok || d.Cluster == r[3] || d.PrefixTier != routing.PrefixTierLoad || !d.PrefixMark {
		t.Fatalf("unranked holder: %+v ok=%v", d, ok)
	}
}

func TestPrefixPickDoesNotAllocate(t *testing.T) {
	snap := fleet(64)
	p := mustNew(t, func(c *Config) { c.LastClusterAffinity, c.PrefixAffinity, c.AffinityWait = true, true, time.Second })
	r := ranking(snap, "k")
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[5]].ClusterID,
		Prefix: holders(snap, r[9], r[20], r[40])}
	rng := rand.New(rand.NewPCG(1, 2))
	p.Pick(req, snap, t0, rng)
	if n := testing.AllocsPerRun(200, func() {
		req.Session = routing.SessionUnclassified
		p.Pick(req, snap, t0, rng)
	}); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}
