package pwnw

import (
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/prefixaffinity"
	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/lb/wnw"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "pulsar-wait-and-widen"

// Config is pulsar-wait-and-widen's normalised configuration: the
// wait-and-widen settings (its comparator is never used) plus the pulsar
// ranking and the band widening.
type Config struct {
	wnw.Config
	// ConsiderKVFreeTokens makes clusters without room in their KV cache for
	// the request infeasible.
	ConsiderKVFreeTokens bool
	// RendezvousWeight is the ranking weight.
	RendezvousWeight pulsar.Weight
	// RTTTier is rtt_tier_ms: the ranking takes nearer RTT tiers first, as
	// pulsar's does (docs/design/algorithms.md#rtt-tiers); 0 ignores RTT.
	RTTTier time.Duration
	// BandWidenInterval is band_widen_interval_ms; BandWidenSet is false
	// when the field is unset, and the interval then follows the request's
	// effective affinity wait.
	BandWidenInterval time.Duration
	BandWidenSet      bool
	// FallbackMaxQueued is fallback_max_queued: the capacity allowance of
	// the widened open set (0: overflow needs a free engine slot).
	FallbackMaxQueued uint64
}

// DefaultConfig is pulsar-wait-and-widen with every field at its default.
func DefaultConfig() Config {
	c := Config{Config: wnw.DefaultConfig()}
	c.UseComparator = false
	return c
}

// Picker is a pulsar-wait-and-widen load balancer for one routing target.
// It is safe for concurrent use.
type Picker struct {
	cfg      Config
	ranker   *pulsar.Ranker
	affinity *wnw.Selector // max_queued, discounted prefill
	fallback *wnw.Selector // fallback_max_queued, full prefill
}

var _ lb.Picker = (*Picker)(nil)

// New validates cfg and returns its Picker.
func New(cfg Config) (*Picker, error) {
	cfg.UseComparator = false
	if err := cfg.Validate(Name); err != nil {
		return nil, err
	}
	if cfg.BandWidenInterval < 0 {
		return nil, &lb.FieldError{Algorithm: Name, Field: "band_widen_interval_ms", Problem: "must not be negative"}
	}
	if cfg.RTTTier < 0 {
		return nil, &lb.FieldError{Algorithm: Name, Field: "rtt_tier_ms", Problem: "must not be negative"}
	}
	p := &Picker{cfg: cfg, ranker: pulsar.NewTieredRanker(cfg.Seed, cfg.RendezvousWeight, cfg.RTTTier)}
	p.affinity = wnw.NewSelector(&p.cfg.Config, cfg.MaxQueued)
	p.fallback = wnw.NewSelector(&p.cfg.Config, cfg.FallbackMaxQueued)
	return p, nil
}

// String returns the canonical algorithm name.
func (p *Picker) String() string { return Name }

// Config returns the picker's configuration.
func (p *Picker) Config() Config { return p.cfg }

// maxStack is how many ranked clusters a decision handles without a heap
// allocation.
const maxStack = 64

// Pick implements lb.Picker (docs/design/algorithms.md#pulsar-wait-and-widen):
// the affinity group (the first k of the ranking, the last cluster promoted
// for a returning session, and tried alone first with
// returning_prefers_last_cluster) is tried first on every call; after the
// affinity wait the open set widens over the ranking by one band (2, 4, 8,
// …) per band interval. There is no eligible-primary shortcut: rank 1 goes through
// capacity, wait and discount like every other member.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	ranked := p.ranker.Rank(req, snap)
	if len(ranked) == 0 {
		return routing.Decision{}, false
	}
	// A private copy: the ranking may be a shared cache entry, and the
	// session rules reorder it for this request only.
	var rbuf [maxStack]int
	order := rbuf[:0]
	for _, r := range ranked {
		order = append(order, r.Index)
	}
	k := max(p.cfg.SelectionCount, 1)
	plan := wnw.ApplySession(p.cfg.LastClusterAffinity, req, snap, order, wnw.Keep,
		p.cfg.AffinityWait, p.cfg.InputTokensScale)
	order = plan.Order
	if p.cfg.PrefixAffinity && req.Prefix.Known() {
		// The prompt's holders move up behind a promoted last cluster; the
		// group is then the first k of this order, as always.
		var bbuf [maxStack]int
		lead := 0
		if plan.Last >= 0 {
			lead = 1
		}
		order = prefixaffinity.Promote(order, prefixaffinity.Band(bbuf[:0], req, snap), lead, false)
	}
	band := p.cfg.BandWidenInterval
	if !p.cfg.BandWidenSet {
		band = plan.Wait
	}
	elapsed := max(now.Sub(req.ReceivedAt), 0)

	// The affinity group, discounted, every time.
	groupEnd := min(k, len(order))
	var fbuf []int // only with consider_kv_free_tokens; allocates past 64 ranked clusters
	if p.cfg.ConsiderKVFreeTokens {
		fbuf = make([]int, 0, maxStack)
	}
	if p.preferLast(req, snap, plan, elapsed) {
		return plan.Class.Stamp(p.decision(req, snap, order, plan.Last, k)), true
	}
	o := p.affinity.Decide(req, snap, p.feasible(fbuf, req, snap, order[:groupEnd]), plan.Scale, elapsed, elapsed, rng)
	if o.Selected {
		return plan.Class.Stamp(p.decision(req, snap, order, o.Cluster, k)), true
	}
	groupWait := o.Wait
	if elapsed < plan.Wait {
		return plan.Class.Stamp(routing.Decision{Wait: minWait(groupWait, plan.Wait-elapsed)}), false
	}

	// The open set: ranks 1..k+2 at the end of the wait, 1..k+6 one band
	// interval later, and so on.
	widened := elapsed - plan.Wait
	bands := int64(-1) // every band
	if band > 0 {
		bands = int64(widened/band) + 1
	}
	openEnd, width := groupEnd, 2
	for i := int64(0); (bands < 0 || i < bands) && openEnd < len(order); i++ {
		openEnd = min(openEnd+width, len(order))
		width *= 2
	}
	var nextBand time.Duration
	if openEnd < len(order) && bands > 0 {
		nextBand = max(time.Duration(bands)*band-widened, 1)
	}
	o = p.fallback.Decide(req, snap, p.feasible(fbuf[:0], req, snap, order[:openEnd]), 1, widened, elapsed, rng)
	if o.Selected {
		return plan.Class.Stamp(p.decision(req, snap, order, o.Cluster, k)), true
	}
	return plan.Class.Stamp(routing.Decision{Wait: minWait(minWait(groupWait, o.Wait), nextBand)}), false
}

// preferLast reports whether a returning session's last cluster, which
// leads the plan's order, takes the request ahead of the rest of the group
// (returning_prefers_last_cluster): it passes the enabled KV check and, on
// its own, has room under the affinity phase's rules
// (docs/design/algorithms.md#returning-sessions-stay-put).
func (p *Picker) preferLast(req *routing.Request, snap *routing.Snapshot, plan wnw.Plan, elapsed time.Duration) bool {
	if !p.cfg.ReturningPrefersLast || plan.Last < 0 {
		return false
	}
	if p.cfg.ConsiderKVFreeTokens && !pulsar.KVFeasible(req, &snap.Clusters[plan.Last]) {
		return false
	}
	return p.affinity.Admits(req, snap, plan.Last, plan.Scale, elapsed)
}

// feasible returns the members of ranked that pass the KV check: ranked
// itself when the check is off, else a filtered copy in dst.
func (p *Picker) feasible(dst []int, req *routing.Request, snap *routing.Snapshot, ranked []int) []int {
	if !p.cfg.ConsiderKVFreeTokens {
		return ranked
	}
	for _, i := range ranked {
		if !p.cfg.ConsiderKVFreeTokens || pulsar.KVFeasible(req, &snap.Clusters[i]) {
			dst = append(dst, i)
		}
	}
	return dst
}

// decision reports cluster at its 1-based position in the (reordered)
// ranking, flagging a KV skip when a higher-ranked cluster failed the KV
// check.
func (p *Picker) decision(req *routing.Request, snap *routing.Snapshot, order []int, cluster, k int) routing.Decision {
	rank := 1
	skipped := false
	for _, i := range order {
		if i == cluster {
			break
		}
		rank++
		if p.cfg.ConsiderKVFreeTokens && !pulsar.KVFeasible(req, &snap.Clusters[i]) {
			skipped = true
		}
	}
	d := lb.NewDecision(snap, cluster, rank, req)
	d.SelectedAfterKVFreeTokensSkip = skipped
	d.GroupSize = k
	if p.cfg.PrefixAffinity {
		d = prefixaffinity.Mark(d, &req.Prefix)
	}
	return d
}

// minWait is the shorter of two waits where 0 means "no wait".
func minWait(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}
