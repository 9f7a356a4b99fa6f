package powerofn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// ranked returns n clusters whose ttft strictly grows with their index:
// cluster i has i·100 queued tokens at 1000 tps, so index 0 is the best.
func ranked(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{Model: "m"}}
	for i := range n {
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID:      fmt.Sprintf("c%02d", i),
			RTT:            time.Millisecond,
			ActiveBackends: 1,
			Stats:          protocol.ModelStats{LastMeanInputTPS: 1000, QueuedInputSize: uint64(i) * 100},
		})
	}
	return s
}

// equal returns n identical clusters.
func equal(n int) *routing.Snapshot {
	s := ranked(n)
	for i := range s.Clusters {
		s.Clusters[i].Stats.QueuedInputSize = 0
	}
	return s
}

func mustNew(t testing.TB, sampleCount int, c lb.Comparator) *Picker {
	t.Helper()
	p, err := New(Config{SampleCount: sampleCount, Comparator: c})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// counts picks draws times and counts the chosen indices.
func counts(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot, draws int, seed uint64) []int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	got := make([]int, len(snap.Clusters))
	for range draws {
		d, ok := p.Pick(req, snap, time.Time{}, rng)
		if !ok {
			t.Fatal("no decision")
		}
		if snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
			t.Fatalf("decision index %d does not match id %q", d.Cluster, d.ClusterID)
		}
		got[d.Cluster]++
	}
	return got
}

// checkDistribution asserts that each count is within tol (a fraction of all
// draws) of its expected probability.
func checkDistribution(t *testing.T, got []int, want []float64, tol float64) {
	t.Helper()
	total := 0
	for _, c := range got {
		total += c
	}
	for i := range got {
		share := float64(got[i]) / float64(total)
		if math.Abs(share-want[i]) > tol {
			t.Errorf("index %d: share %.4f, want %.4f ± %.3f (counts %v)", i, share, want[i], tol, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg       Config
		wantField string
		wantMsg   string
	}{
		{Config{SampleCount: 1}, "", ""},
		{Config{SampleCount: 64, Comparator: lb.ComparatorNumRequestsQueued}, "", ""},
		{DefaultConfig(), "", ""},
		{Config{SampleCount: 0}, "sample_count", "power-of-n sample_count must be between 1 and 64, got 0"},
		{Config{SampleCount: 65}, "sample_count", "power-of-n sample_count must be between 1 and 64, got 65"},
		{Config{SampleCount: -3}, "sample_count", "power-of-n sample_count must be between 1 and 64, got -3"},
		{Config{SampleCount: 2, Comparator: lb.Comparator(42)}, "comparator", "power-of-n comparator must be one of"},
	} {
		t.Run(fmt.Sprintf("%+v", tc.cfg), func(t *testing.T) {
			_, err := New(tc.cfg)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var fe *lb.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField || fe.Algorithm != "power-of-n" {
				t.Fatalf("err = %v, want a FieldError on %s", err, tc.wantField)
			}
			if !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %q, want prefix %q", err, tc.wantMsg)
			}
		})
	}
	d := DefaultConfig()
	if d.SampleCount != 2 || d.Comparator != lb.ComparatorTTFT {
		t.Fatalf("DefaultConfig = %+v", d)
	}
	p := mustNew(t, 5, lb.ComparatorUtilization)
	if p.SampleCount() != 5 || p.Comparator() != lb.ComparatorUtilization || p.String() != "power-of-n" {
		t.Fatalf("accessors: %d %v %s", p.SampleCount(), p.Comparator(), p)
	}
}

func TestNoCandidates(t *testing.T) {
	p := mustNew(t, 2, lb.ComparatorTTFT)
	rng := rand.New(rand.NewPCG(1, 2))
	req := &routing.Request{}
	for name, snap := range map[string]*routing.Snapshot{"nil": nil, "empty": {}} {
		if _, ok := p.Pick(req, snap, time.Time{}, rng); ok {
			t.Errorf("%s snapshot: got a decision", name)
		}
	}
	all := ranked(3)
	req = &routing.Request{Excluded: []string{"c00", "c01", "c02"}}
	for _, sc := range []int{1, 2, 3, 64} {
		if _, ok := mustNew(t, sc, lb.ComparatorTTFT).Pick(req, all, time.Time{}, rng); ok {
			t.Errorf("sample_count %d: everything excluded, got a decision", sc)
		}
	}
}

// sample_count 1 ignores load entirely: one uniform draw.
func TestSampleOneIsUniform(t *testing.T) {
	snap := ranked(4)
	got := counts(t, mustNew(t, 1, lb.ComparatorTTFT), &routing.Request{InputTokens: 100}, snap, 40000, 1)
	checkDistribution(t, got, []float64{0.25, 0.25, 0.25, 0.25}, 0.01)
}

// sample_count 2 draws a uniform distinct pair: with strict ranks 0 < 1 < 2 < 3
// the best of a uniform pair is rank r with probability (3-r)/6.
func TestSampleTwoIsUniformPair(t *testing.T) {
	snap := ranked(4)
	got := counts(t, mustNew(t, 2, lb.ComparatorTTFT), &routing.Request{}, snap, 60000, 2)
	checkDistribution(t, got, []float64{3.0 / 6, 2.0 / 6, 1.0 / 6, 0}, 0.01)
	if got[3] != 0 {
		t.Errorf("the worst cluster can never win a pair: %v", got)
	}
}

// 2 < sample_count < n samples a uniform k-subset: for k=3 of 5 the best of
// the subset is rank r with probability C(4-r, 2)/C(5, 3).
func TestSampleSubsetIsUniform(t *testing.T) {
	snap := ranked(5)
	got := counts(t, mustNew(t, 3, lb.ComparatorTTFT), &routing.Request{}, snap, 60000, 3)
	checkDistribution(t, got, []float64{6.0 / 10, 3.0 / 10, 1.0 / 10, 0, 0}, 0.01)
}

// With exclusions the sample is drawn among the rest only: excluding the best
// of 5 leaves 4 ranked clusters and a uniform pair among them.
func TestSampleWithExclusions(t *testing.T) {
	snap := ranked(5)
	req := &routing.Request{Excluded: []string{"c00", "not-a-candidate"}}
	got := counts(t, mustNew(t, 2, lb.ComparatorTTFT), req, snap, 60000, 4)
	checkDistribution(t, got, []float64{0, 3.0 / 6, 2.0 / 6, 1.0 / 6, 0}, 0.01)
	if got[0] != 0 {
		t.Errorf("an excluded cluster was chosen: %v", got)
	}
}

// sample_count ≥ n (with or without exclusions) compares everything and
// always returns the global best.
func TestFullSamplePicksGlobalBest(t *testing.T) {
	snap := ranked(6)
	snap.Clusters[0], snap.Clusters[4] = snap.Clusters[4], snap.Clusters[0] // the best is at index 4 now
	for _, tc := range []struct {
		sc       int
		excluded []string
		want     string
	}{
		{6, nil, "c00"},
		{64, nil, "c00"},
		{6, []string{"c00"}, "c01"},
		{5, []string{"c00"}, "c01"}, // 5 eligible: the whole pool
		{64, []string{"c00", "c01", "c02"}, "c03"},
	} {
		p := mustNew(t, tc.sc, lb.ComparatorTTFT)
		rng := rand.New(rand.NewPCG(5, uint64(tc.sc)))
		for range 200 {
			d, ok := p.Pick(&routing.Request{Excluded: tc.excluded}, snap, time.Time{}, rng)
			if !ok || d.ClusterID != tc.want {
				t.Fatalf("sc=%d excluded=%v: got %+v, want %s", tc.sc, tc.excluded, d, tc.want)
			}
			if d.RankDepth != 1 {
				t.Fatalf("rank depth %d, want 1", d.RankDepth)
			}
			if wantSampled := min(tc.sc, len(snap.Clusters)-len(tc.excluded)); d.Sampled != wantSampled {
				t.Fatalf("Sampled = %d, want %d", d.Sampled, wantSampled)
			}
		}
	}
}

func TestExcludedNeverPicked(t *testing.T) {
	snap := ranked(64)
	excluded := []string{"c00", "c01", "c13", "c63"} // includes the two best
	for _, sc := range []int{1, 2, 3, 8, 63, 64} {
		p := mustNew(t, sc, lb.ComparatorTTFT)
		rng := rand.New(rand.NewPCG(6, uint64(sc)))
		for range 2000 {
			d, ok := p.Pick(&routing.Request{Excluded: excluded}, snap, time.Time{}, rng)
			if !ok {
				t.Fatalf("sc=%d: no decision", sc)
			}
			for _, x := range excluded {
				if d.ClusterID == x {
					t.Fatalf("sc=%d: excluded cluster %s chosen", sc, x)
				}
			}
		}
	}
}

// Equal scores are broken uniformly at random (replace with probability
// 1/ties), never in favour of the first or last sampled.
func TestTiesAreUniform(t *testing.T) {
	for _, tc := range []struct {
		n, sc int
	}{{3, 3}, {2, 2}, {5, 64}, {4, 2}} {
		t.Run(fmt.Sprintf("n=%d,sc=%d", tc.n, tc.sc), func(t *testing.T) {
			want := make([]float64, tc.n)
			for i := range want {
				want[i] = 1 / float64(tc.n)
			}
			got := counts(t, mustNew(t, tc.sc, lb.ComparatorTTFT), &routing.Request{InputTokens: 10}, equal(tc.n), 30000, 7)
			checkDistribution(t, got, want, 0.015)
		})
	}
}

// Only exactly equal scores tie: a full sample with one cluster marginally
// better always picks it.
func TestNoTieOnDifferentScores(t *testing.T) {
	snap := equal(5)
	snap.Clusters[3].RTT -= time.Nanosecond
	got := counts(t, mustNew(t, 5, lb.ComparatorTTFT), &routing.Request{}, snap, 1000, 8)
	if got[3] != 1000 {
		t.Fatalf("counts %v, want every pick on index 3", got)
	}
}

func TestComparatorIsUsed(t *testing.T) {
	// a is fast but has the longest request queue; b is slow with an empty one.
	snap := &routing.Snapshot{Clusters: []routing.ClusterView{
		{ClusterID: "a", RTT: time.Millisecond, Stats: protocol.ModelStats{LastMeanInputTPS: 1e6, QueueSize: 9, NumRunningQueries: 1, MaxEngineConcurrency: 8}},
		{ClusterID: "b", RTT: time.Second, Stats: protocol.ModelStats{LastMeanInputTPS: 10, QueueSize: 0, NumRunningQueries: 4, MaxEngineConcurrency: 4}},
	}}
	for c, want := range map[lb.Comparator]string{
		lb.ComparatorTTFT:              "a", // 1 ms + 0.1 ms against 1 s + 10 s
		lb.ComparatorInputWorkSeconds:  "a",
		lb.ComparatorNumRequestsQueued: "b", // 9 queued against 0
		lb.ComparatorUtilization:       "a", // 1/8 against 4/4
	} {
		rng := rand.New(rand.NewPCG(9, 9))
		d, ok := mustNew(t, 2, c).Pick(&routing.Request{InputTokens: 100}, snap, time.Time{}, rng)
		if !ok || d.ClusterID != want {
			t.Errorf("%v: picked %q, want %q", c, d.ClusterID, want)
		}
	}
}

// A seeded source gives the same decisions every run.
func TestDeterministicForASeed(t *testing.T) {
	snap := ranked(64)
	for _, sc := range []int{1, 2, 4, 64} {
		p := mustNew(t, sc, lb.ComparatorTTFT)
		run := func(seed uint64, excluded []string) []string {
			rng := rand.New(rand.NewPCG(seed, 1))
			var out []string
			for i := range 200 {
				req := &routing.Request{InputTokens: uint64(i), Excluded: excluded}
				d, _ := p.Pick(req, snap, time.Time{}, rng)
				out = append(out, d.ClusterID)
			}
			return out
		}
		for _, ex := range [][]string{nil, {"c05"}} {
			a, b := run(42, ex), run(42, ex)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("sc=%d: same seed, different decisions", sc)
			}
			if sc < 64 && fmt.Sprint(a) == fmt.Sprint(run(43, ex)) {
				t.Fatalf("sc=%d: different seeds, identical 200 decisions", sc)
			}
		}
	}
}

func TestDecisionCarriesQueueEstimate(t *testing.T) {
	snap := &routing.Snapshot{Clusters: []routing.ClusterView{
		{ClusterID: "only", Stats: protocol.ModelStats{LastMeanInputTPS: 300, QueuedInputSize: 1000}},
	}}
	d, ok := mustNew(t, 2, lb.ComparatorTTFT).Pick(&routing.Request{}, snap, time.Time{}, rand.New(rand.NewPCG(1, 1)))
	if !ok || d.Cluster != 0 || d.ClusterID != "only" || !d.QueueEstimateKnown || d.QueueEstimateMs != 3334 || d.Sampled != 1 {
		t.Fatalf("decision %+v", d)
	}
}
