package lbbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Upstream's lb-microbench defaults: 64 candidates, 1024 cycling affinity
// keys, 10000 warm-up iterations, one routing key.
const (
	candidates = lbtest.Candidates
	cacheKeys  = lbtest.Keys
	warmup     = 10000
	seed       = lbtest.Seed
)

// scenario is one row of the benchmark matrix.
type scenario struct {
	name     string
	settings map[string]any // the detailed lb-config entry
	excluded int            // cluster-0000 (and cluster-0001) excluded
	hint     bool           // a last-cluster hint that promotes (pulsar-wait-and-widen only)
	prefix   bool           // every request carries a prompt summary with 64 holders
}

// wnw is upstream's wait-and-widen tuning: one bucket (B = 10^6 ms),
// n = 2, max_queued = 64, seeded.
func wnw(alg string, extra map[string]any) map[string]any {
	m := map[string]any{"algorithm": alg, "seed": seed, "ttft_bucket_size_ms": 1000000, "n": 2, "max_queued": 64}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

var (
	ignoreQueue = map[string]any{"ignore_queue_time": true}
	rttOnly     = map[string]any{"ignore_queue_time": true, "ignore_input_processing_time": true}
	affinity    = map[string]any{"cache_affinity_virtual_nodes": 150, "cache_affinity_backend_selection_count": 2}
	pulsarCfg   = map[string]any{"algorithm": "pulsar", "seed": seed, "require_cache_affinity_key": true, "require_input_tokens": true}
)

// scenarios is upstream's set, by upstream's names (kept so that results
// line up row by row), plus pulsar-wait-and-widen with and without a
// promoting last-cluster hint.
var scenarios = []scenario{
	{name: "power-of-n", settings: map[string]any{"algorithm": "power-of-n"}},
	{name: "power-of-n-sample-1", settings: map[string]any{"algorithm": "power-of-n", "sample_count": 1}},
	{name: "power-of-n-sample-4", settings: map[string]any{"algorithm": "power-of-n", "sample_count": 4}},
	{name: "power-of-n-sample-8", settings: map[string]any{"algorithm": "power-of-n", "sample_count": 8}},
	{name: "power-of-n-full-pool", settings: map[string]any{"algorithm": "power-of-n", "sample_count": candidates}},
	{name: "power-of-n-one-excluded", settings: map[string]any{"algorithm": "power-of-n"}, excluded: 1},
	{name: "wait-and-widen", settings: wnw("wait-and-widen", nil)},
	{name: "wait-and-widen-one-excluded", settings: wnw("wait-and-widen", nil), excluded: 1},
	{name: "wait-and-widen-ignore-queue", settings: wnw("wait-and-widen", ignoreQueue)},
	{name: "wait-and-widen-ignore-queue-one-excluded", settings: wnw("wait-and-widen", ignoreQueue), excluded: 1},
	{name: "wait-and-widen-ignore-queue-multi-excluded", settings: wnw("wait-and-widen", ignoreQueue), excluded: 2},
	{name: "wait-and-widen-rtt-only", settings: wnw("wait-and-widen", rttOnly)},
	{name: "wait-and-widen-rtt-only-one-excluded", settings: wnw("wait-and-widen", rttOnly), excluded: 1},
	{name: "wait-and-widen-rtt-only-multi-excluded", settings: wnw("wait-and-widen", rttOnly), excluded: 2},
	{name: "wait-and-widen-affinity", settings: wnw("wait-and-widen", affinity)},
	{name: "wait-and-widen-affinity-one-excluded", settings: wnw("wait-and-widen", affinity), excluded: 1},
	{name: "wait-and-widen-affinity-multi-excluded", settings: wnw("wait-and-widen", affinity), excluded: 2},
	{name: "pulsar", settings: pulsarCfg},
	{name: "pulsar-one-excluded", settings: pulsarCfg, excluded: 1},
	{name: "random", settings: map[string]any{"algorithm": "random"}},
	{name: "random-one-excluded", settings: map[string]any{"algorithm": "random"}, excluded: 1},
	{name: "round-robin-one-excluded", settings: map[string]any{"algorithm": "round-robin"}, excluded: 1},
	{name: "round-robin-multi-excluded", settings: map[string]any{"algorithm": "round-robin"}, excluded: 2},
	{name: "pulsar-wait-and-widen", settings: wnw("pulsar-wait-and-widen", map[string]any{"last_cluster_affinity": true})},
	{name: "pulsar-wait-and-widen-last-cluster-hint", settings: wnw("pulsar-wait-and-widen", map[string]any{"last_cluster_affinity": true}), hint: true},
	{name: "prefix-affinity", settings: map[string]any{"algorithm": "prefix-affinity"}, prefix: true},
	{name: "prefix-affinity-one-excluded", settings: map[string]any{"algorithm": "prefix-affinity"}, prefix: true, excluded: 1},
	{name: "prefix-affinity-no-summary", settings: map[string]any{"algorithm": "prefix-affinity"}},
	{name: "wait-and-widen-affinity-prefix", settings: wnw("wait-and-widen", map[string]any{
		"cache_affinity_virtual_nodes": 150, "cache_affinity_backend_selection_count": 2, "prefix_affinity": true}), prefix: true},
	{name: "pulsar-wait-and-widen-prefix", settings: wnw("pulsar-wait-and-widen", map[string]any{"last_cluster_affinity": true, "prefix_affinity": true}), prefix: true},
}

// prefixBlocks is the length of the benchmark prompts in blocks (stride 2).
const prefixBlocks = 128

// prefixHolders is the summary match of request i: all 64 clusters hold a
// prefix, cluster (i+j) mod 64 the j-th longest (128−2j blocks), so the
// band is two clusters and its place moves with the request.
func prefixHolders(n int) []routing.PrefixMatch {
	out := make([]routing.PrefixMatch, n)
	for v := range out {
		m := routing.PrefixMatch{TotalBlocks: prefixBlocks, BlockTokens: 16, Stride: 2} // 128 blocks: stride 2
		for j := range n {
			m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: fmt.Sprintf("cluster-%04d", (v+j)%n), Blocks: max(prefixBlocks-2*j, 1)})
		}
		out[v] = m
	}
	return out
}

// setup parses the scenario's lb-config and returns its resolver.
func setup(tb testing.TB, sc scenario, model string) *lbconfig.Resolver {
	tb.Helper()
	raw, err := json.Marshal(map[string]any{"default": "power-of-n", "models": map[string]any{model: sc.settings}})
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := lbconfig.Parse(raw)
	if err != nil {
		tb.Fatalf("%s: %v", sc.name, err)
	}
	r, err := lbconfig.NewResolver(cfg, lbfactory.New, lbconfig.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// run is one scenario: iterations warm-up then measured choices, request i
// shaped as upstream's benchmark shapes it (lbtest.Request). It returns the
// summed rank depth and the number of choices.
type runner struct {
	res      *lbconfig.Resolver
	snap     *routing.Snapshot
	target   routing.Target
	keys     []string
	hints    []string
	prefixes []routing.PrefixMatch
	excluded []string
	rng      *rand.Rand
	start    time.Time
	// req is reused: a Request passed to an interface method escapes, and
	// the hub's request path holds it in its per-request state anyway, so
	// allocating one per decision here would time the allocator, not the
	// load balancer.
	req routing.Request
}

func newRunner(tb testing.TB, sc scenario) *runner {
	model := "lb-bench-" + sc.name
	r := &runner{res: setup(tb, sc, model), snap: lbtest.Snapshot(model, candidates), target: routing.Target{RoutingKey: lbtest.RoutingKey, Model: model},
		rng: rand.New(rand.NewPCG(1, 2)), start: time.Now()}
	for i := range cacheKeys {
		r.keys = append(r.keys, lbtest.Key(i))
	}
	for i := range sc.excluded {
		r.excluded = append(r.excluded, fmt.Sprintf("cluster-%04d", i))
	}
	if sc.prefix {
		r.prefixes = prefixHolders(candidates)
	}
	if sc.hint {
		// The hint names each key's rank-3 cluster, so every decision
		// classifies the request as returning and promotes.
		ranker := pulsar.NewRanker(seed, pulsar.WeightMaxInputTPS)
		for _, k := range r.keys {
			ranked := ranker.Rank(&routing.Request{AffinityKey: k}, r.snap)
			r.hints = append(r.hints, r.snap.Clusters[ranked[2].Index].ClusterID)
		}
	}
	return r
}

func (r *runner) choose(i int) (routing.Decision, bool) {
	r.req = lbtest.Request(i, r.keys[i%len(r.keys)], r.excluded)
	r.req.ReceivedAt = r.start
	if r.hints != nil {
		r.req.LastClusterID = r.hints[i%len(r.hints)]
	}
	if r.prefixes != nil {
		r.req.Prefix = r.prefixes[i%len(r.prefixes)]
	}
	route, oerr := r.res.Resolve(r.target, "")
	if oerr != nil {
		panic(oerr.Message)
	}
	return route.Picker.Pick(&r.req, r.snap, time.Now(), r.rng)
}

// BenchmarkLB is the microbenchmark: one sub-benchmark per scenario,
// reporting ns per decision, allocations, and the mean rank depth.
func BenchmarkLB(b *testing.B) {
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			r := newRunner(b, sc)
			for i := range warmup {
				r.choose(i)
			}
			depth, choices := 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d, ok := r.choose(warmup + i); ok {
					depth += d.RankDepth
					choices++
				}
			}
			b.StopTimer()
			if choices != b.N {
				b.Fatalf("%d of %d iterations chose nothing", b.N-choices, b.N)
			}
			b.ReportMetric(float64(depth)/float64(choices), "rank-depth")
		})
	}
}

// TestScenarios runs every scenario briefly: each decision succeeds, never
// picks an excluded cluster, and a promoting hint lands on the hinted
// cluster.
func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := newRunner(t, sc)
			for i := range 2 * cacheKeys {
				d, ok := r.choose(i)
				if !ok {
					t.Fatalf("iteration %d chose nothing", i)
				}
				for _, ex := range r.excluded {
					if d.ClusterID == ex {
						t.Fatalf("iteration %d chose excluded %s", i, ex)
					}
				}
				if sc.hint && d.ClusterID != r.hints[i%len(r.hints)] {
					t.Fatalf("iteration %d: hint %s, chose %s", i, r.hints[i%len(r.hints)], d.ClusterID)
				}
			}
		})
	}
}
