package lbconfig

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
)

// stubPicker records the definition it was built for and answers with its
// own id, so a test can tell which instance served a Pick.
type stubPicker struct {
	id  int
	def *Definition
}

func (s *stubPicker) Pick(*routing.Request, *routing.Snapshot, time.Time, *rand.Rand) (routing.Decision, bool) {
	return routing.Decision{Cluster: s.id}, true
}

type fakeFactory struct {
	mu    sync.Mutex
	built []*stubPicker
	fail  func(*Definition) error
}

func (f *fakeFactory) New(d *Definition) (lb.Picker, error) {
	if f.fail != nil {
		if err := f.fail(d); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &stubPicker{id: len(f.built), def: d}
	f.built = append(f.built, p)
	return p, nil
}

func (f *fakeFactory) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.built)
}

func (f *fakeFactory) get(id int) *stubPicker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.built[id]
}

type fixture struct {
	r     *Resolver
	f     *fakeFactory
	clock *clock.Fake
	reg   *prometheus.Registry
}

func newFixture(t testing.TB, cfg *Config, opts Options) *fixture {
	t.Helper()
	fx := &fixture{f: &fakeFactory{}, clock: clock.NewFake(time.Unix(1_700_000_000, 0)), reg: prometheus.NewRegistry()}
	opts.Clock, opts.Registerer = fx.clock, fx.reg
	r, err := NewResolver(cfg, fx.f.New, opts)
	if err != nil {
		t.Fatal(err)
	}
	fx.r = r
	return fx
}

var rng = rand.New(rand.NewPCG(1, 2))

func snapFor(t routing.Target) *routing.Snapshot {
	return &routing.Snapshot{Target: t, Clusters: []routing.ClusterView{{ClusterID: "c"}}}
}

// served returns the stub instance that serves route for target t.
func (fx *fixture) served(tb testing.TB, route lb.Route, t routing.Target) *stubPicker {
	tb.Helper()
	dec, ok := route.Picker.Pick(&routing.Request{}, snapFor(t), time.Time{}, rng)
	if !ok {
		tb.Fatal("no pick")
	}
	return fx.f.get(dec.Cluster)
}

func (fx *fixture) resolve(tb testing.TB, t routing.Target, requested string) lb.Route {
	tb.Helper()
	route, oerr := fx.r.Resolve(t, requested)
	if oerr != nil {
		tb.Fatalf("Resolve(%v, %q): %v", t, requested, oerr)
	}
	return route
}

func TestNewResolverRunsEveryDefinitionThroughTheFactory(t *testing.T) {
	t.Parallel()
	cfg := Permissive()
	fx := newFixture(t, cfg, Options{})
	if n := fx.f.count(); n != len(cfg.Definitions()) {
		t.Fatalf("factory ran %d times for %d definitions", n, len(cfg.Definitions()))
	}
	boom := errors.New("boom")
	_, err := NewResolver(cfg, (&fakeFactory{fail: func(d *Definition) error {
		if d.Algorithm() == Pulsar {
			return boom
		}
		return nil
	}}).New, Options{})
	if !errors.Is(err, boom) || err.Error() != "failed to create load balancer router: pulsar: boom" {
		t.Fatalf("err = %v", err)
	}
}

// TestRouteFields checks every Route field the routing pass and the proxy
// read.
func TestRouteFields(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `{"models":{
		"pon":{"algorithm":"power-of-n","require_cache_affinity_key":true,"max_input_work_seconds":3},
		"pul":{"algorithm":"pulsar","consider_kv_free_tokens":true},
		"pul2":"pulsar",
		"ww":{"algorithm":"wait-and-widen","last_cluster_affinity":true},
		"pww":{"algorithm":"pulsar-wait-and-widen","consider_kv_free_tokens":false,"last_cluster_affinity":true},
		"pa":{"algorithm":"prefix-affinity","last_cluster_affinity":true},
		"pa0":"prefix-affinity",
		"wwp":{"algorithm":"wait-and-widen","prefix_affinity":true},
		"pwwp":{"algorithm":"pulsar-wait-and-widen","prefix_affinity":true},
		"rr":"round-robin"}}`)
	fx := newFixture(t, cfg, Options{})
	for model, want := range map[string]lb.Route{
		"pon":  {Algorithm: "power-of-n", RequireAffinityKey: true, MaxInputWorkSeconds: 3, HasInputWorkLimit: true},
		"pul":  {Algorithm: "pulsar", AdmissionNeedsWeight: true, AdmissionConsidersKV: true},
		"pul2": {Algorithm: "pulsar", AdmissionNeedsWeight: true},
		"ww":   {Algorithm: "wait-and-widen", LastClusterAffinity: true},
		"pww":  {Algorithm: "pulsar-wait-and-widen", AdmissionNeedsWeight: true, LastClusterAffinity: true},
		"pa":   {Algorithm: "prefix-affinity", LastClusterAffinity: true, UsesPrefix: true},
		"pa0":  {Algorithm: "prefix-affinity", UsesPrefix: true},
		"wwp":  {Algorithm: "wait-and-widen", UsesPrefix: true},
		"pwwp": {Algorithm: "pulsar-wait-and-widen", AdmissionNeedsWeight: true, UsesPrefix: true},
		"rr":   {Algorithm: "round-robin"},
	} {
		got := fx.resolve(t, routing.Target{Model: model}, "")
		if got.Picker == nil {
			t.Errorf("%s: nil picker", model)
		}
		got.Picker = nil
		if got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", model, got, want)
		}
	}
	// An expression's route reflects its overlay.
	got := fx.resolve(t, routing.Target{Model: "pul2"}, "pulsar;consider_kv_free_tokens=true;max_input_work_seconds=1.5")
	if !got.AdmissionConsidersKV || !got.HasInputWorkLimit || got.MaxInputWorkSeconds != 1.5 {
		t.Errorf("expression route %+v", got)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, mustParse(t, `{"request_algorithms":{"pulsar":"pulsar"}}`), Options{})
	for _, tc := range []struct{ requested, code, msg string }{
		{"fastest", ClassUnknownMethod, `unknown routing method "fastest"`},
		{"pulsar,random", ClassUnknownMethod, `unknown routing method "pulsar,random"`},
		{"random", ClassUnavailable, `routing method random is not configured for model "m"`},
		{"random;seed=x", ClassUnavailable, `routing method random is not configured for model "m"`},
		{"pulsar;n=2", ClassNotApplicable, "n is not applicable to pulsar"},
		{"pulsar;seed=?1", ClassMalformed, "P4: seed takes true or false, not ?1 or ?0"},
		{strings.Repeat("x", 100), ClassUnknownMethod, `unknown routing method "` + strings.Repeat("x", 64) + `…"`},
	} {
		_, oerr := fx.r.Resolve(routing.Target{Model: "m"}, tc.requested)
		// The proxy answers it as a 400 naming x-routing-method with the
		// class as its code (hub/internal/proxy's parse tests).
		want := &Rejection{Class: tc.code, Message: tc.msg}
		if oerr == nil || *oerr != *want {
			t.Errorf("Resolve(%q) = %+v, want %+v", tc.requested, oerr, want)
		}
	}
	if got := testutil.ToFloat64(fx.r.metrics.counters[Pulsar][outcomeBuild]); got != 0 {
		t.Errorf("rejected expressions were counted: %v", got)
	}
}

// TestPickerInstances checks that instances are per (target, definition),
// created at the first Pick, reused, and dropped by Forget.
func TestPickerInstances(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `{"default":"round-robin","request_algorithms":{"round-robin":{"algorithm":"round-robin","require_input_tokens":true},"pulsar":"pulsar"}}`)
	fx := newFixture(t, cfg, Options{})
	startup := fx.f.count()
	a, b := routing.Target{Model: "m"}, routing.Target{RoutingKey: "tenant", Model: "m"}
	ra := fx.resolve(t, a, "")
	if fx.f.count() != startup {
		t.Fatal("Resolve created an instance before any Pick")
	}
	if dec, ok := ra.Picker.Pick(&routing.Request{}, nil, time.Time{}, rng); ok || fx.f.count() != startup {
		t.Fatalf("a nil snapshot picked %v or created an instance", dec)
	}
	ia := fx.served(t, ra, a)
	if ia.def != modelDef(t, cfg, "m") {
		t.Error("instance built for the wrong definition")
	}
	if again := fx.served(t, fx.resolve(t, a, "ROUND_ROBIN"), a); again != ia {
		t.Error("the configured algorithm by name did not reuse the configured instance")
	}
	if ib := fx.served(t, fx.resolve(t, b, ""), b); ib == ia {
		t.Error("two targets share an instance")
	}
	ip := fx.served(t, fx.resolve(t, a, "pulsar"), a)
	if ip == ia || ip.def.Algorithm() != Pulsar {
		t.Error("pulsar did not get its own instance")
	}
	fx.r.Forget(a)
	if fresh := fx.served(t, ra, a); fresh == ia {
		t.Error("Forget kept the instance")
	}
	if ib2 := fx.served(t, fx.resolve(t, b, ""), b); ib2.def != ia.def {
		t.Error("other target disturbed")
	}
}

func (fx *fixture) count(alg Algorithm, o outcome) float64 {
	return testutil.ToFloat64(fx.r.metrics.counters[alg][o])
}

func (fx *fixture) entries(t *testing.T, want int) {
	t.Helper()
	exp := fmt.Sprintf(`# HELP stargate_routing_expression_cache_entries Routing targets holding cached routing expressions.
# TYPE stargate_routing_expression_cache_entries gauge
stargate_routing_expression_cache_entries %d
`, want)
	if err := testutil.GatherAndCompare(fx.reg, strings.NewReader(exp), "stargate_routing_expression_cache_entries"); err != nil {
		t.Error(err)
	}
}

// TestExpressionCache walks hits, builds, rebuilds, the two-slot window,
// idle expiry on access and on scrape, and the entry cap, asserting the
// metrics by value.
func TestExpressionCache(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, Permissive(), Options{MaxExpressionEntries: 2})
	tgt := routing.Target{Model: "m"}
	const A, B, C = "pulsar;seed=a", "pulsar;seed=b", "round-robin;require_input_tokens=true"
	ra := fx.resolve(t, tgt, A)
	ia := fx.served(t, ra, tgt)
	if ia.def.Effective().Seed != "a" {
		t.Fatal("expression definition not passed to the factory")
	}
	if fx.served(t, fx.resolve(t, tgt, A), tgt) != ia {
		t.Error("hit did not reuse the instance")
	}
	rb := fx.resolve(t, tgt, B)
	for range 3 { // alternating between the two most recent values only hits
		if fx.served(t, fx.resolve(t, tgt, A), tgt) != ia || fx.served(t, fx.resolve(t, tgt, B), tgt) != fx.served(t, rb, tgt) {
			t.Fatal("alternation rebuilt")
		}
	}
	if b, h, rb := fx.count(Pulsar, outcomeBuild), fx.count(Pulsar, outcomeHit), fx.count(Pulsar, outcomeRebuild); b != 1 || h != 7 || rb != 1 {
		t.Errorf("pulsar build/hit/rebuild = %v/%v/%v, want 1/7/1", b, h, rb)
	}
	fx.resolve(t, tgt, C) // replaces A, keeps B
	fx.resolve(t, tgt, B)
	if fx.count(RoundRobin, outcomeRebuild) != 1 || fx.count(Pulsar, outcomeHit) != 8 {
		t.Error("third value")
	}
	if fx.served(t, fx.resolve(t, tgt, A), tgt) == ia || fx.count(Pulsar, outcomeRebuild) != 2 {
		t.Error("the oldest expression was not dropped")
	}
	// Method-only values never touch the cache or the counter.
	fx.resolve(t, tgt, "pulsar")
	fx.resolve(t, tgt, "")
	if fx.count(Pulsar, outcomeHit) != 8 {
		t.Error("a method-only header was counted")
	}
	fx.entries(t, 1)

	// Idle expiry on access: 15 minutes unused makes the next use a build.
	fx.clock.Advance(15*time.Minute - time.Nanosecond)
	fx.resolve(t, tgt, A)
	if fx.count(Pulsar, outcomeHit) != 9 {
		t.Error("entry expired early")
	}
	fx.clock.Advance(15 * time.Minute)
	fx.resolve(t, tgt, A)
	if fx.count(Pulsar, outcomeBuild) != 2 {
		t.Error("idle entry was hit")
	}

	// Idle sweep on scrape.
	other := routing.Target{RoutingKey: "k", Model: "m"}
	fx.resolve(t, other, B)
	fx.entries(t, 2)
	fx.clock.Advance(15 * time.Minute)
	fx.entries(t, 0)

	// The cap: a third target evicts the least recently used one.
	t1, t2, t3 := routing.Target{Model: "1"}, routing.Target{Model: "2"}, routing.Target{Model: "3"}
	fx.resolve(t, t1, A)
	fx.clock.Advance(time.Second)
	fx.resolve(t, t2, A)
	fx.clock.Advance(time.Second)
	fx.resolve(t, t1, A) // t1 is now the most recent
	fx.clock.Advance(time.Second)
	fx.resolve(t, t3, A)
	fx.entries(t, 2)
	before := fx.count(Pulsar, outcomeHit)
	fx.resolve(t, t1, A)
	fx.resolve(t, t3, A)
	if fx.count(Pulsar, outcomeHit) != before+2 {
		t.Error("the wrong entry was evicted")
	}
	builds := fx.count(Pulsar, outcomeBuild)
	fx.resolve(t, t2, A)
	if fx.count(Pulsar, outcomeBuild) != builds+1 {
		t.Error("t2 was not evicted")
	}

	// Forget drops the target's expressions too.
	fx.r.Forget(t2)
	fx.resolve(t, t2, A)
	if fx.count(Pulsar, outcomeBuild) != builds+2 {
		t.Error("Forget kept the expression entry")
	}
}

func TestExpressionFactoryErrorIsInvalidValue(t *testing.T) {
	t.Parallel()
	f := &fakeFactory{}
	r, err := NewResolver(Permissive(), f.New, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.fail = func(d *Definition) error {
		if d.Effective().Seed == "bad" {
			return errors.New("seed rejected")
		}
		return nil
	}
	_, oerr := r.Resolve(routing.Target{Model: "m"}, "pulsar;seed=bad")
	if oerr == nil || oerr.Class != ClassInvalidValue || oerr.Message != "seed rejected" {
		t.Fatalf("%+v", oerr)
	}
}

func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, Permissive(), Options{})
	fx.resolve(t, routing.Target{Model: "m"}, "wait-and-widen;n=3")
	fx.resolve(t, routing.Target{Model: "m"}, "wait-and-widen;n=3")
	n, err := testutil.GatherAndCount(fx.reg, "stargate_routing_expressions_total")
	if err != nil || n != 21 {
		t.Errorf("series = %d, %v; want 7 algorithms × 3 outcomes", n, err)
	}
	if fx.count(WaitAndWiden, outcomeBuild) != 1 || fx.count(WaitAndWiden, outcomeHit) != 1 {
		t.Error("counts")
	}
	if err := testutil.GatherAndCompare(fx.reg, strings.NewReader(`
# HELP stargate_routing_expressions_total Accepted routing expressions with parameters, by algorithm and cache outcome (hit, build, rebuild).
# TYPE stargate_routing_expressions_total counter
stargate_routing_expressions_total{algorithm="power-of-n",cache="build"} 0
stargate_routing_expressions_total{algorithm="power-of-n",cache="hit"} 0
stargate_routing_expressions_total{algorithm="power-of-n",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="prefix-affinity",cache="build"} 0
stargate_routing_expressions_total{algorithm="prefix-affinity",cache="hit"} 0
stargate_routing_expressions_total{algorithm="prefix-affinity",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="pulsar",cache="build"} 0
stargate_routing_expressions_total{algorithm="pulsar",cache="hit"} 0
stargate_routing_expressions_total{algorithm="pulsar",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="pulsar-wait-and-widen",cache="build"} 0
stargate_routing_expressions_total{algorithm="pulsar-wait-and-widen",cache="hit"} 0
stargate_routing_expressions_total{algorithm="pulsar-wait-and-widen",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="random",cache="build"} 0
stargate_routing_expressions_total{algorithm="random",cache="hit"} 0
stargate_routing_expressions_total{algorithm="random",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="round-robin",cache="build"} 0
stargate_routing_expressions_total{algorithm="round-robin",cache="hit"} 0
stargate_routing_expressions_total{algorithm="round-robin",cache="rebuild"} 0
stargate_routing_expressions_total{algorithm="wait-and-widen",cache="build"} 1
stargate_routing_expressions_total{algorithm="wait-and-widen",cache="hit"} 1
stargate_routing_expressions_total{algorithm="wait-and-widen",cache="rebuild"} 0
`), "stargate_routing_expressions_total"); err != nil {
		t.Error(err)
	}
}

// TestConcurrentUse runs resolution, picks, expression churn, Forget and
// scrapes together; run it with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, Permissive(), Options{MaxExpressionEntries: 3})
	exprs := []string{"pulsar;seed=a", "pulsar;seed=b", "wait-and-widen;n=3", "power-of-n;sample_count=3"}
	methods := []string{"", "pulsar", "round_robin", "wait-and-widen", "random"}
	var wg sync.WaitGroup
	var picks atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			for i := range 300 {
				tgt := routing.Target{Model: fmt.Sprint(i % 5)}
				req := methods[i%len(methods)]
				if i%2 == 0 {
					req = exprs[(i/2+g)%len(exprs)]
				}
				route, oerr := fx.r.Resolve(tgt, req)
				if oerr != nil {
					t.Error(oerr)
					return
				}
				if _, ok := route.Picker.Pick(&routing.Request{}, snapFor(tgt), time.Time{}, rng); ok {
					picks.Add(1)
				}
				switch i % 50 {
				case 7:
					fx.r.Forget(tgt)
				case 11:
					_, _ = fx.reg.Gather()
				}
			}
		}()
	}
	wg.Wait()
	if picks.Load() != 8*300 {
		t.Errorf("picks = %d", picks.Load())
	}
	if n := fx.r.sweep(); n > 3 {
		t.Errorf("cache holds %d targets, cap 3", n)
	}
}

// TestResolveDoesNotAllocate pins the zero-allocation request path: no
// header, a method name, and an expression cache hit.
func TestResolveDoesNotAllocate(t *testing.T) {
	fx := newFixture(t, Permissive(), Options{})
	tgt := routing.Target{RoutingKey: "k", Model: "m"}
	const e = "wait-and-widen;n=3;seed=\"x\""
	fx.resolve(t, tgt, e)
	for _, requested := range []string{"", "power_of_two", "Pulsar-Wait-And-Widen", e} {
		if n := testing.AllocsPerRun(100, func() { _, _ = fx.r.Resolve(tgt, requested) }); n != 0 {
			t.Errorf("Resolve(%q) allocates %v times", requested, n)
		}
	}
	route := fx.resolve(t, tgt, "")
	snap := snapFor(tgt)
	req := &routing.Request{}
	route.Picker.Pick(req, snap, time.Time{}, rng)
	if n := testing.AllocsPerRun(100, func() { route.Picker.Pick(req, snap, time.Time{}, rng) }); n != 0 {
		t.Errorf("Pick through the resolver allocates %v times", n)
	}
}

func BenchmarkResolveDefault(b *testing.B) {
	fx := newFixture(b, Permissive(), Options{Clock: clock.Real{}})
	tgt := routing.Target{Model: "m"}
	b.ReportAllocs()
	for b.Loop() {
		if _, oerr := fx.r.Resolve(tgt, ""); oerr != nil {
			b.Fatal(oerr)
		}
	}
}

func BenchmarkResolveMethod(b *testing.B) {
	fx := newFixture(b, Permissive(), Options{})
	tgt := routing.Target{Model: "m"}
	b.ReportAllocs()
	for b.Loop() {
		if _, oerr := fx.r.Resolve(tgt, "pulsar_wait_and_widen"); oerr != nil {
			b.Fatal(oerr)
		}
	}
}

func BenchmarkResolveExpressionHit(b *testing.B) {
	fx := newFixture(b, Permissive(), Options{})
	tgt := routing.Target{Model: "m"}
	const e = "pulsar-wait-and-widen;cache_affinity_wait_ms=40;band_widen_interval_ms=20;seed=abc"
	fx.resolve(b, tgt, e)
	b.ReportAllocs()
	for b.Loop() {
		if _, oerr := fx.r.Resolve(tgt, e); oerr != nil {
			b.Fatal(oerr)
		}
	}
}

func BenchmarkResolveExpressionBuild(b *testing.B) {
	fx := newFixture(b, Permissive(), Options{})
	tgt := routing.Target{Model: "m"}
	exprs := [3]string{"pulsar;seed=a", "pulsar;seed=b", "pulsar;seed=c"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, oerr := fx.r.Resolve(tgt, exprs[i%3]); oerr != nil {
			b.Fatal(oerr)
		}
	}
}

// KnownMethod answers the proxy's parse-order step 4 by the header rules, for
// every algorithm and alias whatever the config, without allocating.
func TestKnownMethod(t *testing.T) {
	r, err := NewResolver(Permissive(), (&fakeFactory{}).New, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"power-of-n", " POWER_OF_TWO ", "powerOf2", "groq-multiregion", "pulsar_wait_and_widen"} {
		if !r.KnownMethod(m) {
			t.Errorf("KnownMethod(%q) = false", m)
		}
	}
	for _, m := range []string{"", "fastest", "pulsar;seed=x", "*pulsar"} {
		if r.KnownMethod(m) {
			t.Errorf("KnownMethod(%q) = true", m)
		}
	}
	if n := testing.AllocsPerRun(100, func() { r.KnownMethod("Pulsar_Wait_And_Widen") }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestSharedMetricsAcrossResolvers: a second resolver on the same registry
// (a reloaded configuration) records into the first one's counters instead
// of failing to register, and the cache gauge follows the tracked one.
func TestSharedMetricsAcrossResolvers(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFactory{}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	build := func() *Resolver {
		r, err := NewResolver(Permissive(), f.New, Options{Clock: clk, Metrics: m, Registerer: reg})
		if err != nil {
			t.Fatalf("a resolver sharing metrics: %v", err)
		}
		return r
	}
	first, second := build(), build()
	m.Track(first)
	if _, rej := first.Resolve(routing.Target{Model: "a"}, "pulsar;seed=a"); rej != nil {
		t.Fatal(rej)
	}
	if _, rej := second.Resolve(routing.Target{Model: "b"}, "pulsar;seed=b"); rej != nil {
		t.Fatal(rej)
	}
	if got := testutil.ToFloat64(m.counters[Pulsar][outcomeBuild]); got != 2 {
		t.Errorf("pulsar builds across both resolvers = %v, want 2", got)
	}
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "stargate_routing_expression_cache_entries" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no cache gauge")
		return 0
	}
	if _, rej := second.Resolve(routing.Target{Model: "c"}, "pulsar;seed=c"); rej != nil {
		t.Fatal(rej)
	}
	if got := gauge(); got != 1 {
		t.Errorf("cache entries of the tracked (first) resolver = %v, want 1", got)
	}
	m.Track(second)
	if got := gauge(); got != 2 {
		t.Errorf("cache entries after tracking the second = %v, want 2", got)
	}
}
