package wnw

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/prefixaffinity"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "wait-and-widen"

// Defaults of the lb-config.json fields
// (docs/load-balancing.md#configuration-reference).
const (
	DefaultVirtualNodes = 150
	DefaultBucketMs     = 20
	DefaultUnlockFactor = 0.25
	DefaultN            = 2
)

// Config is wait-and-widen's normalised configuration; pulsar-wait-and-widen
// embeds the same settings. Start from DefaultConfig.
type Config struct {
	// Seed salts the ring hashes (seed, default "").
	Seed string
	// UseComparator selects Comparator for the final comparison. It is
	// false for pulsar-wait-and-widen, which compares least queue time and
	// then utilisation.
	UseComparator bool
	Comparator    lb.Comparator
	// VirtualNodes is cache_affinity_virtual_nodes (≥1).
	VirtualNodes int
	// SelectionCount is cache_affinity_backend_selection_count; 0 turns the
	// affinity group off.
	SelectionCount int
	// QueueSLO is set when both max_queue_time_floor_ms and
	// max_queue_time_ceil_ms are.
	QueueSLO                  bool
	QueueFloorMs, QueueCeilMs float64
	// BucketMs is ttft_bucket_size_ms.
	BucketMs float64
	// UnlockFactor is next_bucket_unlock_factor.
	UnlockFactor float64
	// N is how many unlocked members with room are compared (≥1).
	N int
	// MaxQueued is max_queued: how far past max_engine_concurrency a
	// cluster still counts as having room.
	MaxQueued uint64
	// IgnoreQueueTime and IgnoreInputProcessingTime drop those terms from
	// bucket formation only.
	IgnoreQueueTime           bool
	IgnoreInputProcessingTime bool
	// AffinityWait is cache_affinity_wait_ms: how long a request waits for
	// its affinity group before the whole set competes.
	AffinityWait time.Duration
	// InputTokensScale is cache_affinity_input_tokens_scale in [0,1]: the
	// prefill discount inside the affinity group.
	InputTokensScale float64
	// LastClusterAffinity turns on session classification
	// (docs/design/algorithms.md#last-cluster-promotion).
	LastClusterAffinity bool
	// ReturningPrefersLast is returning_prefers_last_cluster: a returning
	// session's last cluster is chosen before the rest of its affinity
	// group is compared, whenever it could take the request alone
	// (docs/design/algorithms.md#returning-sessions-stay-put). Off, the
	// group is compared as upstream Stargate compares it, and promotion
	// changes only its membership.
	ReturningPrefersLast bool
	// PrefixAffinity is prefix_affinity: with a prompt summary, the
	// clusters known to hold the prompt's prefix lead the affinity order
	// (after a promoted last cluster), form the group of a request that
	// has no ring group, and every choice asks the proxy to record its
	// cluster as a holder (docs/design/algorithms.md#prefix-affinity-option).
	// Off, the summary is never read.
	PrefixAffinity bool
}

// DefaultConfig is wait-and-widen with every field at its default.
func DefaultConfig() Config {
	return Config{
		UseComparator:        true,
		Comparator:           lb.ComparatorTTFT,
		VirtualNodes:         DefaultVirtualNodes,
		BucketMs:             DefaultBucketMs,
		UnlockFactor:         DefaultUnlockFactor,
		N:                    DefaultN,
		InputTokensScale:     1,
		ReturningPrefersLast: true,
	}
}

// Validate reports the first invalid field as an *lb.FieldError naming
// algorithm.
func (c *Config) Validate(algorithm string) error {
	bad := func(field, format string, args ...any) error {
		return &lb.FieldError{Algorithm: algorithm, Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.VirtualNodes < 1:
		return bad("cache_affinity_virtual_nodes", "must be at least 1, got %d", c.VirtualNodes)
	case c.SelectionCount < 0:
		return bad("cache_affinity_backend_selection_count", "must not be negative, got %d", c.SelectionCount)
	case c.N < 1:
		return bad("n", "must be at least 1, got %d", c.N)
	case !(c.BucketMs >= 0) || math.IsInf(c.BucketMs, 0):
		return bad("ttft_bucket_size_ms", "must be a finite number ≥ 0, got %v", c.BucketMs)
	case math.IsNaN(c.UnlockFactor) || math.IsInf(c.UnlockFactor, 0):
		return bad("next_bucket_unlock_factor", "must be finite, got %v", c.UnlockFactor)
	case !(c.InputTokensScale >= 0 && c.InputTokensScale <= 1):
		return bad("cache_affinity_input_tokens_scale", "must be between 0.0 and 1.0, got %v", c.InputTokensScale)
	case c.AffinityWait < 0:
		return bad("cache_affinity_wait_ms", "must not be negative")
	case c.UseComparator && !c.Comparator.Valid():
		return bad("comparator", "is not a comparator: %v", c.Comparator)
	}
	return nil
}

// Picker is a wait-and-widen load balancer for one routing target. Its ring
// and group cache are per instance, so the caller creates one per (target,
// definition). It is safe for concurrent use.
type Picker struct {
	cfg      Config
	sel      *Selector
	affinity affinity
}

var _ lb.Picker = (*Picker)(nil)

// New validates cfg and returns its Picker.
func New(cfg Config) (*Picker, error) {
	if err := cfg.Validate(Name); err != nil {
		return nil, err
	}
	p := &Picker{cfg: cfg}
	p.sel = NewSelector(&p.cfg, cfg.MaxQueued)
	p.affinity = affinity{seed: cfg.Seed, virtualNodes: cfg.VirtualNodes, k: cfg.SelectionCount}
	return p, nil
}

// Config returns the picker's configuration.
func (p *Picker) Config() Config { return p.cfg }

// String returns the canonical algorithm name.
func (p *Picker) String() string { return Name }

// Pick implements lb.Picker: the group phase (a returning session's last
// cluster first, with returning_prefers_last_cluster), the affinity wait,
// the fast path and the global phase, in the order of
// docs/design/algorithms.md#wait-and-widen; with prefix_affinity, each
// choice then carries its prefix tier and marking wish.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	d, ok := p.pick(req, snap, now, rng)
	if ok && p.cfg.PrefixAffinity {
		// With prefix_affinity every choice reports its tier and asks to be
		// recorded as a holder.
		d = prefixaffinity.Mark(d, &req.Prefix)
	}
	return d, ok
}

// pick is Pick without the prefix_affinity marking.
func (p *Picker) pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	elapsed := max(now.Sub(req.ReceivedAt), 0)
	groupSize := max(p.cfg.SelectionCount, 1)

	var groupWait time.Duration
	affinityWait := time.Duration(0)
	groupLen := 0
	var class Class // the session classification; every decision below reports it
	if p.mayHaveGroup(req) {
		// Declared inside the branch: Go zeroes a stack array where it is
		// declared, and requests without a group skip it.
		var buf [maxStackEntries]int
		if plan, ok := p.plan(buf[:0], req, snap); ok {
			affinityWait = plan.Wait
			groupLen = len(plan.Order)
			class = plan.Class
			if p.cfg.ReturningPrefersLast && plan.Last >= 0 && p.sel.Admits(req, snap, plan.Last, plan.Scale, elapsed) {
				d := lb.NewDecision(snap, plan.Last, 1, req)
				d.GroupSize = groupSize
				return class.Stamp(d), true
			}
			o := p.sel.Decide(req, snap, plan.Order, plan.Scale, elapsed, elapsed, rng)
			if o.Selected {
				d := lb.NewDecision(snap, o.Cluster, 1, req)
				d.GroupSize = groupSize
				return class.Stamp(d), true
			}
			groupWait = o.Wait
			if elapsed < affinityWait {
				return class.Stamp(routing.Decision{Wait: minWait(groupWait, affinityWait-elapsed)}), false
			}
		}
	}

	// The whole set at full prefill; with a group, bucket unlocks count from
	// the end of the affinity wait.
	global := elapsed - affinityWait
	if o, ok := p.fastPath(req, snap, rng); ok {
		d := lb.NewDecision(snap, o, groupLen+1, req)
		d.GroupSize = groupSize
		return class.Stamp(d), true
	}
	o := p.sel.Decide(req, snap, nil, 1, global, elapsed, rng)
	if o.Selected {
		rank := 1
		if groupLen > 0 {
			rank = groupLen + 1
		}
		d := lb.NewDecision(snap, o.Cluster, rank, req)
		d.GroupSize = groupSize
		return class.Stamp(d), true
	}
	return class.Stamp(routing.Decision{Wait: minWait(groupWait, o.Wait)}), false
}

// mayHaveGroup reports whether req can have an affinity group: a ring
// group (an affinity key and k > 0), or its prompt's holders
// (prefix_affinity and a summary).
func (p *Picker) mayHaveGroup(req *routing.Request) bool {
	return (req.AffinityKey != "" && p.cfg.SelectionCount > 0) || (p.cfg.PrefixAffinity && req.Prefix.Known())
}

// plan returns the affinity group of req after the session rules and the
// prefix_affinity option, in dst's backing array, and false when the
// request has no group (the global phase decides alone):
//   - with an affinity key and k > 0, the key's ring group, its last
//     cluster promoted for a returning session, then (prefix_affinity)
//     the prompt's prefix holders moved up behind it, the group keeping
//     its size k;
//   - otherwise, with prefix_affinity and a summary, the holders alone
//     (prefixaffinity.Band) form the group, with the configured wait and
//     discount: a request without a ring group still waits for the
//     clusters that hold its prompt.
func (p *Picker) plan(dst []int, req *routing.Request, snap *routing.Snapshot) (Plan, bool) {
	prefix := p.cfg.PrefixAffinity && req.Prefix.Known()
	if req.AffinityKey != "" && p.cfg.SelectionCount > 0 {
		group := p.affinity.group(dst, snap, req)
		if len(group) == 0 {
			return Plan{}, false
		}
		plan := ApplySession(p.cfg.LastClusterAffinity, req, snap, group, InsertAndTruncate,
			p.cfg.AffinityWait, p.cfg.InputTokensScale)
		if prefix {
			var bbuf [maxStackEntries]int
			lead := 0
			if plan.Last >= 0 {
				lead = 1
			}
			plan.Order = prefixaffinity.Promote(plan.Order, prefixaffinity.Band(bbuf[:0], req, snap), lead, true)
		}
		return plan, true
	}
	if prefix {
		if band := prefixaffinity.Band(dst, req, snap); len(band) > 0 {
			return Plan{Order: band, Wait: p.cfg.AffinityWait, Scale: p.cfg.InputTokensScale, Last: -1}, true
		}
	}
	return Plan{}, false
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

// fastPath is the fast path (docs/design/algorithms.md#fast-path): with
// ignore_queue_time, no queue SLO and at most two exclusions, when every
// candidate's RTT (+ prefill unless ignored) lies within one bucket, sample
// among those with room and compare with the configured comparator. It
// reports false whenever it does not apply or finds no member with room; the
// general walk then decides.
func (p *Picker) fastPath(req *routing.Request, snap *routing.Snapshot, rng *rand.Rand) (int, bool) {
	cfg := &p.cfg
	if !cfg.IgnoreQueueTime || cfg.QueueSLO || len(req.Excluded) > 2 {
		return 0, false
	}
	var stack [maxStackEntries]int
	idx := stack[:0]
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range snap.Clusters {
		v := &snap.Clusters[i]
		if len(req.Excluded) > 0 && req.IsExcluded(v.ClusterID) {
			continue
		}
		t := lb.RTTMs(v)
		if !cfg.IgnoreInputProcessingTime {
			t += lb.PrefillMs(&v.Stats, req.InputTokens)
		}
		if !finite(t) {
			return 0, false
		}
		lo, hi = min(lo, t), max(hi, t)
		if HasCapacity(v, cfg.MaxQueued) {
			idx = append(idx, i)
		}
	}
	if hi-lo > cfg.BucketMs || len(idx) == 0 {
		return 0, false
	}
	cmp := func(a, b int) int {
		if !cfg.UseComparator {
			return p.sel.compare(req, snap, ptr(p.sel.estimate(req, &snap.Clusters[a], a, 1)), ptr(p.sel.estimate(req, &snap.Clusters[b], b, 1)))
		}
		return cfg.Comparator.Compare(req, &snap.Clusters[a], &snap.Clusters[b])
	}
	switch {
	case cfg.N == 1 || len(idx) == 1:
		return idx[rng.IntN(len(idx))], true
	case cfg.N == 2:
		a := rng.IntN(len(idx))
		b := rng.IntN(len(idx) - 1)
		if b >= a {
			b++
		}
		switch c := cmp(idx[a], idx[b]); {
		case c < 0:
			return idx[a], true
		case c > 0:
			return idx[b], true
		}
		if rng.IntN(2) == 0 {
			return idx[a], true
		}
		return idx[b], true
	}
	k := min(cfg.N, len(idx))
	for i := range k {
		j := i + rng.IntN(len(idx)-i)
		idx[i], idx[j] = idx[j], idx[i]
	}
	best := idx[0]
	for _, i := range idx[1:k] {
		if cmp(i, best) < 0 {
			best = i
		}
	}
	return best, true
}

func ptr(e entry) *entry { return &e }
