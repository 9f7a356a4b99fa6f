package prefixaffinity

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// benchBlocks is the benchmark prompt's length in blocks: 128 blocks are
// summarised at stride 2, so a holder one checkpoint short holds 126.
const benchBlocks = 128

// benchHolders returns, for each of variants requests, a prefix match in
// which every one of the n clusters of lbtest.Snapshot holds a prefix: in
// request v, cluster (v+j) mod n holds 128−2j blocks when spread, or all
// 128 when not (a band of n).
func benchHolders(n, variants int, spread bool) []routing.PrefixMatch {
	out := make([]routing.PrefixMatch, variants)
	for v := range out {
		m := routing.PrefixMatch{TotalBlocks: benchBlocks, BlockTokens: 16, Stride: 2} // 128 blocks: stride 2
		for j := range n {
			b := benchBlocks
			if spread {
				b = max(benchBlocks-2*j, 1)
			}
			m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: fmt.Sprintf("cluster-%04d", (v+j)%n), Blocks: b})
		}
		if !spread {
			// The index sorts equal lengths by cluster id.
			for j := range m.Holders {
				m.Holders[j].ClusterID = fmt.Sprintf("cluster-%04d", j)
			}
		}
		out[v] = m
	}
	return out
}

// saturate returns snap with every cluster running want requests.
func saturate(snap *routing.Snapshot, running func(i int) uint64) *routing.Snapshot {
	s := *snap
	s.Clusters = append([]routing.ClusterView(nil), snap.Clusters...)
	for i := range s.Clusters {
		s.Clusters[i].Stats.NumRunningQueries = running(i)
	}
	return &s
}

type benchCase struct {
	name    string
	snap    *routing.Snapshot
	holders []routing.PrefixMatch
	hint    bool
	tier    routing.PrefixTier
}

// benchCases is one case per tier on the 64-cluster microbenchmark pool
// (lbtest.Snapshot: every cluster has a free slot, 16 slots each) with 64
// holders per request.
func benchCases() []benchCase {
	n := lbtest.Candidates
	idle := lbtest.Snapshot("m", n)
	spread := benchHolders(n, n, true)
	// Split: the two band members of each request (clusters v and v+1)
	// cannot both be full for every v, so the holders are one fixed band:
	// clusters 0 and 1 full, the rest under the guard.
	fixed := benchHolders(n, 1, true)
	bandFull := saturate(idle, func(i int) uint64 {
		if i < 2 {
			return 16
		}
		return uint64(i % 9)
	})
	allBusy := saturate(idle, func(i int) uint64 { return 16 + uint64(i%3) })
	return []benchCase{
		{name: "cache", snap: idle, holders: spread, tier: routing.PrefixTierCache},
		{name: "cache-band-64", snap: idle, holders: benchHolders(n, 1, false), tier: routing.PrefixTierCache},
		{name: "split", snap: bandFull, holders: fixed, tier: routing.PrefixTierSplit},
		{name: "saturated-queue", snap: allBusy, holders: spread, tier: routing.PrefixTierCache}, // queue_on_saturated_holders (default): the least-loaded holder
		{name: "load", snap: idle, holders: []routing.PrefixMatch{{TotalBlocks: benchBlocks, BlockTokens: 16, Stride: 2}}, tier: routing.PrefixTierLoad},
		{name: "returning-hint", snap: idle, holders: spread, hint: true, tier: routing.PrefixTierCache},
	}
}

func benchRequests(bc benchCase) []routing.Request {
	reqs := make([]routing.Request, len(bc.holders))
	for i := range reqs {
		reqs[i] = lbtest.Request(i, lbtest.Key(i), nil)
		reqs[i].Prefix = bc.holders[i]
		if bc.hint {
			// The hint names the request's shortest holder, so the
			// session rules, not the index, pick it.
			h := bc.holders[i].Holders
			reqs[i].LastClusterID = h[len(h)-1].ClusterID
		}
	}
	return reqs
}

// BenchmarkPick times one decision with 64 clusters and 64 holders per
// request, in each tier.
func BenchmarkPick(b *testing.B) {
	p, err := New(Config{Comparator: DefaultComparator, SplitGuard: DefaultSplitGuard, LastClusterAffinity: true, PreferLastCluster: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			reqs := benchRequests(bc)
			rng := rand.New(rand.NewPCG(1, 2))
			now := time.Unix(0, 0)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if d, ok := p.Pick(&reqs[i%len(reqs)], bc.snap, now, rng); !ok || d.PrefixTier != bc.tier {
					b.Fatalf("decision %+v, want tier %v", d, bc.tier)
				}
				i++
			}
		})
	}
}

// TestBenchCasesReachTheirTier keeps the benchmark honest: each case's
// every request lands in the tier it is named for, and a decision
// allocates nothing.
func TestBenchCasesReachTheirTier(t *testing.T) {
	p := mustNew(t, func(c *Config) { c.LastClusterAffinity = true })
	r := rng(1)
	for _, bc := range benchCases() {
		reqs := benchRequests(bc)
		for i := range reqs {
			d, ok := p.Pick(&reqs[i], bc.snap, time.Time{}, r)
			if !ok || d.PrefixTier != bc.tier {
				t.Fatalf("%s request %d: %+v, want tier %v", bc.name, i, d, bc.tier)
			}
			if bc.hint && d.ClusterID != reqs[i].LastClusterID {
				t.Fatalf("%s request %d: chose %s, hint %s", bc.name, i, d.ClusterID, reqs[i].LastClusterID)
			}
		}
		if n := testing.AllocsPerRun(100, func() { p.Pick(&reqs[0], bc.snap, time.Time{}, r) }); n != 0 {
			t.Errorf("%s: %v allocs per Pick", bc.name, n)
		}
	}
}
