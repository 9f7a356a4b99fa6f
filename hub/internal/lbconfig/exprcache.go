package lbconfig

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// outcome is the cache label of stargate_routing_expressions_total.
type outcome uint8

const (
	// outcomeHit: the expression was one of the target's two cached ones.
	outcomeHit outcome = iota
	// outcomeBuild: the target had no (live) cached expressions.
	outcomeBuild
	// outcomeRebuild: the target had cached expressions, none this one;
	// the new one replaced the older of the two.
	outcomeRebuild
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"hit", "build", "rebuild"}

// compiled is one compiled expression of one target: its definition's
// Route, holding the target's own picker instance.
type compiled struct {
	raw   string
	alg   Algorithm
	route lb.Route
}

// exprPair is a target's two most recent distinct expressions. Gateway
// replicas whose model metadata caches disagree send the old and the new
// expression alternately for a while; keeping both makes that a run of hits
// rather than a rebuild per switch. It is replaced whole, never modified,
// so readers need no lock.
type exprPair struct{ cur, prev *compiled }

type exprEntry struct {
	pair atomic.Pointer[exprPair]
	// used is the clock time (Unix ns) of the last hit or build.
	used atomic.Int64
}

// lookup compares byte for byte: equivalent spellings are different cache
// entries, which keeps a hit to two string compares.
func (e *exprEntry) lookup(raw string) *compiled {
	p := e.pair.Load()
	if p.cur.raw == raw {
		return p.cur
	}
	if p.prev != nil && p.prev.raw == raw {
		return p.prev
	}
	return nil
}

func (r *Resolver) resolveExpression(t routing.Target, raw string) (lb.Route, *Rejection) {
	now := r.clock.Now().UnixNano()
	r.exprMu.RLock()
	e := r.exprs[t]
	r.exprMu.RUnlock()
	if e != nil && now-e.used.Load() < r.idle {
		if c := e.lookup(raw); c != nil {
			e.used.Store(now)
			r.metrics.counters[c.alg][outcomeHit].Inc()
			return c.route, nil
		}
	}
	// Compile outside the lock: a miss must not stall other targets' hits.
	d, rej := r.cfg.Compile(t.Model, raw)
	if rej != nil {
		return lb.Route{}, rej
	}
	p, err := r.factory(d)
	if err != nil {
		return lb.Route{}, reject(ClassInvalidValue, "%v", err)
	}
	// Clone: raw may point into the request's header buffer.
	c := &compiled{raw: strings.Clone(raw), alg: d.alg, route: routeFor(d, p)}

	r.exprMu.Lock()
	out := outcomeBuild
	e = r.exprs[t]
	if e != nil && now-e.used.Load() >= r.idle {
		delete(r.exprs, t)
		e = nil
	}
	switch {
	case e == nil:
		if len(r.exprs) >= r.max {
			r.evictLocked(now)
		}
		e = &exprEntry{}
		e.pair.Store(&exprPair{cur: c})
		r.exprs[t] = e
	case e.lookup(raw) != nil:
		// Another request built the same expression meanwhile; use its
		// instance so the target keeps one per expression.
		c, out = e.lookup(raw), outcomeHit
	default:
		e.pair.Store(&exprPair{cur: c, prev: e.pair.Load().cur})
		out = outcomeRebuild
	}
	e.used.Store(now)
	r.exprMu.Unlock()
	r.metrics.counters[c.alg][out].Inc()
	return c.route, nil
}

// evictLocked makes room for one entry: it drops idle entries, then, if the
// cache is still full, the least recently used one. It scans every entry,
// which is fine because it runs only when a new target arrives at a full
// cache.
func (r *Resolver) evictLocked(now int64) {
	r.sweepLocked(now)
	if len(r.exprs) < r.max {
		return
	}
	var oldest routing.Target
	oldestUsed := int64(0)
	first := true
	for t, e := range r.exprs {
		if u := e.used.Load(); first || u < oldestUsed {
			oldest, oldestUsed, first = t, u, false
		}
	}
	delete(r.exprs, oldest)
}

func (r *Resolver) sweepLocked(now int64) {
	for t, e := range r.exprs {
		if now-e.used.Load() >= r.idle {
			delete(r.exprs, t)
		}
	}
}

// sweep drops idle entries and returns how many remain.
func (r *Resolver) sweep() int {
	now := r.clock.Now().UnixNano()
	r.exprMu.Lock()
	defer r.exprMu.Unlock()
	r.sweepLocked(now)
	return len(r.exprs)
}

// Metrics are a resolver's Prometheus metrics: the routing-expression
// counters and the cache-size gauge. They outlive any one resolver, so a
// hub that swaps its configuration (hub/internal/lbreload) registers them
// once and hands them to every resolver it builds: a second registration
// of the same names would fail, and the counters must keep counting across
// generations. Build them with NewMetrics.
type Metrics struct {
	counters [numAlgorithms + 1][numOutcomes]prometheus.Counter
	// active is the resolver whose cache the gauge reports (Track).
	active atomic.Pointer[Resolver]
}

// NewMetrics creates the resolver metrics named with prefix ("" means
// "stargate_") and registers them on reg; a nil reg records without
// exporting.
func NewMetrics(reg prometheus.Registerer, prefix string) (*Metrics, error) {
	if prefix == "" {
		prefix = "stargate_"
	}
	m := &Metrics{}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "routing_expressions_total",
		Help: "Accepted routing expressions with parameters, by algorithm and cache outcome (hit, build, rebuild).",
	}, []string{"algorithm", "cache"})
	// Resolving every child now keeps the request path free of label
	// lookups (and so of allocations), and exports each series at 0.
	for _, a := range algorithms {
		for o := range numOutcomes {
			m.counters[a][o] = vec.WithLabelValues(a.String(), outcomeNames[o])
		}
	}
	if reg == nil {
		return m, nil
	}
	gauge := &cacheGauge{m: m, desc: prometheus.NewDesc(prefix+"routing_expression_cache_entries",
		"Routing targets holding cached routing expressions.", nil, nil)}
	for _, c := range []prometheus.Collector{vec, gauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Track makes r the resolver whose expression cache the gauge reports: the
// one serving requests. A resolver built only to validate a configuration
// is never tracked.
func (m *Metrics) Track(r *Resolver) { m.active.Store(r) }

// cacheGauge exports the cache size. Collecting first sweeps idle entries:
// scrapes are what expire entries once expression traffic stops.
type cacheGauge struct {
	m    *Metrics
	desc *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (g *cacheGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *cacheGauge) Collect(ch chan<- prometheus.Metric) {
	n := 0
	if r := g.m.active.Load(); r != nil {
		n = r.sweep()
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n))
}
