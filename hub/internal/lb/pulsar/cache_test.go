package pulsar

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// fresh is the decision computed without the cache: a full ranking built from
// scratch and walked.
func fresh(p *Picker, req *routing.Request, snap *routing.Snapshot) (routing.Decision, bool) {
	return p.walk(req, snap, p.ranker.compute(req.AffinityKey, snap))
}

// checkAgainstFresh asserts that Rank and Pick through the cache agree with
// an uncached computation for req. It goes through the cache twice.
func checkAgainstFresh(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot) {
	t.Helper()
	checkRank(t, p, req, snap)
	checkPick(t, p, req, snap)
}

// checkRank asserts that one Rank call returns the fresh ranking.
func checkRank(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot) {
	t.Helper()
	if got, want := p.ranker.Rank(req, snap), p.ranker.compute(req.AffinityKey, snap); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("key %q: cached ranking %v, fresh %v", req.AffinityKey, got, want)
	}
}

// checkPick asserts that one Pick call returns the fresh decision.
func checkPick(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot) {
	t.Helper()
	got, gotOK := p.Pick(req, snap, time.Time{}, nil)
	want, wantOK := fresh(p, req, snap)
	if got != want || gotOK != wantOK {
		t.Fatalf("key %q excluded %v: cached decision %+v %v, fresh %+v %v", req.AffinityKey, req.Excluded, got, gotOK, want, wantOK)
	}
}

// clone deep-copies the parts of a snapshot the tests mutate.
func clone(s *routing.Snapshot, version uint64) *routing.Snapshot {
	c := *s
	c.Clusters = append([]routing.ClusterView(nil), s.Clusters...)
	c.Version = version
	return &c
}

// Across every kind of snapshot change the cache must return exactly what a
// fresh computation returns.
func TestCacheMatchesFreshAcrossSnapshotChanges(t *testing.T) {
	base := microbenchSnapshot(16)
	steps := []struct {
		name string
		next func(prev *routing.Snapshot) *routing.Snapshot
	}{
		{"initial", func(*routing.Snapshot) *routing.Snapshot { return clone(base, 10) }},
		{"new version, same contents", func(p *routing.Snapshot) *routing.Snapshot { return clone(p, 11) }},
		{"load changes, weights do not", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 12)
			for i := range s.Clusters {
				s.Clusters[i].Stats.QueuedInputSize += 4096
				s.Clusters[i].Stats.LastMeanInputTPS *= 3 // not the default weight
			}
			return s
		}},
		{"one weight changes in the last bit", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 13)
			s.Clusters[5].Stats.MaxInputTPS = s.Clusters[5].Stats.MaxInputTPS * (1 + 1e-16)
			s.Clusters[5].Stats.MaxInputTPS += 1e-12
			return s
		}},
		{"a weight becomes huge", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 14)
			s.Clusters[3].Stats.MaxInputTPS = 1e9
			return s
		}},
		{"a cluster loses its weight", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 15)
			s.Clusters[3].Stats.MaxInputTPS = 0
			return s
		}},
		{"a cluster leaves", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 16)
			s.Clusters = append(s.Clusters[:7:7], s.Clusters[8:]...)
			return s
		}},
		{"a cluster joins", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 17)
			c := s.Clusters[0]
			c.ClusterID = "cluster-0007b"
			s.Clusters = append(s.Clusters[:7:7], append([]routing.ClusterView{c}, s.Clusters[7:]...)...)
			return s
		}},
		{"an id changes, weights stay", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 18)
			s.Clusters[10].ClusterID = "cluster-0010x"
			return s
		}},
		{"RTTs jitter inside their tiers", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 20)
			for i := range s.Clusters {
				s.Clusters[i].RTT += time.Duration(i%3) * 10 * time.Microsecond
			}
			return s
		}},
		{"an RTT crosses into another tier", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 21)
			s.Clusters[4].RTT = 5 * time.Millisecond
			return s
		}},
		{"another target", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 19)
			s.Target.Model = "other-model"
			return s
		}},
		{"unversioned snapshot changed in place", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 0)
			s.Clusters[2].Stats.MaxInputTPS = 7
			return s
		}},
		{"unversioned snapshot changed again", func(p *routing.Snapshot) *routing.Snapshot {
			s := clone(p, 0)
			s.Clusters[2].Stats.MaxInputTPS = 70000
			return s
		}},
	}
	p := mustNew(t, Config{Seed: "cache"})
	q := mustNew(t, Config{Seed: "cache", ConsiderKVFreeTokens: true})
	// The fixture's RTTs are 500 µs + 75 µs steps: a 50 µs gap makes
	// many tiers, so RTT changes reorder rankings.
	tiered := mustNew(t, Config{Seed: "cache", ConsiderKVFreeTokens: true, RTTTier: 50 * time.Microsecond})
	var snap *routing.Snapshot
	for _, st := range steps {
		snap = st.next(snap)
		for i := range 300 {
			req := &routing.Request{AffinityKey: fmt.Sprintf("key-%d", i%100), InputTokens: uint64(120000 + 50*(i%100))}
			if i%3 == 1 {
				req.Excluded = []string{snap.Clusters[i%len(snap.Clusters)].ClusterID}
			}
			checkAgainstFresh(t, p, req, snap)
			checkAgainstFresh(t, q, req, snap)
			checkAgainstFresh(t, tiered, req, snap)
		}
		if p.ranker.rankings.len() != 100 {
			t.Fatalf("%s: %d cached keys, want 100", st.name, p.ranker.rankings.len())
		}
	}
}

// The cache trusts Snapshot.Version: after checking a version once, it does
// not compare signatures again for it. That is the contract of the state
// store (equal versions of a target are equal snapshots), and it is what
// makes a hit O(1).
func TestCacheTrustsCheckedVersion(t *testing.T) {
	p := mustNew(t, Config{Seed: "v"})
	snap := clone(microbenchSnapshot(8), 5)
	req := &routing.Request{AffinityKey: "k"}
	first := p.ranker.Rank(req, snap)
	if p.ranker.checked.Load() != 5 {
		t.Fatalf("checked version %d, want 5", p.ranker.checked.Load())
	}
	forged := clone(snap, 5) // breaks the contract on purpose
	forged.Clusters[first[0].Index].Stats.MaxInputTPS = 0
	if got := p.ranker.Rank(req, forged); &got[0] != &first[0] {
		t.Fatal("a checked version was compared again")
	}
	honest := clone(forged, 6)
	if got := p.ranker.Rank(req, honest); got[0].Index == first[0].Index {
		t.Fatal("a new version with a changed weight reused the old ranking")
	}
}

func TestCacheProbationAndEviction(t *testing.T) {
	snap := microbenchSnapshot(8)
	p := mustNew(t, Config{Seed: "probation"})
	r := p.ranker
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	// Each check is one access through the cache, alternating between Pick
	// and Rank so both paths go through every state.
	n := 0
	check := func(k string) {
		n++
		if n%2 == 0 {
			checkRank(t, p, &routing.Request{AffinityKey: k}, snap)
		} else {
			checkPick(t, p, &routing.Request{AffinityKey: k}, snap)
		}
	}

	for i := range CacheLimit {
		check(key(i))
	}
	if r.rankings.len() != CacheLimit || r.probation.len() != 0 {
		t.Fatalf("after filling: %d cached, %d on probation", r.rankings.len(), r.probation.len())
	}
	// A new key on a full cache goes on probation and is answered by a scan.
	check("new-a")
	if r.rankings.has("new-a") || !r.probation.has("new-a") || !r.rankings.has(key(0)) {
		t.Fatal("first miss on a full cache must only put the key on probation")
	}
	// Its second miss admits it and evicts the oldest ranking.
	check("new-a")
	if !r.rankings.has("new-a") || r.probation.has("new-a") || r.rankings.has(key(0)) || !r.rankings.has(key(1)) {
		t.Fatal("second miss must admit the key and evict exactly the oldest ranking")
	}
	if r.rankings.len() != CacheLimit {
		t.Fatalf("%d cached, want %d", r.rankings.len(), CacheLimit)
	}
	// A cached key stays a hit: reading it does not refresh its age (FIFO,
	// not LRU), so key(1) is evicted next even though it was just read.
	check(key(1))
	check("new-b")
	check("new-b")
	if r.rankings.has(key(1)) || !r.rankings.has(key(2)) {
		t.Fatal("eviction must be FIFO by insertion")
	}
	// The probation list is bounded: after ProbationLimit other new keys the
	// first one has been forgotten, so its next miss is a first miss again.
	check("forgotten")
	for i := range ProbationLimit {
		check(fmt.Sprintf("one-off-%05d", i))
	}
	if r.probation.len() != ProbationLimit || r.probation.has("forgotten") {
		t.Fatalf("probation holds %d keys (has forgotten: %v)", r.probation.len(), r.probation.has("forgotten"))
	}
	check("forgotten")
	if r.rankings.has("forgotten") || !r.probation.has("forgotten") {
		t.Fatal("a key that left probation must start over")
	}
	// A snapshot change empties both.
	changed := clone(snap, 0)
	changed.Clusters[0].Stats.MaxInputTPS++
	checkPick(t, p, &routing.Request{AffinityKey: "after-change"}, changed)
	if r.rankings.len() != 1 || r.probation.len() != 0 {
		t.Fatalf("after a signature change: %d cached, %d on probation", r.rankings.len(), r.probation.len())
	}
}

func TestLongKeysBypassTheCache(t *testing.T) {
	snap := microbenchSnapshot(16)
	p := mustNew(t, Config{Seed: "long"})
	long := strings.Repeat("x", MaxCacheableKeyLen+1)
	edge := strings.Repeat("y", MaxCacheableKeyLen)
	for range 3 {
		checkAgainstFresh(t, p, &routing.Request{AffinityKey: long}, snap)
		checkAgainstFresh(t, p, &routing.Request{AffinityKey: long, Excluded: []string{"cluster-0000", "cluster-0001"}}, snap)
	}
	if p.ranker.rankings.len() != 0 || p.ranker.probation.len() != 0 {
		t.Fatalf("a %d-byte key was remembered", len(long))
	}
	checkAgainstFresh(t, p, &routing.Request{AffinityKey: edge}, snap)
	if !p.ranker.rankings.has(edge) {
		t.Fatalf("a %d-byte key must be cached", len(edge))
	}
}

// The scan path answers exactly like walking the full ranking, for random
// snapshots, keys, exclusions and KV states.
func TestScanMatchesWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 3000 {
		n := 1 + rng.IntN(12)
		snap := &routing.Snapshot{Target: goldenTarget}
		for i := range n {
			// Few RTT values 5 ms apart: tiers, ties and equal RTTs are common.
			c := routing.ClusterView{ClusterID: fmt.Sprintf("c%02d", i), RTT: time.Duration(rng.IntN(4)) * 5 * time.Millisecond}
			if rng.IntN(5) > 0 {
				c.Stats.MaxInputTPS = float64(1 + rng.IntN(4)) // few values: ties in weight are common
			}
			if rng.IntN(4) > 0 {
				c.Stats.KVCacheCapacityTokens = 100
				c.Stats.KVCacheFreeTokens = uint64(rng.IntN(101))
			}
			snap.Clusters = append(snap.Clusters, c)
		}
		req := &routing.Request{AffinityKey: fmt.Sprintf("k%d", rng.IntN(50)), InputTokens: uint64(rng.IntN(101))}
		for i := range n {
			if rng.IntN(4) == 0 {
				req.Excluded = append(req.Excluded, snap.Clusters[i].ClusterID)
			}
		}
		p := mustNew(t, Config{Seed: "scan", ConsiderKVFreeTokens: iter%2 == 0, RTTTier: time.Duration(iter%3) * 3 * time.Millisecond})
		got, gotOK := p.scan(req, snap)
		want, wantOK := fresh(p, req, snap)
		if got != want || gotOK != wantOK {
			t.Fatalf("iteration %d: scan %+v %v, walk %+v %v", iter, got, gotOK, want, wantOK)
		}
	}
}

// Concurrent decisions over more keys than the cache holds (so probation and
// eviction run constantly) and three alternating snapshots (so the cache is
// reset constantly) all match a fresh computation. Run with -race.
func TestConcurrentDecisions(t *testing.T) {
	base := microbenchSnapshot(16)
	snaps := []*routing.Snapshot{clone(base, 100), clone(base, 101), clone(base, 102)}
	snaps[1].Clusters[4].Stats.MaxInputTPS = 99999  // a different signature
	snaps[2].Clusters[6].RTT = 9 * time.Millisecond // another RTT tier
	p := mustNew(t, Config{Seed: "race", ConsiderKVFreeTokens: true, RTTTier: time.Millisecond})
	const workers, perWorker, keys = 8, 1500, CacheLimit + 1500
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				snap := snaps[(i/50+w)%len(snaps)]
				req := &routing.Request{AffinityKey: fmt.Sprintf("k%d", rng.IntN(keys)), InputTokens: 121000}
				if i%4 == 0 {
					req.Excluded = []string{snap.Clusters[rng.IntN(16)].ClusterID}
				}
				got, gotOK := p.Pick(req, snap, time.Time{}, nil)
				want, wantOK := fresh(p, req, snap)
				ranking := p.ranker.Rank(req, snap)
				if got != want || gotOK != wantOK || fmt.Sprint(ranking) != fmt.Sprint(p.ranker.compute(req.AffinityKey, snap)) {
					errs <- fmt.Sprintf("worker %d request %d: %+v %v, want %+v %v", w, i, got, gotOK, want, wantOK)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	snap := microbenchSnapshot(64)
	other := clone(snap, 2) // same contents, new version: signature re-check path
	long := strings.Repeat("z", 300)
	for _, tc := range []struct {
		name string
		cfg  Config
		req  routing.Request
		alt  bool
	}{
		{"cache hit", Config{Seed: microbenchSeed}, routing.Request{AffinityKey: "cache-prefix-000001", InputTokens: 512}, false},
		{"cache hit, excluded, KV", Config{Seed: microbenchSeed, ConsiderKVFreeTokens: true},
			routing.Request{AffinityKey: "cache-prefix-000001", InputTokens: 512, Excluded: []string{"cluster-0002"}}, false},
		{"hit after a version change", Config{Seed: microbenchSeed}, routing.Request{AffinityKey: "k"}, true},
		{"scan of an uncacheable key", Config{Seed: microbenchSeed, ConsiderKVFreeTokens: true},
			routing.Request{AffinityKey: long, InputTokens: 512, Excluded: []string{"cluster-0000"}}, false},
		{"tiered, hit after a version change", Config{Seed: microbenchSeed, RTTTier: 50 * time.Microsecond},
			routing.Request{AffinityKey: "k"}, true},
		{"tiered scan of an uncacheable key", Config{Seed: microbenchSeed, ConsiderKVFreeTokens: true, RTTTier: 50 * time.Microsecond},
			routing.Request{AffinityKey: long, InputTokens: 512, Excluded: []string{"cluster-0000"}}, false},
	} {
		p := mustNew(t, tc.cfg)
		p.Pick(&tc.req, snap, time.Time{}, nil) // warm the cache
		i := 0
		allocs := testing.AllocsPerRun(500, func() {
			s := snap
			if tc.alt && i%2 == 1 {
				s = other
			}
			i++
			if _, ok := p.Pick(&tc.req, s, time.Time{}, nil); !ok {
				t.Fatal("no decision")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per Pick", tc.name, allocs)
		}
	}
}
