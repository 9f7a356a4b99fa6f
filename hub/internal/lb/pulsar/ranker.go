package pulsar

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Cache bounds, upstream Stargate's RANKING_CACHE_LIMIT,
// RANKING_CACHE_PROBATION_LIMIT and MAX_CACHE_AFFINITY_CACHE_KEY_BYTES
// (docs/design/algorithms.md#pulsar). The cache never changes a result, so
// these only bound memory and cost.
const (
	// CacheLimit is how many per-key rankings one Ranker keeps.
	CacheLimit = 4096
	// ProbationLimit is how many not-yet-admitted keys one Ranker remembers
	// once its cache is full.
	ProbationLimit = 4096
	// MaxCacheableKeyLen is the longest affinity key, in bytes, whose ranking
	// is cached; longer keys are always computed afresh, so a client cannot
	// pin large keys in hub memory.
	MaxCacheableKeyLen = 256
)

// Ranked is one cluster's place in a ranking.
type Ranked struct {
	// Index is the cluster's position in the Snapshot.Clusters the ranking
	// was computed from.
	Index int
	// Score is the cluster's rendezvous score w/e; higher ranks first.
	Score float64
}

// Ranker computes pulsar rankings: for a target's clusters and one affinity
// key, the clusters with a valid weight, best first (score descending, ties
// by cluster id ascending). With RTT tiers (rtt_tier_ms) the nearer tier
// comes first and that order holds inside each tier
// (docs/design/algorithms.md#rtt-tiers). Clusters without a valid weight,
// and the rare cluster whose hash maps to a non-positive exponent, are not
// ranked at all.
//
// A Ranker caches rankings per affinity key for as long as the target and the
// ordered list of (cluster id, weight, RTT tier) stay the same; the cache
// never changes a result, and an RTT that moves within its tier keeps it.
// It relies on the state store's contract that two snapshots of a
// target with the same non-zero Version are equal: each new Version is
// compared in full once, and later snapshots with that Version are not. A
// snapshot with Version 0 (built by hand, as in tests) is compared every time. Create one Ranker per routing target (the caller's LB instances
// are per target), so keys of different targets do not evict each other. A
// Ranker is safe for concurrent use.
type Ranker struct {
	seed   string
	weight Weight
	// tierGap is rtt_tier_ms; 0 ranks without regard to RTT.
	tierGap time.Duration

	mu sync.RWMutex
	// valid, target and sig describe the inputs every cached ranking was
	// computed from; the cache is emptied whenever they change.
	valid  bool
	target routing.Target
	sig    []sigEntry
	// checked is the last Snapshot.Version found to match sig (0: none).
	// Snapshots of one target with equal versions are equal, so a hit on
	// an already checked version skips the O(n) signature comparison. It
	// is atomic because readers record it while holding only the read
	// lock; the value is always one that matches the current sig, since
	// sig changes only under the write lock.
	checked   atomic.Uint64
	rankings  fifo
	probation fifo
}

// sigEntry is one cluster's contribution to the cache signature.
type sigEntry struct {
	id   string
	bits uint64        // math.Float64bits of the weight, or noWeight
	tier int32         // the RTT tier; always 0 without tiering
	rtt  time.Duration // the RTT the tier came from; 0 without tiering
}

// noWeight stands for "no valid weight" in a signature: the bits of a NaN,
// which a valid (positive, finite) weight never has.
const noWeight = ^uint64(0)

// NewRanker returns an empty Ranker for seed and weight that ignores RTT,
// upstream Stargate's ranking. An invalid weight ranks nothing.
func NewRanker(seed string, weight Weight) *Ranker {
	return NewTieredRanker(seed, weight, 0)
}

// NewTieredRanker returns an empty Ranker that ranks nearer RTT tiers first,
// a new tier starting wherever sorted RTTs are more than tierGap apart; a
// tierGap of 0 (or less) is NewRanker's RTT-blind ranking.
func NewTieredRanker(seed string, weight Weight, tierGap time.Duration) *Ranker {
	return &Ranker{
		seed:      seed,
		weight:    weight,
		tierGap:   max(tierGap, 0),
		rankings:  newFIFO(CacheLimit),
		probation: newFIFO(ProbationLimit),
	}
}

// TierGap is the RTT gap that starts a new tier, 0 when RTT is ignored.
func (r *Ranker) TierGap() time.Duration { return r.tierGap }

// tiers returns snap's RTT tiers in buf's storage, nil without tiering.
func (r *Ranker) tiers(buf *[maxStackTiers]int32, snap *routing.Snapshot) []int32 {
	if r.tierGap <= 0 {
		return nil
	}
	return rttTiers(tierBuf(buf, snap), snap, r.weight, r.tierGap)
}

// Seed is the seed mixed into every hash.
func (r *Ranker) Seed() string { return r.seed }

// Weight is the statistic scores are proportional to.
func (r *Ranker) Weight() Weight { return r.weight }

// Rank returns snap's ranking for req.AffinityKey (the empty key when there is
// none, which gives one fixed order per target). It ignores req.Excluded and
// KV state: those gate clusters while walking a ranking, they never reorder
// it.
//
// The returned slice may be shared with other callers through the cache: it
// is read-only, and writing to it corrupts other requests' decisions. Its
// Index fields index snap.Clusters. It is empty when snap has no cluster with
// a valid weight.
func (r *Ranker) Rank(req *routing.Request, snap *routing.Snapshot) []Ranked {
	if snap == nil || len(snap.Clusters) == 0 {
		return nil
	}
	ranking, res := r.lookup(req.AffinityKey, snap)
	switch res {
	case hit:
		return ranking
	case missCacheable:
		return r.store(req.AffinityKey, snap, r.compute(req.AffinityKey, snap))
	}
	return r.compute(req.AffinityKey, snap)
}

// lookupResult is what the cache says about one key.
type lookupResult uint8

const (
	// hit: the cached ranking is valid for the snapshot.
	hit lookupResult = iota
	// missCacheable: compute the ranking and store it.
	missCacheable
	// missBypass: do not cache; Picker answers with an O(n) scan instead of
	// building the full ranking.
	missBypass
)

// lookup finds key's ranking for snap, and on a miss decides whether the key
// is worth caching. Once the cache is full a new key only goes on probation:
// one-off keys then cost an O(n) scan instead of a full ranking plus an
// eviction, and a key that misses twice within the probation window proves it
// recurs and is admitted.
func (r *Ranker) lookup(key string, snap *routing.Snapshot) ([]Ranked, lookupResult) {
	if len(key) > MaxCacheableKeyLen {
		return nil, missBypass
	}
	r.mu.RLock()
	if r.matches(snap) {
		if ranking, ok := r.rankings.get(key); ok {
			r.mu.RUnlock()
			return ranking, hit
		}
	}
	r.mu.RUnlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh(snap)
	if ranking, ok := r.rankings.get(key); ok {
		return ranking, hit // another goroutine stored it meanwhile
	}
	if !r.rankings.full() || r.probation.remove(key) {
		return nil, missCacheable
	}
	if r.probation.full() {
		r.probation.popFront()
	}
	r.probation.pushBack(strings.Clone(key), nil)
	return nil, missBypass
}

// store caches ranking, computed from snap for key, and returns the ranking
// the cache now holds for key (an equal one if another goroutine got there
// first).
func (r *Ranker) store(key string, snap *routing.Snapshot, ranking []Ranked) []Ranked {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh(snap)
	if cached, ok := r.rankings.get(key); ok {
		return cached
	}
	if r.rankings.full() {
		r.rankings.popFront()
	}
	r.probation.remove(key)
	// Clone the key: a request's header string may pin a much larger buffer.
	r.rankings.pushBack(strings.Clone(key), ranking)
	return ranking
}

// matches reports whether the cached rankings are valid for snap. The caller
// holds r.mu (read or write).
func (r *Ranker) matches(snap *routing.Snapshot) bool {
	if !r.valid || snap.Target != r.target {
		return false
	}
	if snap.Version != 0 && snap.Version == r.checked.Load() {
		return true
	}
	if len(r.sig) != len(snap.Clusters) {
		return false
	}
	rttMoved := false
	for i := range snap.Clusters {
		c := &snap.Clusters[i]
		if r.sig[i].id != c.ClusterID || r.sig[i].bits != weightBits(c, r.weight) {
			return false
		}
		rttMoved = rttMoved || (r.tierGap > 0 && r.sig[i].rtt != c.RTT)
	}
	if rttMoved {
		// Most new snapshots carry new statistics and the same RTTs (a
		// probe moves them once a second); only a moved RTT can move a
		// tier, and only then are the tiers worth sorting out.
		var buf [maxStackTiers]int32
		tiers := r.tiers(&buf, snap)
		for i := range snap.Clusters {
			if r.sig[i].tier != tiers[i] {
				return false
			}
		}
	}
	// Version 0 means a snapshot built outside the state store (tests):
	// never trust it to identify contents.
	if snap.Version != 0 {
		r.checked.Store(snap.Version)
	}
	return true
}

// refresh empties the cache unless it is valid for snap, and makes snap the
// cache's reference. The caller holds r.mu for writing.
func (r *Ranker) refresh(snap *routing.Snapshot) {
	if r.matches(snap) {
		return
	}
	r.valid = true
	r.target = snap.Target
	r.sig = r.sig[:0]
	var buf [maxStackTiers]int32
	tiers := r.tiers(&buf, snap)
	for i := range snap.Clusters {
		c := &snap.Clusters[i]
		e := sigEntry{id: c.ClusterID, bits: weightBits(c, r.weight)}
		if tiers != nil {
			e.tier, e.rtt = tiers[i], c.RTT
		}
		r.sig = append(r.sig, e)
	}
	r.checked.Store(snap.Version)
	r.rankings.reset()
	r.probation.reset()
}

// compute builds key's full ranking of snap into a new slice.
func (r *Ranker) compute(key string, snap *routing.Snapshot) []Ranked {
	var stack [stackBufSize]byte
	h := newHasher(stack[:], r.seed, snap.Target, key)
	out := make([]Ranked, 0, len(snap.Clusters))
	for i := range snap.Clusters {
		if s, ok := r.score(h, &snap.Clusters[i]); ok {
			out = append(out, Ranked{Index: i, Score: s})
		}
	}
	cl := snap.Clusters
	var buf [maxStackTiers]int32
	if tiers := r.tiers(&buf, snap); tiers != nil {
		slices.SortFunc(out, func(a, b Ranked) int {
			return compareTiered(tiers[a.Index], a.Score, cl[a.Index].ClusterID, tiers[b.Index], b.Score, cl[b.Index].ClusterID)
		})
		return out
	}
	slices.SortFunc(out, func(a, b Ranked) int {
		return compareRanked(a.Score, cl[a.Index].ClusterID, b.Score, cl[b.Index].ClusterID)
	})
	return out
}

// score is cluster c's score under h's prefix; false when c is not ranked.
func (r *Ranker) score(h hasher, c *routing.ClusterView) (float64, bool) {
	w, ok := Weighted(c, r.weight)
	if !ok {
		return 0, false
	}
	return score(w, h.hash(c.ClusterID))
}

// compareRanked orders two ranked clusters: the higher score first, then the
// smaller cluster id. Scores are positive and never NaN, so plain comparison
// agrees with the total order upstream Stargate sorts by.
func compareRanked(scoreA float64, idA string, scoreB float64, idB string) int {
	switch {
	case scoreA > scoreB:
		return -1
	case scoreA < scoreB:
		return 1
	}
	return strings.Compare(idA, idB)
}

// Weighted returns cluster c's rendezvous weight under w and whether it is
// valid (positive and finite). A cluster without a valid weight takes no part
// in pulsar: it is neither ranked nor chosen. For WeightMaxInputTPS, 0 means
// the peak is not known yet (for a shared cluster, some active backend has
// not reported one), so the cluster waits until it is.
func Weighted(c *routing.ClusterView, w Weight) (float64, bool) {
	var v float64
	switch w {
	case WeightMaxInputTPS:
		v = c.Stats.MaxInputTPS
	case WeightLastMeanInputTPS:
		v = c.Stats.LastMeanInputTPS
	default:
		return 0, false
	}
	if !lb.ValidTPS(v) {
		return 0, false
	}
	return v, true
}

// weightBits is c's signature weight: the exact bits of a valid weight, so
// any change at all invalidates the cache, or noWeight.
func weightBits(c *routing.ClusterView, w Weight) uint64 {
	if v, ok := Weighted(c, w); ok {
		return math.Float64bits(v)
	}
	return noWeight
}
