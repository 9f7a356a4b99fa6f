package roundrobin

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

func snapshot(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{Model: "m"}}
	for i := range n {
		s.Clusters = append(s.Clusters, routing.ClusterView{ClusterID: fmt.Sprintf("cluster-%04d", i)})
	}
	return s
}

// sequence makes k decisions with one fresh Picker and returns the chosen
// ids' last digits, e.g. "0134".
func sequence(t *testing.T, p *Picker, snap *routing.Snapshot, excluded []string, k int) string {
	t.Helper()
	var b strings.Builder
	for range k {
		d, ok := p.Pick(&routing.Request{Excluded: excluded}, snap, time.Time{}, nil)
		if !ok {
			b.WriteByte('-')
			continue
		}
		if d.RankDepth != 1 || snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
			t.Fatalf("decision %+v", d)
		}
		b.WriteByte(d.ClusterID[len(d.ClusterID)-1])
	}
	return b.String()
}

func TestSequences(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		excluded []string
		want     string
	}{
		{"no exclusions", 4, nil, "01230123"},
		{"empty exclusion list", 3, []string{}, "012012"},
		// Upstream Stargate's round_robin_single_exclusion test.
		{"one excluded", 4, []string{"cluster-0002"}, "013013"},
		{"first excluded", 4, []string{"cluster-0000"}, "123123"},
		{"last excluded", 4, []string{"cluster-0003"}, "012012"},
		// Upstream Stargate's round_robin_two_exclusions test.
		{"two excluded", 5, []string{"cluster-0001", "cluster-0003"}, "0240240"},
		{"two excluded, listed out of order", 5, []string{"cluster-0003", "cluster-0001"}, "0240240"},
		{"two adjacent excluded", 5, []string{"cluster-0001", "cluster-0002"}, "034034"},
		{"repeated id is one exclusion", 4, []string{"cluster-0002", "cluster-0002"}, "013013"},
		{"three excluded: exact path", 6, []string{"cluster-0001", "cluster-0003", "cluster-0004"}, "025025"},
		{"three ids, two distinct: fast path", 5, []string{"cluster-0001", "cluster-0003", "cluster-0001"}, "024024"},
		{"unknown id: exact path", 3, []string{"elsewhere"}, "012012"},
		{"one known, one unknown: exact path", 4, []string{"elsewhere", "cluster-0001"}, "023023"},
		{"all but one excluded", 3, []string{"cluster-0000", "cluster-0002"}, "1111"},
		{"all excluded", 2, []string{"cluster-0000", "cluster-0001"}, "---"},
		{"all of three excluded", 3, []string{"cluster-0000", "cluster-0001", "cluster-0002"}, "---"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sequence(t, New(), snapshot(tc.n), tc.excluded, len(tc.want)); got != tc.want {
				t.Fatalf("sequence %s, want %s", got, tc.want)
			}
		})
	}
}

// One counter serves every request shape: turns taken with exclusions
// advance the rotation for requests without, and a failed decision takes no
// turn.
func TestSharedCounter(t *testing.T) {
	snap := snapshot(4)
	p := New()
	steps := []struct {
		excluded []string
		want     string
	}{
		{nil, "0"},                      // turn 0
		{[]string{"cluster-0000"}, "2"}, // turn 1 of 3 eligible: 1,2,3 → 2
		{nil, "2"},                      // turn 2
		{[]string{"cluster-0000", "cluster-0001", "cluster-0002", "cluster-0003"}, "-"}, // no turn taken
		{nil, "3"},                      // turn 3
		{[]string{"x", "y", "z"}, "0"},  // turn 4 mod 4
		{[]string{"cluster-0001"}, "3"}, // turn 5 mod 3 = 2 → 0,2,3 → 3
	}
	for i, st := range steps {
		if got := sequence(t, p, snap, st.excluded, 1); got != st.want {
			t.Fatalf("step %d (excluded %v): %s, want %s", i, st.excluded, got, st.want)
		}
	}
}

// A malformed snapshot that repeats an excluded id: the fast path must not
// return the duplicate; the exact path answers instead.
func TestDuplicateClusterIDs(t *testing.T) {
	snap := snapshot(4)
	snap.Clusters[3].ClusterID = "cluster-0001" // 0, 1, 2, 1
	p := New()
	for range 20 {
		d, ok := p.Pick(&routing.Request{Excluded: []string{"cluster-0001"}}, snap, time.Time{}, nil)
		if !ok || d.ClusterID == "cluster-0001" {
			t.Fatalf("got %+v %v", d, ok)
		}
	}
}

// Property: over random snapshots and exclusion lists an excluded cluster is
// never chosen, there is no decision exactly when everything is excluded, and
// a run of decisions with one fixed exclusion list visits the eligible
// clusters in order, once per lap.
func TestNeverChoosesExcluded(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 5000 {
		n := rng.IntN(9)
		snap := snapshot(n)
		var excluded []string
		for range rng.IntN(4) {
			excluded = append(excluded, fmt.Sprintf("cluster-%04d", rng.IntN(n+2)))
		}
		req := &routing.Request{Excluded: excluded}
		var eligible []int
		for i := range snap.Clusters {
			if !req.IsExcluded(snap.Clusters[i].ClusterID) {
				eligible = append(eligible, i)
			}
		}
		p := New()
		for k := range 2*len(eligible) + 1 {
			d, ok := p.Pick(req, snap, time.Time{}, nil)
			if ok != (len(eligible) > 0) {
				t.Fatalf("iteration %d: n=%d excluded %v: ok=%v", iter, n, excluded, ok)
			}
			if !ok {
				break
			}
			if want := eligible[k%len(eligible)]; d.Cluster != want {
				t.Fatalf("iteration %d: n=%d excluded %v: decision %d chose %d, want %d", iter, n, excluded, k, d.Cluster, want)
			}
		}
	}
	if _, ok := New().Pick(&routing.Request{}, nil, time.Time{}, nil); ok {
		t.Fatal("nil snapshot gave a decision")
	}
}

// Concurrent decisions each take their own turn: with no exclusions, W
// workers making K decisions each over n clusters choose every cluster exactly
// W·K/n times. Run with -race.
func TestConcurrentTurns(t *testing.T) {
	const n, workers, perWorker = 5, 8, 1000
	snap := snapshot(n)
	p := New()
	var mu sync.Mutex
	counts := make([]int, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int, n)
			for range perWorker {
				d, _ := p.Pick(&routing.Request{}, snap, time.Time{}, nil)
				local[d.Cluster]++
			}
			mu.Lock()
			for i := range local {
				counts[i] += local[i]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, c := range counts {
		if c != workers*perWorker/n {
			t.Fatalf("cluster %d chosen %d times, want %d (counts %v)", i, c, workers*perWorker/n, counts)
		}
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	snap := microbenchSnapshot(64)
	p := New()
	if p.String() != "round-robin" {
		t.Fatalf("String = %q", p)
	}
	for _, ex := range [][]string{nil, {"cluster-0000"}, {"cluster-0000", "cluster-0001"}, {"a", "b", "cluster-0005"}} {
		req := &routing.Request{InputTokens: 512, Excluded: ex}
		if n := testing.AllocsPerRun(500, func() { p.Pick(req, snap, time.Time{}, nil) }); n != 0 {
			t.Errorf("excluded %v: %v allocs per Pick", ex, n)
		}
	}
}

func TestFind(t *testing.T) {
	snap := snapshot(7)
	for i := range snap.Clusters {
		if got, ok := find(snap.Clusters, snap.Clusters[i].ClusterID); !ok || got != i {
			t.Errorf("find(%s) = %d, %v", snap.Clusters[i].ClusterID, got, ok)
		}
	}
	for _, id := range []string{"", "a", "cluster-0003x", "z"} {
		if _, ok := find(snap.Clusters, id); ok {
			t.Errorf("found absent %q", id)
		}
	}
	// An unsorted snapshot still gets the exact rotation (the fast path may
	// miss, never mis-place).
	rev := snapshot(5)
	slices.Reverse(rev.Clusters) // 4 3 2 1 0
	if got := sequence(t, New(), rev, []string{"cluster-0001"}, 8); got != "43204320" {
		t.Fatalf("unsorted: %s", got)
	}
}
