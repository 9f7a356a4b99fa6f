package prefixaffinity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// backlog sets a cluster's measured prefill rate and the prompt tokens
// queued or in prefill on its engines.
func backlog(snap *routing.Snapshot, id string, tps float64, queued uint64) *routing.Snapshot {
	return lbtest.With(snap, func(c *routing.ClusterView) {
		c.Stats.LastMeanInputTPS, c.Stats.QueuedInputSize = tps, queued
	}, id)
}

// With prefill_aware the holder keeps the request until it is more than
// PrefillTolerance times slower than the best other cluster by estimated
// time to first token; a free slot no longer hides a prefill backlog.
func TestPrefillAware(t *testing.T) {
	p := mustNew(t, func(c *Config) { c.PrefillAware, c.LastClusterAffinity = true, true })
	// A 1,600-token prompt, 100 blocks of 16; c0 holds all of it. Every
	// cluster prefills 1,000 tokens/s and has free slots.
	idle := func() *routing.Snapshot {
		s := fleet(3)
		for _, id := range ids(3) {
			s = backlog(s, id, 1000, 0)
		}
		return s
	}
	req := func() *routing.Request {
		return &routing.Request{InputTokens: 1600, Prefix: prefix(100, "c0", 100)}
	}
	for _, tc := range []struct {
		name     string
		snap     *routing.Snapshot
		req      *routing.Request
		want     string
		tier     routing.PrefixTier
		rank     int
		wantMark bool
	}{
		{name: "idle: the holder", snap: idle(), req: req(), want: "c0", tier: routing.PrefixTierCache, rank: rankCache, wantMark: true},
		// c0 would start after 6 s of backlog; cold elsewhere takes
		// 1.6 s: 6 s is under 4 × 1.6 s, so the cache still wins.
		{name: "a backlog under the tolerance", snap: backlog(idle(), "c0", 1000, 6000), req: req(), want: "c0",
			tier: routing.PrefixTierCache, rank: rankCache, wantMark: true},
		// 7 s of backlog is over 6.4 s: the copy is cheaper, though c0
		// has free slots (the free-slot rule would have kept it there).
		{name: "a backlog past the tolerance", snap: backlog(backlog(idle(), "c0", 1000, 7000), "c2", 1000, 500), req: req(),
			want: "c1", tier: routing.PrefixTierSplit, rank: rankSplit, wantMark: true},
		// Every slot busy everywhere: the estimate still decides, with no
		// split guard in the way.
		{name: "saturated fleet", snap: load(backlog(idle(), "c0", 1000, 1000), map[string]uint64{"c0": slots, "c1": slots, "c2": slots}),
			req: req(), want: "c0", tier: routing.PrefixTierCache, rank: rankCache, wantMark: true},
		{name: "no holder: the fastest cold", snap: backlog(backlog(idle(), "c0", 1000, 800), "c1", 1000, 300), req: &routing.Request{
			InputTokens: 1600, Prefix: prefix(100)}, want: "c2", tier: routing.PrefixTierLoad, rank: rankLoad, wantMark: true},
		// The rate is not known yet on c1 and c2: only the holder has a
		// finite estimate.
		{name: "unknown rates", snap: backlog(backlog(backlog(fleet(3), "c0", 1000, 20000), "c1", 0, 10), "c2", 0, 10), req: req(),
			want: "c0", tier: routing.PrefixTierCache, rank: rankCache, wantMark: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := pick(t, p, tc.req, tc.snap, 1)
			if !ok || d.ClusterID != tc.want || d.PrefixTier != tc.tier || d.RankDepth != tc.rank || d.PrefixMark != tc.wantMark {
				t.Fatalf("ok %v cluster %s tier %v rank %d mark %v, want %s %v %d %v", ok, d.ClusterID, d.PrefixTier, d.RankDepth,
					d.PrefixMark, tc.want, tc.tier, tc.rank, tc.wantMark)
			}
		})
	}
}

// A returning session's last cluster with a free slot still leads, as
// without the option; when it is full it competes as a holder of the
// longest known prefix.
func TestPrefillAwareReturningSession(t *testing.T) {
	p := mustNew(t, func(c *Config) { c.PrefillAware, c.LastClusterAffinity = true, true })
	snap := fleet(3)
	for _, id := range ids(3) {
		snap = backlog(snap, id, 1000, 0)
	}
	snap = backlog(snap, "c1", 1000, 5000)
	req := &routing.Request{AffinityKey: "k", InputTokens: 1600, LastClusterID: "c1", Prefix: prefix(100, "c0", 100)}
	if d, _ := pick(t, p, req, snap, 1); d.ClusterID != "c1" || d.PrefixTier != routing.PrefixTierCache {
		t.Fatalf("with a free slot the last cluster leads: got %s %v", d.ClusterID, d.PrefixTier)
	}
	full := running(snap, "c1", slots)
	// The previous turn's answer made c1 a holder of the prompt.
	req = &routing.Request{AffinityKey: "k", InputTokens: 1600, LastClusterID: "c1", Prefix: prefix(100, "c1", 100)}
	if d, _ := pick(t, p, req, full, 1); d.ClusterID != "c1" || d.PrefixTier != routing.PrefixTierCache {
		// 5 s of backlog against 1.6 s cold elsewhere: within 4 times.
		t.Fatalf("a full last cluster within the tolerance: got %s %v", d.ClusterID, d.PrefixTier)
	}
	full = backlog(full, "c1", 1000, 9000)
	if d, _ := pick(t, p, req, full, 1); d.ClusterID == "c1" || d.PrefixTier != routing.PrefixTierSplit {
		t.Fatalf("a full last cluster past the tolerance: got %s %v", d.ClusterID, d.PrefixTier)
	}
}

// Random fleets: prefill_aware refuses only when nothing is selectable
// and never chooses a cluster whose estimate is beaten by more than the
// tolerance, holder or not.
func TestPrefillAwareRandomFleets(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	p := mustNew(t, func(c *Config) { c.PrefillAware, c.LastClusterAffinity = true, true })
	for iter := range 3000 {
		n := 1 + r.IntN(8)
		snap := fleet(n)
		for i := range n {
			id := fmt.Sprintf("c%d", i)
			snap = backlog(running(snap, id, uint64(r.IntN(14))), id, float64(1+r.IntN(3))*1000, uint64(r.IntN(20000)))
		}
		var holders []any
		for i := range n + 1 {
			if r.IntN(2) == 0 {
				holders = append(holders, fmt.Sprintf("c%d", i), 1+r.IntN(100))
			}
		}
		req := &routing.Request{InputTokens: 1600, Prefix: prefix(100, holders...)}
		for i := range n {
			if r.IntN(4) == 0 {
				req.Excluded = append(req.Excluded, fmt.Sprintf("c%d", i))
			}
		}
		d, ok := pick(t, p, req, snap, uint64(iter))
		if ok != (len(req.Excluded) < n) {
			t.Fatalf("iter %d: ok %v with %d of %d excluded", iter, ok, len(req.Excluded), n)
		}
		if !ok {
			continue
		}
		chosen := estimateMs(req, &snap.Clusters[d.Cluster], req.Prefix.HeldBlocks(d.ClusterID))
		for i := range snap.Clusters {
			v := &snap.Clusters[i]
			if req.IsExcluded(v.ClusterID) {
				continue
			}
			if ms := estimateMs(req, v, req.Prefix.HeldBlocks(v.ClusterID)); chosen > PrefillTolerance*ms {
				t.Fatalf("iter %d: chose %s at %.0f ms over %s at %.0f ms", iter, d.ClusterID, chosen, v.ClusterID, ms)
			}
		}
		band := Band(nil, req, snap)
		if (indexOf(band, d.Cluster) >= 0) != (d.PrefixTier == routing.PrefixTierCache) {
			t.Fatalf("iter %d: %s in the band %v, tier %v", iter, d.ClusterID, band, d.PrefixTier)
		}
		if len(band) == 0 && d.PrefixTier != routing.PrefixTierLoad {
			t.Fatalf("iter %d: no holder, tier %v", iter, d.PrefixTier)
		}
	}
}
