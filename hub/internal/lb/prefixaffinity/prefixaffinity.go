package prefixaffinity

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "prefix-affinity"

// Defaults of the lb-config.json fields
// (docs/load-balancing.md#prefix-affinity).
const (
	// DefaultSplitGuard is split_guard: a second copy of a prefix goes only
	// to a cluster below 80 % utilisation, so copies are made where they
	// cost no queueing and a fleet near its limit does not fill every
	// cache with every hot prefix.
	DefaultSplitGuard = 0.2
	// DefaultComparator is utilization. Among clusters that can start a
	// request at once the queue estimate is 0 (the free-slot rule), so
	// ttft and queue-time would rank them by RTT and prefill alone and
	// ignore how much work each is already running; utilisation is the
	// one signal that still tells them apart, and the one the split
	// guard reads.
	DefaultComparator = lb.ComparatorUtilization
	// DefaultPreferLastCluster is returning_prefers_last_cluster.
	DefaultPreferLastCluster = true
)

// Rank depths of the tiers: a cache or load choice is the algorithm's
// first preference (primary); a split or an overflow left the prefix's
// holders and counts as a fallback.
const (
	rankCache    = 1
	rankLoad     = 1
	rankSplit    = 2
	rankOverflow = 3
)

// Config is prefix-affinity's configuration. Start from DefaultConfig.
type Config struct {
	// Comparator ranks the candidates of a tier; lower wins.
	Comparator lb.Comparator
	// SplitGuard is split_guard in [0, 1]: a non-holder takes a new copy
	// of a prefix only while its utilisation is below 1 − SplitGuard.
	SplitGuard float64
	// LastClusterAffinity is last_cluster_affinity: classify sessions by
	// the x-stargate-last-cluster-id hint.
	LastClusterAffinity bool
	// PreferLastCluster is returning_prefers_last_cluster: a returning
	// session's last cluster counts as holding the whole known prefix and
	// is chosen whenever it has room. Off, the prefix index alone decides
	// (the session is still classified, so the two can be compared).
	PreferLastCluster bool
	// QueueOnSaturatedHolders is queue_on_saturated_holders: when every
	// holder of the prefix is saturated and no other cluster clears the
	// split guard, the request queues on the least-loaded holder (true,
	// the default) instead of overflowing to the least-loaded cluster
	// without becoming a holder there (false). With the whole fleet past
	// the guard there is no idle capacity to overflow to, and a holder's
	// cached prefix makes its queue cheaper to drain; overflowing then
	// spreads a hot prefix's requests over cold clusters and forgets them.
	QueueOnSaturatedHolders bool
	// PrefillAware is prefill_aware: the choice compares estimated times
	// to first token, each cluster's prefill backlog and the prompt blocks
	// it holds included, instead of free slots and utilisation
	// (prefillAware). A free slot says nothing of the prefill already
	// running on the engines behind it, which share one prefill rate, so
	// without it the holders of popular prompts run hot while other
	// clusters idle.
	PrefillAware bool
}

// DefaultConfig is prefix-affinity with every field at its default.
func DefaultConfig() Config {
	return Config{Comparator: DefaultComparator, SplitGuard: DefaultSplitGuard, PreferLastCluster: DefaultPreferLastCluster,
		QueueOnSaturatedHolders: true}
}

// Validate reports the first invalid field as an *lb.FieldError.
func (c Config) Validate() error {
	if !c.Comparator.Valid() {
		return &lb.FieldError{Algorithm: Name, Field: "comparator",
			Problem: fmt.Sprintf("must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued, got %v", c.Comparator)}
	}
	// NaN fails both comparisons, so it is rejected too.
	if !(c.SplitGuard >= 0 && c.SplitGuard <= 1) {
		return &lb.FieldError{Algorithm: Name, Field: "split_guard",
			Problem: fmt.Sprintf("must be between 0.0 and 1.0, got %v", c.SplitGuard)}
	}
	return nil
}

// Picker is a validated prefix-affinity load balancer. It is immutable and
// safe for concurrent use.
type Picker struct {
	cfg Config
	// splitBelow is 1 − SplitGuard: the utilisation a split candidate
	// must stay under.
	splitBelow float64
}

var _ lb.Picker = (*Picker)(nil)

// New validates cfg and returns its Picker.
func New(cfg Config) (*Picker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Picker{cfg: cfg, splitBelow: 1 - cfg.SplitGuard}, nil
}

// Config returns the picker's configuration.
func (p *Picker) Config() Config { return p.cfg }

// String returns the canonical algorithm name.
func (p *Picker) String() string { return Name }

// maxStack is how many clusters a decision tracks without a heap
// allocation (holders in the band; snapshot positions in the band set).
const maxStack = 64

// Pick implements lb.Picker with the tiers of
// docs/design/algorithms.md#prefix-affinity:
//
//  1. a returning session's last cluster, when it has room
//     (returning_prefers_last_cluster);
//  2. cache: the least loaded band member with room (the band: selectable
//     holders within one checkpoint of the longest known prefix);
//  3. split: the band is non-empty but full; the least loaded other
//     cluster whose utilisation is under the split guard;
//  4. overflow: nothing clears the guard; the least loaded selectable
//     cluster, without marking;
//  5. load: no selectable holder; the least loaded selectable cluster.
//
// It reports false only when no cluster is selectable.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	s := p.session(req, snap)
	var bbuf [maxStack]int
	band := Band(bbuf[:0], req, snap)
	if s.last >= 0 {
		if HasRoom(&snap.Clusters[s.last]) {
			return p.decide(req, snap, s.last, routing.PrefixTierCache, s), true
		}
		// The previous turn's whole prompt was served there, so it holds
		// at least what the longest known holder holds: it belongs to the
		// band, and a full last cluster sends the request to the split
		// guard rather than to the load tier.
		if indexOf(band, s.last) < 0 {
			band = append(band, s.last)
		}
	}

	if p.cfg.PrefillAware {
		return p.prefillAware(req, snap, band, s, rng)
	}
	c := p.chooser(req, snap, rng)
	if c.offerWithRoom(band) {
		return p.decide(req, snap, c.best, routing.PrefixTierCache, s), true
	}
	if len(band) > 0 && c.offerUnderGuard(band, p.splitBelow) {
		return p.decide(req, snap, c.best, routing.PrefixTierSplit, s), true
	}
	if p.cfg.QueueOnSaturatedHolders && len(band) > 0 && c.offerSelectableIn(band) {
		return p.decide(req, snap, c.best, routing.PrefixTierCache, s), true
	}
	if !c.offerSelectable() {
		return stamp(routing.Decision{}, s), false
	}
	if len(band) > 0 {
		return p.decide(req, snap, c.best, routing.PrefixTierOverflow, s), true
	}
	return p.decide(req, snap, c.best, routing.PrefixTierLoad, s), true
}

// decide builds the decision for cluster i in tier.
func (p *Picker) decide(req *routing.Request, snap *routing.Snapshot, i int, tier routing.PrefixTier, s sessionPlan) routing.Decision {
	rank := rankCache
	switch tier {
	case routing.PrefixTierSplit:
		rank = rankSplit
	case routing.PrefixTierOverflow:
		rank = rankOverflow
	case routing.PrefixTierLoad:
		rank = rankLoad
	}
	d := lb.NewDecision(snap, i, rank, req)
	// The band is not a fixed-size group: a new or stale session's choice
	// is primary exactly when it is a cache or load choice.
	d.GroupSize = 1
	d.PrefixTier = tier
	// Without a summary there is nothing the proxy could record.
	d.PrefixMark = tier != routing.PrefixTierOverflow && req.Prefix.Known()
	return stamp(d, s)
}

// HasRoom reports whether cluster v can start a request without queueing:
// fewer running requests (pending reservations included) than its engine
// concurrency. A cluster that does not report its concurrency (0) always
// has room, as in wait-and-widen's capacity rule with max_queued 0: it
// gives no signal of saturation, and refusing it would send every request
// away from its cache.
func HasRoom(v *routing.ClusterView) bool {
	mec := v.Stats.MaxEngineConcurrency
	return mec == 0 || v.Stats.NumRunningQueries < mec
}

func selectable(req *routing.Request, v *routing.ClusterView) bool {
	return len(req.Excluded) == 0 || !req.IsExcluded(v.ClusterID)
}

// reservoir keeps the best index offered so far. On an equal score the
// newcomer replaces the best with probability 1/ties, which makes every
// tied index equally likely, and the random source is read only on a tie.
type reservoir struct{ best, ties int }

// offer takes i, whose score is better than the best's (order < 0),
// equal (0) or worse (> 0), and reports whether i is now the best. The
// first index offered is taken whatever its order.
func (k *reservoir) offer(i, order int, rng *rand.Rand) bool {
	if order > 0 && k.best >= 0 {
		return false // the usual case on a wide band, kept inlinable
	}
	return k.take(i, order, rng)
}

func (k *reservoir) take(i, order int, rng *rand.Rand) bool {
	if k.best < 0 || order < 0 {
		k.best, k.ties = i, 1
		return true
	}
	k.ties++
	if rng.IntN(k.ties) == 0 {
		k.best = i
		return true
	}
	return false
}

// chooser keeps the least loaded cluster offered so far, by the picker's
// comparator; each cluster is scored once.
type chooser struct {
	reservoir
	cmp   lb.Comparator
	req   *routing.Request
	snap  *routing.Snapshot
	rng   *rand.Rand
	score lb.Score
}

func (p *Picker) chooser(req *routing.Request, snap *routing.Snapshot, rng *rand.Rand) chooser {
	return chooser{reservoir: reservoir{best: -1}, cmp: p.cfg.Comparator, req: req, snap: snap, rng: rng}
}

// offerWithRoom offers the members of band that have room (the cache
// tier) and reports whether one was.
func (c *chooser) offerWithRoom(band []int) bool {
	for _, i := range band {
		if HasRoom(&c.snap.Clusters[i]) {
			c.offer(i)
		}
	}
	return c.best >= 0
}

// offerSelectableIn offers the members of band that are selectable
// (every member of a band is) and reports whether one was.
func (c *chooser) offerSelectableIn(band []int) bool {
	for _, i := range band {
		if selectable(c.req, &c.snap.Clusters[i]) {
			c.offer(i)
		}
	}
	return c.best >= 0
}

// offerUnderGuard offers the selectable clusters outside band whose
// utilisation is below below (the split tier) and reports whether one
// was. A cluster under the guard always has room: with a known
// concurrency its utilisation is below 1, and with an unknown one it runs
// nothing.
func (c *chooser) offerUnderGuard(band []int, below float64) bool {
	var stack [bitsetWords]uint64
	inBand := newBitset(stack[:], len(c.snap.Clusters))
	for _, i := range band {
		inBand.set(i)
	}
	for i := range c.snap.Clusters {
		v := &c.snap.Clusters[i]
		if !inBand.has(i) && selectable(c.req, v) && lb.Utilization(&v.Stats) < below {
			c.offer(i)
		}
	}
	return c.best >= 0
}

// offerSelectable offers every selectable cluster (the overflow and load
// tiers) and reports whether there was one.
func (c *chooser) offerSelectable() bool {
	for i := range c.snap.Clusters {
		if selectable(c.req, &c.snap.Clusters[i]) {
			c.offer(i)
		}
	}
	return c.best >= 0
}

func (c *chooser) offer(i int) {
	s := c.cmp.Score(c.req, &c.snap.Clusters[i])
	// Before the first offer c.score is zero, and reservoir takes the
	// first whatever its order.
	if c.reservoir.offer(i, s.Compare(c.score), c.rng) {
		c.score = s
	}
}

// bitsetWords is how many stack words a decision's band set uses: 256
// clusters before it allocates.
const bitsetWords = 4

// bitset marks snapshot positions; small snapshots use the caller's stack
// words.
type bitset []uint64

func newBitset(stack []uint64, n int) bitset {
	words := (n + 63) / 64
	if words <= len(stack) {
		clear(stack[:words])
		return stack[:words]
	}
	return make(bitset, words)
}

func (b bitset) set(i int)      { b[i/64] |= 1 << (uint(i) % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(uint(i)%64)) != 0 }

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
