package wnw

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// holders is a prefix summary of 40 blocks held by the given clusters, all
// with the whole prompt (one band), in the index's order (by id).
func holders(ids ...string) routing.PrefixMatch {
	m := routing.PrefixMatch{TotalBlocks: 40, BlockTokens: 16}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	for _, id := range ids {
		m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: id, Blocks: 40})
	}
	return m
}

// ringGroup is key's ring group of size k on snap, as cluster ids.
func ringGroup(t *testing.T, p *Picker, snap *routing.Snapshot, key string) []string {
	t.Helper()
	var out []string
	for _, i := range p.affinity.group(nil, snap, &routing.Request{AffinityKey: key}) {
		out = append(out, snap.Clusters[i].ClusterID)
	}
	return out
}

// outside returns a cluster of snap not in group.
func outside(snap *routing.Snapshot, group []string) string {
	for i := range snap.Clusters {
		if id := snap.Clusters[i].ClusterID; !slices.Contains(group, id) {
			return id
		}
	}
	return ""
}

// With prefix_affinity off the summary is never read: on random fleets,
// configurations and requests, a request with a summary gets exactly the
// decision of the same request without one, from the same random stream.
func TestPrefixOptionOffChangesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		n := 1 + r.IntN(7)
		var cs []routing.ClusterView
		for i := range n {
			cs = append(cs, cl(fmt.Sprintf("c%d", i), float64(1+r.IntN(40)), uint64(r.IntN(3)), uint64(r.IntN(4))))
		}
		snap := snapOf(cs...)
		p := mustNew(t, func(c *Config) {
			c.SelectionCount = r.IntN(3)
			c.AffinityWait = time.Duration(r.IntN(3)) * 50 * time.Millisecond
			c.LastClusterAffinity = r.IntN(2) == 0
			c.ReturningPrefersLast = r.IntN(2) == 0
			c.IgnoreQueueTime = r.IntN(2) == 0
		})
		with := routing.Request{ReceivedAt: t0, InputTokens: uint64(r.IntN(3000))}
		if r.IntN(3) > 0 {
			with.AffinityKey = fmt.Sprintf("k%d", r.IntN(5))
		}
		if r.IntN(2) == 0 {
			with.LastClusterID = fmt.Sprintf("c%d", r.IntN(n+1))
		}
		var ids []string
		for i := range n {
			if r.IntN(2) == 0 {
				ids = append(ids, fmt.Sprintf("c%d", i))
			}
		}
		with.Prefix = holders(ids...)
		without := with
		without.Prefix = routing.PrefixMatch{}
		at := time.Duration(r.IntN(200)) * time.Millisecond
		seed := uint64(iter)
		dw, okw := p.Pick(&with, snap, t0.Add(at), rng(seed))
		do, oko := p.Pick(&without, snap, t0.Add(at), rng(seed))
		if dw != do || okw != oko {
			t.Fatalf("iter %d: with a summary %+v %v, without %+v %v", iter, dw, okw, do, oko)
		}
		if dw.PrefixMark || dw.PrefixTier != routing.PrefixTierNone {
			t.Fatalf("iter %d: option off marked %+v", iter, dw)
		}
	}
}

// With prefix_affinity a holder outside the key's ring group joins the
// group at its front (the group keeps its size k) and is chosen.
func TestPrefixHolderJoinsRingGroup(t *testing.T) {
	snap := lbtest.Idle(4)
	cfg := func(on bool) func(*Config) {
		return func(c *Config) { c.SelectionCount, c.PrefixAffinity = 1, on }
	}
	p := mustNew(t, cfg(true))
	group := ringGroup(t, p, snap, "k")
	h := outside(snap, group)
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", Prefix: holders(h)}
	for seed := range uint64(10) {
		d, ok := pick(t, p, req, snap, 0, seed)
		if !ok || d.ClusterID != h || d.RankDepth != 1 || d.PrefixTier != routing.PrefixTierCache || !d.PrefixMark {
			t.Fatalf("holder %s outside group %v: %+v ok=%v", h, group, d, ok)
		}
	}
	// Off: the ring group decides.
	if d, ok := pick(t, mustNew(t, cfg(false)), req, snap, 0, 1); !ok || d.ClusterID != group[0] || d.PrefixMark {
		t.Fatalf("option off: %+v, want %s unmarked", d, group[0])
	}
	// A summary without a known holder: the ring group, tier load, marked
	// so the index learns the first holder.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", Prefix: holders()}
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.ClusterID != group[0] || d.PrefixTier != routing.PrefixTierLoad || !d.PrefixMark {
		t.Fatalf("no holder: %+v", d)
	}
	// No summary at all: nothing to mark.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.PrefixMark || d.PrefixTier != routing.PrefixTierNone {
		t.Fatalf("no summary: %+v", d)
	}
}

// The affinity order is: a returning session's last cluster, then the
// prompt's holders (ring members first), then the rest of the ring group,
// cut to k.
func TestPrefixOrderAfterLastCluster(t *testing.T) {
	snap := lbtest.Idle(6)
	p := mustNew(t, func(c *Config) {
		c.SelectionCount, c.PrefixAffinity, c.LastClusterAffinity = 3, true, true
	})
	group := ringGroup(t, p, snap, "k")
	if len(group) != 3 {
		t.Fatalf("group %v", group)
	}
	last := outside(snap, group)
	h := outside(snap, append(slices.Clone(group), last))
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: last, Prefix: holders(h, group[2])}
	var buf [maxStackEntries]int
	plan, ok := p.plan(buf[:0], req, snap)
	if !ok {
		t.Fatal("no plan")
	}
	var got []string
	for _, i := range plan.Order {
		got = append(got, snap.Clusters[i].ClusterID)
	}
	// Promotion inserts last and drops group[2]; the holders then move up:
	// group[2] is no longer in the order, so h and group[2] are inserted in
	// the index's order behind last, and the group is cut back to 3.
	want := []string{last}
	want = append(want, holders(h, group[2]).Holders[0].ClusterID, holders(h, group[2]).Holders[1].ClusterID)
	if !slices.Equal(got, want) || plan.Class.State != routing.SessionReturning || snap.Clusters[plan.Last].ClusterID != last {
		t.Fatalf("order %v, want %v (plan %+v)", got, want, plan)
	}
	// The last cluster is still chosen first while it has room.
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.ClusterID != last || d.PrefixTier != routing.PrefixTierLoad || !d.PrefixMark {
		t.Fatalf("returning: %+v", d)
	}
}

// A request without a ring group (no key, or k = 0) waits for the holders
// of its prompt for cache_affinity_wait_ms, then widens to every cluster.
func TestPrefixHoldersFormTheGroupWithoutAKey(t *testing.T) {
	snap := lbtest.Idle(3)
	p := mustNew(t, func(c *Config) { c.PrefixAffinity, c.AffinityWait = true, 100*time.Millisecond })
	req := &routing.Request{ReceivedAt: t0, Prefix: holders("c1")}
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.ClusterID != "c1" || d.RankDepth != 1 || d.PrefixTier != routing.PrefixTierCache || !d.PrefixMark {
		t.Fatalf("holder with room: %+v", d)
	}
	full := lbtest.Saturate(snap, "c1")
	if d, ok := pick(t, p, req, full, 40*time.Millisecond, 1); ok || d.Wait != 60*time.Millisecond {
		t.Fatalf("holder full at 40 ms: %+v ok=%v, want a 60 ms wait", d, ok)
	}
	d, ok := pick(t, p, req, full, 100*time.Millisecond, 1)
	if !ok || d.ClusterID == "c1" || d.RankDepth != 2 || d.PrefixTier != routing.PrefixTierLoad || !d.PrefixMark {
		t.Fatalf("after the wait: %+v ok=%v", d, ok)
	}
	// Without the option the same request never waits.
	off := mustNew(t, func(c *Config) { c.AffinityWait = 100 * time.Millisecond })
	if d, ok := pick(t, off, req, full, 0, 1); !ok || d.ClusterID == "c1" || d.RankDepth != 1 {
		t.Fatalf("option off: %+v ok=%v", d, ok)
	}
}

func TestPrefixPickDoesNotAllocate(t *testing.T) {
	snap := lbtest.Snapshot("m", 64)
	p := mustNew(t, func(c *Config) { c.SelectionCount, c.PrefixAffinity, c.LastClusterAffinity = 2, true, true })
	m := routing.PrefixMatch{TotalBlocks: 128, BlockTokens: 16, Stride: 2}
	for j := range 64 {
		m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: fmt.Sprintf("cluster-%04d", (j*7)%64), Blocks: 128 - j})
	}
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: "cluster-0005", Prefix: m}
	r := rng(1)
	for _, key := range []string{"k", ""} {
		req.AffinityKey = key
		p.Pick(req, snap, t0, r)
		if n := testing.AllocsPerRun(200, func() { p.Pick(req, snap, t0, r) }); n != 0 {
			t.Errorf("key %q: %v allocations per decision", key, n)
		}
	}
}
