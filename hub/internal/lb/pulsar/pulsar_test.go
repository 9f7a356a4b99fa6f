package pulsar

import (
	"encoding/json"
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

var goldenTarget = routing.Target{RoutingKey: "tenant-a", Model: "m"}

// golden is five clusters a..e with max_input_tps 100, 200, 300, 0 and 400:
// d has no peak yet and must never be ranked.
func golden() *routing.Snapshot {
	s := &routing.Snapshot{Target: goldenTarget}
	for i, w := range []float64{100, 200, 300, 0, 400} {
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID: string(rune('a' + i)),
			Stats: protocol.ModelStats{MaxInputTPS: w, LastMeanInputTPS: 1000,
				KVCacheCapacityTokens: 10000, KVCacheFreeTokens: 10000},
		})
	}
	return s
}

func mustNew(t testing.TB, cfg Config) *Picker {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ids(snap *routing.Snapshot, ranking []Ranked) []string {
	out := make([]string, len(ranking))
	for i, r := range ranking {
		out[i] = snap.Clusters[r.Index].ClusterID
	}
	return out
}

func pick(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot) (routing.Decision, bool) {
	t.Helper()
	d, ok := p.Pick(req, snap, time.Time{}, rand.New(rand.NewPCG(1, 2)))
	if ok && snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
		t.Fatalf("decision index %d does not match id %q", d.Cluster, d.ClusterID)
	}
	return d, ok
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Config
		wantErr string
	}{
		{`{}`, Config{}, ""},
		{`{"seed":"x","consider_kv_free_tokens":true}`, Config{Seed: "x", ConsiderKVFreeTokens: true}, ""},
		{`{"rendezvous_weight":"max-input-tps"}`, Config{RendezvousWeight: WeightMaxInputTPS}, ""},
		{`{"rendezvous_weight":"last-mean-input-tps"}`, Config{RendezvousWeight: WeightLastMeanInputTPS}, ""},
		{`{"rendezvous_weight":"Max-Input-TPS"}`, Config{}, `unknown rendezvous weight "Max-Input-TPS"`},
		{`{"rendezvous_weight":"last_mean_input_tps"}`, Config{}, `unknown rendezvous weight "last_mean_input_tps"`},
	} {
		var c Config
		err := json.Unmarshal([]byte(tc.in), &c)
		if tc.wantErr != "" {
			if !errors.Is(err, ErrUnknownWeight) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || c != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.in, c, err, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", tc.in, err)
		}
	}

	if DefaultConfig() != (Config{}) || DefaultConfig().RendezvousWeight.String() != "max-input-tps" {
		t.Fatalf("DefaultConfig = %+v", DefaultConfig())
	}
	_, err := New(Config{RendezvousWeight: Weight(7)})
	var fe *lb.FieldError
	if !errors.As(err, &fe) || fe.Algorithm != "pulsar" || fe.Field != "rendezvous_weight" ||
		err.Error() != "pulsar rendezvous_weight must be max-input-tps or last-mean-input-tps, got Weight(7)" {
		t.Fatalf("invalid weight: %v", err)
	}
	for w, name := range map[Weight]string{WeightMaxInputTPS: "max-input-tps", WeightLastMeanInputTPS: "last-mean-input-tps"} {
		b, err := w.MarshalText()
		if err != nil || string(b) != name || w.String() != name {
			t.Errorf("%d: MarshalText %q %v, String %q", w, b, err, w)
		}
	}
	if _, err := Weight(9).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid weight succeeded")
	}
	if _, err := New(Config{RTTTier: -time.Millisecond}); !errors.As(err, &fe) || fe.Field != "rtt_tier_ms" ||
		err.Error() != "pulsar rtt_tier_ms must not be negative" {
		t.Fatalf("negative RTT tier: %v", err)
	}
	p := mustNew(t, Config{Seed: "s", ConsiderKVFreeTokens: true, RendezvousWeight: WeightLastMeanInputTPS, RTTTier: 3 * time.Millisecond})
	if p.String() != "pulsar" || p.Config().Seed != "s" || p.Ranker().Seed() != "s" || p.Ranker().Weight() != WeightLastMeanInputTPS ||
		p.Ranker().TierGap() != 3*time.Millisecond {
		t.Fatalf("accessors: %s %+v", p, p.Config())
	}
}

func TestWeighted(t *testing.T) {
	view := func(maxTPS, mean float64) *routing.ClusterView {
		return &routing.ClusterView{Stats: protocol.ModelStats{MaxInputTPS: maxTPS, LastMeanInputTPS: mean}}
	}
	for _, tc := range []struct {
		name   string
		c      *routing.ClusterView
		w      Weight
		want   float64
		wantOK bool
	}{
		{"default reads the peak", view(900, 100), WeightMaxInputTPS, 900, true},
		{"legacy reads the mean", view(900, 100), WeightLastMeanInputTPS, 100, true},
		{"no peak yet", view(0, 100), WeightMaxInputTPS, 0, false},
		{"no mean", view(900, 0), WeightLastMeanInputTPS, 0, false},
		{"negative", view(-1, -1), WeightMaxInputTPS, 0, false},
		{"infinite", view(math.Inf(1), math.Inf(1)), WeightLastMeanInputTPS, 0, false},
		{"NaN", view(math.NaN(), math.NaN()), WeightMaxInputTPS, 0, false},
		{"invalid mode ranks nothing", view(900, 100), Weight(5), 0, false},
	} {
		got, ok := Weighted(tc.c, tc.w)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: Weighted = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

// Golden rankings of the golden snapshot, computed once by this
// implementation (its hash is pinned to upstream Stargate's in
// TestHashPinned). They pin the whole pipeline: hash, u, e = −ln u,
// score = w/e, sort. d has no weight and is never ranked.
func TestRankGolden(t *testing.T) {
	snap := golden()
	r := NewRanker("golden", WeightMaxInputTPS)
	for _, tc := range []struct {
		key    string
		ids    []string
		scores []float64
	}{
		{"", []string{"b", "c", "e", "a"}, []float64{3392.5699032254734, 2436.8534902030733, 161.8114002150586, 33.41257259919176}},
		{"k1", []string{"e", "c", "b", "a"}, []float64{538.504592460353, 196.6985536708099, 185.691002275504, 96.03519512111386}},
		{"k2", []string{"c", "b", "e", "a"}, []float64{11202.542030175724, 2560.949045804094, 126.20452033676528, 89.00076631531422}},
	} {
		got := r.Rank(&routing.Request{AffinityKey: tc.key}, snap)
		if fmt.Sprint(ids(snap, got)) != fmt.Sprint(tc.ids) {
			t.Fatalf("key %q: ranking %v, want %v", tc.key, ids(snap, got), tc.ids)
		}
		for i, want := range tc.scores {
			if got[i].Score != want {
				t.Errorf("key %q rank %d: score %v, want %v", tc.key, i+1, got[i].Score, want)
			}
		}
	}
	// The lb-microbench fixture's first two keys, top 3 of 64.
	ms := microbenchSnapshot(64)
	rb := NewRanker(microbenchSeed, WeightMaxInputTPS)
	for key, want := range map[string]string{
		"cache-prefix-000000": "[cluster-0038 cluster-0006 cluster-0013]",
		"cache-prefix-000001": "[cluster-0002 cluster-0024 cluster-0003]",
	} {
		if got := ids(ms, rb.Rank(&routing.Request{AffinityKey: key}, ms)[:3]); fmt.Sprint(got) != want {
			t.Errorf("%s: top 3 %v, want %s", key, got, want)
		}
	}
}

// Equal scores are ordered by cluster id ascending, not by position. Giving
// each cluster the weight w = e makes every score exactly w/e = 1.
func TestRankTieByClusterID(t *testing.T) {
	snap := &routing.Snapshot{Target: goldenTarget}
	for _, id := range []string{"z", "b", "y", "a", "c"} { // deliberately not sorted
		u := (float64(hashOf("", goldenTarget, "key", id)) + 1) / unitDenominator
		snap.Clusters = append(snap.Clusters, routing.ClusterView{ClusterID: id,
			Stats: protocol.ModelStats{MaxInputTPS: -math.Log(u)}})
	}
	got := NewRanker("", WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: "key"}, snap)
	for _, r := range got {
		if r.Score != 1 {
			t.Fatalf("score %v, want exactly 1", r.Score)
		}
	}
	if s := fmt.Sprint(ids(snap, got)); s != "[a b c y z]" {
		t.Fatalf("tied ranking %s, want [a b c y z]", s)
	}
	for _, tc := range []struct {
		sa, sb float64
		a, b   string
		want   int
	}{
		{2, 1, "z", "a", -1}, {1, 2, "a", "z", 1}, {1, 1, "a", "b", -1}, {1, 1, "b", "a", 1}, {1, 1, "a", "a", 0},
		{math.Inf(1), 1e308, "z", "a", -1},
	} {
		if got := compareRanked(tc.sa, tc.a, tc.sb, tc.b); got != tc.want {
			t.Errorf("compareRanked(%v %s, %v %s) = %d, want %d", tc.sa, tc.a, tc.sb, tc.b, got, tc.want)
		}
	}
}

func TestWeightModes(t *testing.T) {
	snap := golden()
	// Legacy mode weighs every cluster by its mean (all 1000), so d ranks too.
	legacy := NewRanker("golden", WeightLastMeanInputTPS).Rank(&routing.Request{AffinityKey: "k1"}, snap)
	if len(legacy) != 5 {
		t.Fatalf("legacy ranking %v, want all five clusters", ids(snap, legacy))
	}
	// Default mode ignores the mean: zeroing the means changes nothing.
	def := NewRanker("golden", WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: "k1"}, snap)
	for i := range snap.Clusters {
		snap.Clusters[i].Stats.LastMeanInputTPS = 0
	}
	if again := NewRanker("golden", WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: "k1"}, snap); fmt.Sprint(again) != fmt.Sprint(def) {
		t.Fatalf("default ranking depends on last_mean_input_tps: %v vs %v", again, def)
	}
	if got := NewRanker("golden", WeightLastMeanInputTPS).Rank(&routing.Request{AffinityKey: "k1"}, snap); len(got) != 0 {
		t.Fatalf("legacy ranking without means: %v, want empty", got)
	}
}

// Every cluster without a valid weight is unranked; with none valid there is
// no decision, never a fallback.
func TestUnrankedClusters(t *testing.T) {
	snap := golden()
	for i, w := range []float64{0, math.NaN(), math.Inf(1), -5, 0} {
		snap.Clusters[i].Stats.MaxInputTPS = w
	}
	p := mustNew(t, Config{})
	if r := p.Ranker().Rank(&routing.Request{}, snap); len(r) != 0 {
		t.Fatalf("ranking %v, want empty", r)
	}
	if d, ok := pick(t, p, &routing.Request{}, snap); ok {
		t.Fatalf("picked %+v with no ranked cluster", d)
	}
	snap.Clusters[3].Stats.MaxInputTPS = 1
	d, ok := pick(t, p, &routing.Request{AffinityKey: "x"}, snap)
	if !ok || d.ClusterID != "d" || d.RankDepth != 1 {
		t.Fatalf("only d is weighted: %+v %v", d, ok)
	}
	for _, snap := range []*routing.Snapshot{nil, {}} {
		if _, ok := p.Pick(&routing.Request{}, snap, time.Time{}, nil); ok || len(p.Ranker().Rank(&routing.Request{}, snap)) != 0 {
			t.Fatal("empty snapshot gave a decision or a ranking")
		}
	}
}

// The golden ranking for "k1" is e, c, b, a. Each case gates some of them and
// expects the first survivor, its 1-based position and the KV flag.
func TestPickWalk(t *testing.T) {
	const tok = 1000
	for _, tc := range []struct {
		name     string
		kv       bool
		excluded []string
		setup    func(s *routing.Snapshot) // indices: a=0 b=1 c=2 d=3 e=4
		want     string
		depth    int
		kvFlag   bool
	}{
		{name: "primary", want: "e", depth: 1},
		{name: "excluded primary", excluded: []string{"e"}, want: "c", depth: 2},
		{name: "excluded top two", excluded: []string{"c", "e", "zzz"}, want: "b", depth: 3},
		{name: "KV ignored when off", setup: func(s *routing.Snapshot) { s.Clusters[4].Stats.KVCacheFreeTokens = 0 }, want: "e", depth: 1},
		{name: "KV full primary", kv: true, setup: func(s *routing.Snapshot) { s.Clusters[4].Stats.KVCacheFreeTokens = tok - 1 }, want: "c", depth: 2, kvFlag: true},
		{name: "KV exactly enough", kv: true, setup: func(s *routing.Snapshot) { s.Clusters[4].Stats.KVCacheFreeTokens = tok }, want: "e", depth: 1},
		{name: "no KV metrics counts as full", kv: true, setup: func(s *routing.Snapshot) {
			s.Clusters[4].Stats.KVCacheCapacityTokens, s.Clusters[4].Stats.KVCacheFreeTokens = 0, 0
		}, want: "c", depth: 2, kvFlag: true},
		{name: "used-only metrics are metrics", kv: true, setup: func(s *routing.Snapshot) {
			s.Clusters[4].Stats = protocol.ModelStats{MaxInputTPS: 400, KVCacheUsedTokens: 1}
		}, want: "c", depth: 2, kvFlag: true},
		{name: "excluded then KV skip", kv: true, excluded: []string{"e"}, setup: func(s *routing.Snapshot) { s.Clusters[2].Stats.KVCacheFreeTokens = 0 },
			want: "b", depth: 3, kvFlag: true},
		{name: "excluded and KV-full is an exclusion, not a KV skip", kv: true, excluded: []string{"e"},
			setup: func(s *routing.Snapshot) { s.Clusters[4].Stats.KVCacheFreeTokens = 0 }, want: "c", depth: 2},
		{name: "last resort", kv: true, excluded: []string{"e", "b"}, setup: func(s *routing.Snapshot) { s.Clusters[2].Stats.KVCacheFreeTokens = 1 },
			want: "a", depth: 4, kvFlag: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := golden()
			if tc.setup != nil {
				tc.setup(snap)
			}
			p := mustNew(t, Config{Seed: "golden", ConsiderKVFreeTokens: tc.kv})
			req := &routing.Request{AffinityKey: "k1", InputTokens: tok, Excluded: tc.excluded}
			d, ok := pick(t, p, req, snap)
			if !ok || d.ClusterID != tc.want || d.RankDepth != tc.depth || d.SelectedAfterKVFreeTokensSkip != tc.kvFlag {
				t.Fatalf("got %+v %v; want %s depth %d kv %v", d, ok, tc.want, tc.depth, tc.kvFlag)
			}
			// The scan path (uncached keys) must agree exactly.
			if s, ok := p.scan(req, snap); !ok || s != d {
				t.Fatalf("scan %+v, walk %+v", s, d)
			}
		})
	}
	// Nothing feasible: no decision, on both paths.
	snap := golden()
	p := mustNew(t, Config{Seed: "golden", ConsiderKVFreeTokens: true})
	req := &routing.Request{AffinityKey: "k1", InputTokens: 1 << 40, Excluded: []string{"a"}}
	if d, ok := pick(t, p, req, snap); ok {
		t.Fatalf("nothing has room, got %+v", d)
	}
	if d, ok := p.scan(req, snap); ok {
		t.Fatalf("scan: nothing has room, got %+v", d)
	}
}

// A request without an affinity key ranks with "", one fixed order per
// target, and the decision carries the queue estimate.
func TestNoAffinityKey(t *testing.T) {
	snap := golden()
	snap.Clusters[1].Stats.QueuedInputSize = 500 // b has 500 queued at its 1000 tps mean: 500 ms
	p := mustNew(t, Config{Seed: "golden"})
	for range 3 {
		d, ok := pick(t, p, &routing.Request{}, snap)
		if !ok || d.ClusterID != "b" || d.RankDepth != 1 || !d.QueueEstimateKnown || d.QueueEstimateMs != 500 {
			t.Fatalf("no key: %+v %v, want b (golden ranking for \"\") with a 500 ms estimate", d, ok)
		}
	}
}

func TestKVFeasible(t *testing.T) {
	for _, tc := range []struct {
		cap, used, free, tok uint64
		want                 bool
	}{
		{0, 0, 0, 0, false}, // no metrics at all
		{100, 0, 100, 100, true},
		{100, 0, 99, 100, false},
		{0, 0, 5, 5, true},
		{0, 7, 0, 0, true},
		{0, 7, 0, 1, false},
	} {
		c := &routing.ClusterView{Stats: protocol.ModelStats{KVCacheCapacityTokens: tc.cap, KVCacheUsedTokens: tc.used, KVCacheFreeTokens: tc.free}}
		if got := KVFeasible(&routing.Request{InputTokens: tc.tok}, c); got != tc.want {
			t.Errorf("%+v: KVFeasible = %v, want %v", tc, got, tc.want)
		}
	}
}

func TestAdmissionEligible(t *testing.T) {
	c := func(mean, maxTPS float64, free uint64) *routing.ClusterView {
		return &routing.ClusterView{ClusterID: "c", Stats: protocol.ModelStats{LastMeanInputTPS: mean, MaxInputTPS: maxTPS,
			KVCacheCapacityTokens: 1000, KVCacheFreeTokens: free}}
	}
	req := &routing.Request{InputTokens: 100}
	off, on := mustNew(t, Config{}), mustNew(t, Config{ConsiderKVFreeTokens: true})
	for _, tc := range []struct {
		name string
		p    *Picker
		req  *routing.Request
		c    *routing.ClusterView
		want bool
	}{
		{"eligible", off, req, c(10, 10, 0), true},
		{"excluded", off, &routing.Request{Excluded: []string{"c"}}, c(10, 10, 1000), false},
		{"no mean TPS", off, req, c(0, 10, 1000), false},
		{"mean without a peak still counts", off, req, c(10, 0, 1000), true},
		{"KV off ignores room", off, req, c(10, 10, 0), true},
		{"KV on, no room", on, req, c(10, 10, 99), false},
		{"KV on, room", on, req, c(10, 10, 100), true},
	} {
		if got := tc.p.AdmissionEligible(tc.req, tc.c); got != tc.want {
			t.Errorf("%s: AdmissionEligible = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Weighted rendezvous: over many keys, each cluster owns a share of keys
// proportional to its weight. Deterministic (fixed keys, no randomness).
func TestKeySharesFollowWeights(t *testing.T) {
	snap := &routing.Snapshot{Target: goldenTarget}
	weights := []float64{1, 2, 3, 4}
	for i, w := range weights {
		snap.Clusters = append(snap.Clusters, routing.ClusterView{ClusterID: fmt.Sprintf("c%d", i), Stats: protocol.ModelStats{MaxInputTPS: w}})
	}
	p := mustNew(t, Config{Seed: "shares"})
	const keys = 20000
	got := make([]int, len(weights))
	for i := range keys {
		d, ok := pick(t, p, &routing.Request{AffinityKey: fmt.Sprintf("key-%d", i)}, snap)
		if !ok {
			t.Fatal("no decision")
		}
		got[d.Cluster]++
	}
	for i, w := range weights {
		share := float64(got[i]) / keys
		if math.Abs(share-w/10) > 0.015 {
			t.Errorf("cluster %d: share %.4f, want %.2f ± 0.015 (counts %v)", i, share, w/10, got)
		}
	}
	// Removing a cluster moves only the keys it owned.
	smaller := &routing.Snapshot{Target: goldenTarget, Clusters: snap.Clusters[:3]}
	q := mustNew(t, Config{Seed: "shares"})
	for i := range 2000 {
		req := &routing.Request{AffinityKey: fmt.Sprintf("key-%d", i)}
		before, _ := pick(t, p, req, snap)
		after, _ := pick(t, q, req, smaller)
		if before.ClusterID != "c3" && after.ClusterID != before.ClusterID {
			t.Fatalf("key %d moved from %s to %s when c3 left", i, before.ClusterID, after.ClusterID)
		}
	}
}
