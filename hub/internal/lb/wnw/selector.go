package wnw

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Outcome is a selector's answer for one set of clusters.
type Outcome struct {
	// Cluster is the chosen index into Snapshot.Clusters, valid when
	// Selected is set.
	Cluster  int
	Selected bool
	// Wait, when positive and nothing was selected, is how long until a
	// locked bucket with capacity unlocks.
	Wait time.Duration
}

// Selector is the wait-and-widen choice over one set of clusters, the bucket
// walk of docs/design/algorithms.md#bucket-walk: TTFT buckets unlocked by
// elapsed time, then a capacity filter, then a comparison of n sampled
// members, or a wait until a locked bucket with room unlocks. Pulsar-wait-and-widen runs two of them (affinity and fallback
// capacity limits) over ranking prefixes. A Selector is immutable.
type Selector struct {
	cfg       *Config
	maxQueued uint64
}

// NewSelector returns the selector of cfg with maxQueued as its capacity
// allowance (max_queued, or fallback_max_queued for pulsar-wait-and-widen's
// open set).
func NewSelector(cfg *Config, maxQueued uint64) *Selector {
	return &Selector{cfg: cfg, maxQueued: maxQueued}
}

// HasCapacity is has_capacity(c): an unknown concurrency limit (0) always
// has room; otherwise running requests, pending reservations included, must
// stay below the limit plus the allowance.
func HasCapacity(s *routing.ClusterView, maxQueued uint64) bool {
	mec := s.Stats.MaxEngineConcurrency
	if mec == 0 {
		return true
	}
	limit := mec + maxQueued
	if limit < mec { // overflow: no practical limit
		return true
	}
	return s.Stats.NumRunningQueries < limit
}

// entry is one member of the set under evaluation.
type entry struct {
	idx    int
	bucket float64 // TTFT used to form buckets: ignore flags and scale applied
	full   float64 // full TTFT with the scale: what the ttft comparator uses
	queue  float64 // queue_ms
	id     string
}

// maxStackEntries is how many group members a picker collects in a stack
// array before it spills to the heap.
const maxStackEntries = 64

// smallEntries is the largest set Decide evaluates in a stack array.
const smallEntries = 8

// entryBuffers recycles Decide's buffers for larger sets.
var entryBuffers = sync.Pool{New: func() any { b := make([]entry, 0, 64); return &b }}

// MaxQueueMs is the queue-time limit of the request at elapsed
// (docs/design/algorithms.md#queue-slo: floor + (ceil − floor)·frac, frac the
// share of x-request-slo-ms consumed, 1 without an SLO), and false when the
// queue SLO is not configured.
func (c *Config) MaxQueueMs(req *routing.Request, elapsed time.Duration) (float64, bool) {
	if !c.QueueSLO {
		return 0, false
	}
	frac := 1.0
	if req.SLO > 0 {
		frac = min(max(float64(elapsed)/float64(req.SLO), 0), 1)
	}
	return c.QueueFloorMs + (c.QueueCeilMs-c.QueueFloorMs)*frac, true
}

func (s *Selector) estimate(req *routing.Request, v *routing.ClusterView, idx int, scale float64) entry {
	st := &v.Stats
	rtt := lb.RTTMs(v)
	queue := lb.ViewQueueMs(v, req.Priority)
	prefill := lb.DelayMs(float64(req.InputTokens)*scale, lb.InputTPS(st))
	if req.InputTokens > 0 && !lb.ValidTPS(st.LastMeanInputTPS) {
		// A zero scale must not make a nonzero prefill finite on a
		// cluster with no usable rate: the discount models cached
		// tokens, not a rate the cluster never reported.
		prefill = math.Inf(1)
	}
	e := entry{idx: idx, full: rtt + queue + prefill, queue: queue, id: v.ClusterID}
	e.bucket = rtt
	if !s.cfg.IgnoreQueueTime {
		e.bucket += queue
	}
	if !s.cfg.IgnoreInputProcessingTime {
		e.bucket += prefill
	}
	return e
}

// compare orders two entries for the final pick: lower is better.
func (s *Selector) compare(req *routing.Request, snap *routing.Snapshot, a, b *entry) int {
	if !s.cfg.UseComparator {
		// Pulsar-wait-and-widen: least queue time, then utilisation.
		if c := lb.TotalCompare(a.queue, b.queue); c != 0 {
			return c
		}
		return compareUtilisation(&snap.Clusters[a.idx].Stats.NumRunningQueries, &snap.Clusters[a.idx].Stats.MaxEngineConcurrency,
			&snap.Clusters[b.idx].Stats.NumRunningQueries, &snap.Clusters[b.idx].Stats.MaxEngineConcurrency)
	}
	switch s.cfg.Comparator {
	case lb.ComparatorTTFT:
		return lb.TotalCompare(a.full, b.full)
	case lb.ComparatorQueueTime:
		return lb.TotalCompare(a.queue, b.queue)
	}
	return s.cfg.Comparator.Compare(req, &snap.Clusters[a.idx], &snap.Clusters[b.idx])
}

// compareUtilisation compares running/mec when both limits are known, else
// the raw running counts.
func compareUtilisation(ra, ma, rb, mb *uint64) int {
	if *ma > 0 && *mb > 0 {
		return lb.TotalCompare(float64(*ra)/float64(*ma), float64(*rb)/float64(*mb))
	}
	switch {
	case *ra < *rb:
		return -1
	case *ra > *rb:
		return 1
	}
	return 0
}

// Decide chooses among the clusters of set (indices into snap.Clusters; nil
// means every cluster) for req. scale multiplies the request's input tokens
// in the prefill estimate (the affinity discount); bucketElapsed is the time
// budget that unlocks slower buckets; sloElapsed is the time since the
// request started, for the queue SLO.
func (s *Selector) Decide(req *routing.Request, snap *routing.Snapshot, set []int, scale float64,
	bucketElapsed, sloElapsed time.Duration, rng *rand.Rand) Outcome {
	cfg := s.cfg
	maxQ, slo := cfg.MaxQueueMs(req, sloElapsed)

	// a. Two members in one bucket, both with room: compare them directly.
	if len(set) == 2 && cfg.N >= 2 && !slo {
		if o, ok := s.twoMembers(req, snap, set, scale, rng); ok {
			return o
		}
	}

	// b. Estimates of the members not excluded and within the queue SLO.
	// Small sets (affinity groups, first bands) use a small stack array,
	// since Go zeroes a stack array on every call; larger ones borrow a
	// pooled buffer.
	var small [smallEntries]entry
	es := small[:0]
	if n := len(set); n > smallEntries || (set == nil && len(snap.Clusters) > smallEntries) {
		bp := entryBuffers.Get().(*[]entry)
		defer entryBuffers.Put(bp)
		es = (*bp)[:0]
	}
	if set == nil {
		for i := range snap.Clusters {
			es = s.appendEntry(es, req, snap, i, scale, slo, maxQ)
		}
	} else {
		for _, i := range set {
			es = s.appendEntry(es, req, snap, i, scale, slo, maxQ)
		}
	}

	// c. Nothing, or nothing with a finite estimate.
	if len(es) == 0 {
		return Outcome{}
	}
	lo, hi, allFinite := math.Inf(1), math.Inf(-1), true
	for i := range es {
		b := es[i].bucket
		if math.IsInf(b, 0) || math.IsNaN(b) {
			allFinite = false
			continue
		}
		lo, hi = min(lo, b), max(hi, b)
	}
	if math.IsInf(lo, 1) {
		return Outcome{}
	}

	// d–f. Unlock buckets. One bucket holds everything within B of its
	// first member; each later bucket costs gap·factor of the one shared
	// elapsed budget.
	var wait time.Duration
	locked := es[len(es):]
	if !allFinite || hi-lo > cfg.BucketMs {
		slices.SortFunc(es, func(a, b entry) int {
			if c := lb.TotalCompare(a.bucket, b.bucket); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		budget := float64(bucketElapsed) / float64(time.Millisecond)
		start := es[0].bucket
		unlocked := 0
		for i := range es {
			b := es[i].bucket
			if math.IsInf(b, 0) || math.IsNaN(b) {
				break
			}
			if gap := b - start; gap > cfg.BucketMs {
				need := gap * cfg.UnlockFactor
				if budget < need {
					wait = durationMs(need - budget)
					locked = es[i:]
					break
				}
				budget -= need
				start = b
			}
			unlocked++
		}
		es = es[:unlocked]
	}

	// g. Only members with room take part.
	n := 0
	for i := range es {
		if HasCapacity(&snap.Clusters[es[i].idx], s.maxQueued) {
			es[n] = es[i]
			n++
		}
	}
	es = es[:n]
	if len(es) == 0 {
		if wait > 0 {
			for i := range locked {
				if !math.IsInf(locked[i].bucket, 0) && HasCapacity(&snap.Clusters[locked[i].idx], s.maxQueued) {
					return Outcome{Wait: wait}
				}
			}
		}
		return Outcome{}
	}

	// h. Compare min(n, len) members drawn at random; the first of a tie
	// after the shuffle wins, so ties break uniformly.
	k := min(cfg.N, len(es))
	for i := range k {
		j := i + rng.IntN(len(es)-i)
		es[i], es[j] = es[j], es[i]
	}
	best := 0
	for i := 1; i < k; i++ {
		if s.compare(req, snap, &es[i], &es[best]) < 0 {
			best = i
		}
	}
	return Outcome{Cluster: es[best].idx, Selected: true}
}

// Admits reports whether cluster i, evaluated alone, takes req: it is not
// excluded, within the queue SLO at sloElapsed, has a finite bucket TTFT
// (prefill scaled by scale) and has room. That is what Decide over the
// one-member set {i} selects, without the draw from the random source: a
// set of one has a single bucket, so nothing is locked, and the only way
// to refuse is saturation, the same rule that sends a group of one to
// widening.
func (s *Selector) Admits(req *routing.Request, snap *routing.Snapshot, i int, scale float64, sloElapsed time.Duration) bool {
	v := &snap.Clusters[i]
	if len(req.Excluded) > 0 && req.IsExcluded(v.ClusterID) {
		return false
	}
	e := s.estimate(req, v, i, scale)
	if maxQ, slo := s.cfg.MaxQueueMs(req, sloElapsed); slo && e.queue > maxQ {
		return false
	}
	return finite(e.bucket) && HasCapacity(v, s.maxQueued)
}

// appendEntry appends cluster i's estimate unless it is excluded or over
// the queue SLO.
func (s *Selector) appendEntry(es []entry, req *routing.Request, snap *routing.Snapshot, i int, scale float64, slo bool, maxQ float64) []entry {
	v := &snap.Clusters[i]
	if len(req.Excluded) > 0 && req.IsExcluded(v.ClusterID) {
		return es
	}
	e := s.estimate(req, v, i, scale)
	if slo && e.queue > maxQ {
		return es
	}
	return append(es, e)
}

// twoMembers is the two-member shortcut
// (docs/design/algorithms.md#two-member-shortcut): both members not
// excluded, both with capacity, finite estimates within one bucket. It
// reports false when any condition fails, and the caller runs the general
// walk.
func (s *Selector) twoMembers(req *routing.Request, snap *routing.Snapshot, set []int, scale float64, rng *rand.Rand) (Outcome, bool) {
	a, b := &snap.Clusters[set[0]], &snap.Clusters[set[1]]
	if len(req.Excluded) > 0 && (req.IsExcluded(a.ClusterID) || req.IsExcluded(b.ClusterID)) {
		return Outcome{}, false
	}
	if !HasCapacity(a, s.maxQueued) || !HasCapacity(b, s.maxQueued) {
		return Outcome{}, false
	}
	ea, eb := s.estimate(req, a, set[0], scale), s.estimate(req, b, set[1], scale)
	if !finite(ea.bucket) || !finite(eb.bucket) || math.Abs(ea.bucket-eb.bucket) > s.cfg.BucketMs {
		return Outcome{}, false
	}
	switch c := s.compare(req, snap, &ea, &eb); {
	case c < 0:
		return Outcome{Cluster: ea.idx, Selected: true}, true
	case c > 0:
		return Outcome{Cluster: eb.idx, Selected: true}, true
	}
	if rng.IntN(2) == 0 {
		return Outcome{Cluster: ea.idx, Selected: true}, true
	}
	return Outcome{Cluster: eb.idx, Selected: true}, true
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

// durationMs converts positive milliseconds to a Duration, rounding up so a
// wait never ends just before the bucket unlocks; it is at least 1 ns.
func durationMs(ms float64) time.Duration {
	d := time.Duration(math.Ceil(ms * float64(time.Millisecond)))
	return max(d, 1)
}
