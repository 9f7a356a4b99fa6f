package random

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

func snapshot(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{Model: "m"}}
	for i := range n {
		s.Clusters = append(s.Clusters, routing.ClusterView{ClusterID: fmt.Sprintf("c%02d", i)})
	}
	return s
}

// chiSquare99_9 is the 99.9% quantile of the chi-square distribution by
// degrees of freedom: a uniform sampler exceeds it one run in a thousand.
// The draws below are seeded, so each test is deterministic; the bound only
// says the seeded outcome is what a uniform sampler looks like.
var chiSquare99_9 = map[int]float64{1: 10.83, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}

// TestUniform draws from seeded sources and checks the counts over the
// eligible clusters with a chi-square test, and that excluded clusters are
// never drawn. The cases cover each path: no exclusion (one uniform index),
// few exclusions (rejection probes), many (the reservoir scan), unknown and
// repeated ids.
func TestUniform(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		excluded []string
	}{
		{"no exclusions", 8, nil},
		{"one excluded: probes", 8, []string{"c03"}},
		{"two of eight excluded: probes", 8, []string{"c00", "c07"}},
		{"three of eight excluded: reservoir", 8, []string{"c00", "c04", "c07"}},
		{"unknown ids are ignored", 6, []string{"nope", "c02"}},
		{"repeated id counts once", 8, []string{"c01", "c01", "c01"}},
		{"all but two excluded", 8, []string{"c00", "c01", "c02", "c03", "c05", "c06"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := snapshot(tc.n)
			req := &routing.Request{Excluded: tc.excluded}
			rng := rand.New(rand.NewPCG(42, uint64(len(tc.name))))
			counts := make([]int, tc.n)
			const draws = 40000
			for range draws {
				d, ok := New().Pick(req, snap, time.Time{}, rng)
				if !ok || d.RankDepth != 1 || snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
					t.Fatalf("decision %+v %v", d, ok)
				}
				counts[d.Cluster]++
			}
			eligible := 0
			for i, c := range counts {
				if req.IsExcluded(snap.Clusters[i].ClusterID) {
					if c != 0 {
						t.Fatalf("excluded %s drawn %d times", snap.Clusters[i].ClusterID, c)
					}
					continue
				}
				eligible++
			}
			want := float64(draws) / float64(eligible)
			chi2 := 0.0
			for i, c := range counts {
				if !req.IsExcluded(snap.Clusters[i].ClusterID) {
					chi2 += (float64(c) - want) * (float64(c) - want) / want
				}
			}
			if limit := chiSquare99_9[eligible-1]; chi2 > limit {
				t.Fatalf("chi-square %.2f > %.2f with %d degrees of freedom: counts %v", chi2, limit, eligible-1, counts)
			}
		})
	}
}

// A seeded source gives the same sequence; the decision is a function of the
// request, the snapshot and the source only.
func TestDeterministic(t *testing.T) {
	snap := snapshot(16)
	run := func(excluded []string) string {
		rng := rand.New(rand.NewPCG(7, 7))
		out := ""
		for range 50 {
			d, _ := New().Pick(&routing.Request{Excluded: excluded}, snap, time.Time{}, rng)
			out += d.ClusterID
		}
		return out
	}
	for _, ex := range [][]string{nil, {"c01"}, {"c01", "c02", "c03", "c04", "c05"}} {
		if a, b := run(ex), run(ex); a != b {
			t.Fatalf("excluded %v: same seed, different draws", ex)
		}
	}
}

// Property: over random snapshots and exclusion lists, an excluded cluster is
// never chosen, and there is no decision exactly when everything is excluded.
func TestNeverChoosesExcluded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := New()
	for iter := range 20000 {
		n := rng.IntN(10)
		snap := snapshot(n)
		var excluded []string
		for range rng.IntN(n + 3) {
			excluded = append(excluded, fmt.Sprintf("c%02d", rng.IntN(n+2))) // may repeat or be unknown
		}
		req := &routing.Request{Excluded: excluded}
		allExcluded := true
		for i := range snap.Clusters {
			allExcluded = allExcluded && req.IsExcluded(snap.Clusters[i].ClusterID)
		}
		d, ok := p.Pick(req, snap, time.Time{}, rng)
		if ok == allExcluded {
			t.Fatalf("iteration %d: n=%d excluded %v: ok=%v", iter, n, excluded, ok)
		}
		if ok && req.IsExcluded(d.ClusterID) {
			t.Fatalf("iteration %d: chose excluded %s", iter, d.ClusterID)
		}
	}
	if _, ok := p.Pick(&routing.Request{}, nil, time.Time{}, rng); ok {
		t.Fatal("nil snapshot gave a decision")
	}
}

func TestDistinct(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want int
	}{
		{nil, 0}, {[]string{"a"}, 1}, {[]string{"a", "a"}, 1}, {[]string{"a", "b", "a", "c", "b"}, 3},
	} {
		if got := distinct(tc.ids); got != tc.want {
			t.Errorf("distinct(%v) = %d, want %d", tc.ids, got, tc.want)
		}
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	snap := microbenchSnapshot(64)
	rng := rand.New(rand.NewPCG(1, 2))
	p := New()
	if p.String() != "random" {
		t.Fatalf("String = %q", p)
	}
	for _, ex := range [][]string{nil, {"cluster-0000"}, {"cluster-0000", "cluster-0001"}} {
		req := &routing.Request{InputTokens: 512, Excluded: ex}
		if n := testing.AllocsPerRun(500, func() { p.Pick(req, snap, time.Time{}, rng) }); n != 0 {
			t.Errorf("excluded %v: %v allocs per Pick", ex, n)
		}
	}
	// Many exclusions: the reservoir path.
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("cluster-%04d", i))
	}
	req := &routing.Request{Excluded: many}
	if n := testing.AllocsPerRun(100, func() { p.Pick(req, snap, time.Time{}, rng) }); n != 0 {
		t.Errorf("reservoir: %v allocs per Pick", n)
	}
}

// The exact draws of each path, replayed from a twin source: no exclusion is
// one IntN(n); few exclusions probe IntN(n) until a non-excluded index (at
// most 8 times); otherwise, or when all 8 probes fail, a size-one reservoir
// over the eligible clusters (the j-th replaces the choice when IntN(j) == 0).
func TestDrawSequence(t *testing.T) {
	snap := snapshot(8)
	reservoir := func(req *routing.Request, rng *rand.Rand) int {
		chosen, seen := -1, 0
		for i := range snap.Clusters {
			if !req.IsExcluded(snap.Clusters[i].ClusterID) {
				seen++
				if rng.IntN(seen) == 0 {
					chosen = i
				}
			}
		}
		return chosen
	}
	probes := func(req *routing.Request, rng *rand.Rand) int {
		for range 8 {
			if i := rng.IntN(8); !req.IsExcluded(snap.Clusters[i].ClusterID) {
				return i
			}
		}
		return reservoir(req, rng)
	}
	for _, tc := range []struct {
		name     string
		excluded []string
		replay   func(req *routing.Request, rng *rand.Rand) int
	}{
		{"no exclusions", nil, func(_ *routing.Request, rng *rand.Rand) int { return rng.IntN(8) }},
		{"2 of 8 probe", []string{"c02", "c05"}, probes},
		{"3 of 8 scan", []string{"c02", "c05", "c06"}, reservoir},
		{"7 of 8 scan", []string{"c00", "c01", "c02", "c03", "c04", "c05", "c07"}, reservoir},
	} {
		req := &routing.Request{Excluded: tc.excluded}
		got, want := rand.New(rand.NewPCG(9, 9)), rand.New(rand.NewPCG(9, 9))
		for i := range 2000 {
			d, _ := New().Pick(req, snap, time.Time{}, got)
			if w := tc.replay(req, want); d.Cluster != w {
				t.Fatalf("%s: draw %d chose %d, replay %d", tc.name, i, d.Cluster, w)
			}
		}
	}
}
