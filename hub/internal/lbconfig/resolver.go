package lbconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
)

// Factory builds a picker for a definition. It is called once per
// definition at startup to validate it, then once per (routing target,
// definition) the first time that target needs one; each returned picker
// holds the state (counters, caches) of one target only.
type Factory func(def *Definition) (lb.Picker, error)

// Expression cache defaults
// (docs/load-balancing.md#expression-cache-and-metrics).
const (
	DefaultExpressionIdle       = 15 * time.Minute
	DefaultMaxExpressionEntries = 16384
)

// Options configure a Resolver. The zero value is usable.
type Options struct {
	// Clock times expression-cache idleness; nil is the wall clock.
	Clock clock.Clock
	// Metrics are shared metrics (NewMetrics) the resolver records into
	// without registering anything: the way to build a second resolver on
	// the same registry. Nil: the resolver makes its own on Registerer and
	// tracks itself.
	Metrics *Metrics
	// Registerer receives the expression metrics when Metrics is nil; nil
	// records none.
	Registerer prometheus.Registerer
	// MetricsPrefix prefixes metric names; "" means "stargate_".
	MetricsPrefix string
	// Log reports a factory failure after startup; nil discards.
	Log *slog.Logger
	// ExpressionIdle drops a target's cached expressions after this long
	// unused; 0 means DefaultExpressionIdle.
	ExpressionIdle time.Duration
	// MaxExpressionEntries bounds the routing targets holding cached
	// expressions; 0 means DefaultMaxExpressionEntries.
	MaxExpressionEntries int
}

// Resolver turns a routing target and an x-routing-method value into an
// lb.Route. It is safe for concurrent use. Build it with NewResolver.
type Resolver struct {
	cfg     *Config
	factory Factory
	clock   clock.Clock
	log     *slog.Logger
	idle    int64 // nanoseconds
	max     int

	// bindings[i] serves cfg.defs[i]: its ready-made Route, whose Picker
	// finds the per-target instance.
	bindings []binding

	mu        sync.RWMutex
	instances map[routing.Target]*targetInstances

	exprMu sync.RWMutex
	exprs  map[routing.Target]*exprEntry

	metrics *Metrics
}

// Resolver is the hub's lb.Resolver; the guard keeps it so at compile time.
var _ lb.Resolver = (*Resolver)(nil)

type binding struct {
	def   *Definition
	route lb.Route
}

// targetInstances holds one target's picker per static definition, created
// on first use.
type targetInstances struct {
	slots []atomic.Pointer[pickerSlot]
}

type pickerSlot struct{ p lb.Picker }

// NewResolver validates every definition of cfg through factory and returns
// a resolver. A factory error fails startup.
func NewResolver(cfg *Config, factory Factory, opts Options) (*Resolver, error) {
	if cfg == nil || factory == nil {
		return nil, errors.New("failed to create load balancer router: config and factory are required")
	}
	r := &Resolver{
		cfg: cfg, factory: factory, clock: opts.Clock, log: opts.Log,
		idle: int64(opts.ExpressionIdle), max: opts.MaxExpressionEntries,
		instances: map[routing.Target]*targetInstances{},
		exprs:     map[routing.Target]*exprEntry{},
	}
	if r.clock == nil {
		r.clock = clock.Real{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.idle <= 0 {
		r.idle = int64(DefaultExpressionIdle)
	}
	if r.max <= 0 {
		r.max = DefaultMaxExpressionEntries
	}
	r.bindings = make([]binding, len(cfg.defs))
	for i, d := range cfg.defs {
		if _, err := factory(d); err != nil {
			return nil, fmt.Errorf("failed to create load balancer router: %s: %w", d.alg, err)
		}
		r.bindings[i] = binding{def: d, route: routeFor(d, &lazyPicker{r: r, index: i})}
	}
	r.metrics = opts.Metrics
	if r.metrics == nil {
		m, err := NewMetrics(opts.Registerer, opts.MetricsPrefix)
		if err != nil {
			return nil, err
		}
		m.Track(r)
		r.metrics = m
	}
	return r, nil
}

func routeFor(d *Definition, p lb.Picker) lb.Route {
	e := &d.eff
	return lb.Route{
		Algorithm:            d.alg.String(),
		Picker:               p,
		RequireAffinityKey:   e.RequireCacheAffinityKey,
		MaxInputWorkSeconds:  e.MaxInputWorkSeconds,
		HasInputWorkLimit:    e.HasInputWorkLimit,
		AdmissionNeedsWeight: d.alg.usesPulsarRanking(),
		AdmissionConsidersKV: d.alg.usesPulsarRanking() && e.ConsiderKVFreeTokens,
		LastClusterAffinity:  e.LastClusterAffinity,
		AffinityWait:         e.CacheAffinityWait,
		UsesPrefix:           d.alg == PrefixAffinity || (d.alg.usesWaitAndWiden() && e.PrefixAffinity),
	}
}

// Resolve implements lb.Resolver. requested is the trimmed
// x-routing-method value, "" when absent. A value without ';' is a method
// name; one with ';' is a routing expression
// (docs/load-balancing.md#routing-expressions).
// Neither an absent header nor a method name allocates.
func (r *Resolver) Resolve(t routing.Target, requested string) (lb.Route, *Rejection) {
	if strings.IndexByte(requested, ';') >= 0 {
		return r.resolveExpression(t, requested)
	}
	var alg Algorithm
	if requested != "" {
		var ok bool
		if alg, ok = ParseMethod(requested); !ok {
			return lb.Route{}, reject(ClassUnknownMethod, "unknown routing method %q", clip(requested))
		}
	}
	d, ok := r.cfg.Resolve(t.Model, alg)
	if !ok {
		return lb.Route{}, reject(ClassUnavailable, "routing method %s is not configured for model %q", alg, t.Model)
	}
	return r.bindings[d.index].route, nil
}

// KnownMethod implements lb.Resolver: whether method names an algorithm
// or alias, by ParseMethod's header rules (it does not allocate).
func (r *Resolver) KnownMethod(method string) bool {
	_, ok := ParseMethod(method)
	return ok
}

// Forget drops every picker instance and cached expression of t, so its
// round-robin counters and caches start afresh. The app calls it when the
// target's last backend goes away
// (docs/design/routing-state.md#targets-and-generations). A request already
// holding a Route keeps working with the instance it has.
func (r *Resolver) Forget(t routing.Target) {
	r.mu.Lock()
	delete(r.instances, t)
	r.mu.Unlock()
	r.exprMu.Lock()
	delete(r.exprs, t)
	r.exprMu.Unlock()
}

// clip shortens a client-supplied value echoed in an error, so a long
// header cannot inflate every 400 body and warn log.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// lazyPicker is the Picker of a static definition's Route. It finds (or
// makes) the instance of snap's target at Pick time rather than at Resolve
// time, so requests for models that have no backends (404s, typos) never
// create per-target state.
type lazyPicker struct {
	r     *Resolver
	index int
}

// Pick implements lb.Picker by delegating to the target's instance.
func (p *lazyPicker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	inst := p.r.instance(snap.Target, p.index)
	if inst == nil {
		return routing.Decision{}, false
	}
	return inst.Pick(req, snap, now, rng)
}

func (r *Resolver) instance(t routing.Target, index int) lb.Picker {
	r.mu.RLock()
	ti := r.instances[t]
	r.mu.RUnlock()
	if ti == nil {
		r.mu.Lock()
		if ti = r.instances[t]; ti == nil {
			ti = &targetInstances{slots: make([]atomic.Pointer[pickerSlot], len(r.bindings))}
			r.instances[t] = ti
		}
		r.mu.Unlock()
	}
	slot := &ti.slots[index]
	if s := slot.Load(); s != nil {
		return s.p
	}
	d := r.bindings[index].def
	p, err := r.factory(d)
	if err != nil {
		// The factory accepted d at startup; failing now is a factory bug.
		r.log.Error("failed to create load balancer", "algorithm", d.alg.String(), "model", t.Model, "error", err)
		return nil
	}
	// Two first requests may race to build; only the stored one is ever
	// used, so the target still has exactly one instance.
	if !slot.CompareAndSwap(nil, &pickerSlot{p: p}) {
		return slot.Load().p
	}
	return p
}
