package pulsar

import (
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Picker is the pulsar load balancer for one routing target: it walks the
// request's ranking and takes the first cluster that is not excluded and,
// with consider_kv_free_tokens, passes KVFeasible. Its ranking cache is per
// target, so the caller creates one Picker per target (and per algorithm
// definition). A Picker is safe for concurrent use.
type Picker struct {
	cfg    Config
	ranker *Ranker
}

var _ lb.Picker = (*Picker)(nil)

// New validates cfg and returns its Picker.
func New(cfg Config) (*Picker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Picker{cfg: cfg, ranker: NewTieredRanker(cfg.Seed, cfg.RendezvousWeight, cfg.RTTTier)}, nil
}

// Config returns the picker's configuration.
func (p *Picker) Config() Config { return p.cfg }

// Ranker returns the picker's ranker (and with it, its cache).
func (p *Picker) Ranker() *Ranker { return p.ranker }

// String returns the canonical algorithm name.
func (p *Picker) String() string { return Name }

// Pick implements lb.Picker. RankDepth is the chosen cluster's 1-based
// position in the key's ranking, counting the excluded and KV-skipped
// clusters above it; SelectedAfterKVFreeTokensSkip reports that some cluster
// above it was skipped for KV (an excluded one does not count). It reports
// false when no ranked cluster is eligible; pulsar never falls back to a
// cluster without a valid weight.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	key := req.AffinityKey
	ranking, res := p.ranker.lookup(key, snap)
	switch res {
	case missCacheable:
		ranking = p.ranker.store(key, snap, p.ranker.compute(key, snap))
	case missBypass:
		return p.scan(req, snap)
	}
	return p.walk(req, snap, ranking)
}

// walk takes the first feasible cluster of ranking.
func (p *Picker) walk(req *routing.Request, snap *routing.Snapshot, ranking []Ranked) (routing.Decision, bool) {
	kvSkip := false
	for pos, r := range ranking {
		c := &snap.Clusters[r.Index]
		if req.IsExcluded(c.ClusterID) {
			continue
		}
		if p.cfg.ConsiderKVFreeTokens && !KVFeasible(req, c) {
			kvSkip = true
			continue
		}
		d := lb.NewDecision(snap, r.Index, pos+1, req)
		d.SelectedAfterKVFreeTokensSkip = kvSkip
		return d, true
	}
	return routing.Decision{}, false
}

// scan is the answer for keys the cache does not hold a ranking for (too
// long, or on probation): the same decision as walk over the full ranking,
// found in O(n) without sorting the ranking or allocating. The winner is
// the best-ranked feasible cluster; only when it is not the best overall
// does a second pass count the clusters that outrank it, for the rank depth
// and the KV flag. With RTT tiers the order is (tier, score, id), so the
// tiers are computed first.
func (p *Picker) scan(req *routing.Request, snap *routing.Snapshot) (routing.Decision, bool) {
	var stack [stackBufSize]byte
	h := newHasher(stack[:], p.ranker.seed, snap.Target, req.AffinityKey)
	var tbuf [maxStackTiers]int32
	tiers := p.ranker.tiers(&tbuf, snap)
	cl := snap.Clusters
	// outranks reports whether cluster i with score s comes before cluster
	// j with score sj.
	outranks := func(i int, s float64, j int, sj float64) bool {
		if tiers != nil {
			return compareTiered(tiers[i], s, cl[i].ClusterID, tiers[j], sj, cl[j].ClusterID) < 0
		}
		return compareRanked(s, cl[i].ClusterID, sj, cl[j].ClusterID) < 0
	}
	best, feasible := -1, -1
	var bestScore, feasibleScore float64
	for i := range cl {
		s, ok := p.ranker.score(h, &cl[i])
		if !ok {
			continue
		}
		if best < 0 || outranks(i, s, best, bestScore) {
			best, bestScore = i, s
		}
		if !p.Feasible(req, &cl[i]) {
			continue
		}
		if feasible < 0 || outranks(i, s, feasible, feasibleScore) {
			feasible, feasibleScore = i, s
		}
	}
	if feasible < 0 {
		return routing.Decision{}, false
	}
	depth, kvSkip := 1, false
	if feasible != best {
		for i := range cl {
			s, ok := p.ranker.score(h, &cl[i])
			if !ok || !outranks(i, s, feasible, feasibleScore) {
				continue
			}
			depth++
			kvSkip = kvSkip || p.kvSkipped(req, &cl[i])
		}
	}
	d := lb.NewDecision(snap, feasible, depth, req)
	d.SelectedAfterKVFreeTokensSkip = kvSkip
	return d, true
}

// Feasible reports whether c may serve req under this configuration: it is
// not excluded and, with consider_kv_free_tokens, passes KVFeasible. It does
// not look at the weight; an unweighted cluster is never in a ranking.
func (p *Picker) Feasible(req *routing.Request, c *routing.ClusterView) bool {
	if req.IsExcluded(c.ClusterID) {
		return false
	}
	return !p.cfg.ConsiderKVFreeTokens || KVFeasible(req, c)
}

// kvSkipped reports whether walking past c sets the KV flag: c is not
// excluded (exclusion takes precedence) but fails the enabled KV check.
func (p *Picker) kvSkipped(req *routing.Request, c *routing.ClusterView) bool {
	return p.cfg.ConsiderKVFreeTokens && !req.IsExcluded(c.ClusterID) && !KVFeasible(req, c)
}

// AdmissionEligible reports whether c counts toward input-work admission
// (max_input_work_seconds, docs/design/hub-request.md#input-work-admission)
// for pulsar: it is Feasible and has a valid last_mean_input_tps. The
// admission rate is a sum of last-mean TPS whatever the rendezvous weight,
// so upstream Stargate filters on last-mean TPS here too, and so do we: a
// cluster with a peak but no current mean would add queued work and no rate.
func (p *Picker) AdmissionEligible(req *routing.Request, c *routing.ClusterView) bool {
	return lb.ValidTPS(c.Stats.LastMeanInputTPS) && p.Feasible(req, c)
}

// KVFeasible reports whether c has room for req's input in its KV cache: it
// reports KV metrics at all (capacity, used and free are not all 0) and at
// least req.InputTokens free tokens. A cluster that reports nothing is
// treated as full, since routing a long prompt there blind is what the option
// exists to avoid.
func KVFeasible(req *routing.Request, c *routing.ClusterView) bool {
	s := &c.Stats
	if s.KVCacheCapacityTokens == 0 && s.KVCacheUsedTokens == 0 && s.KVCacheFreeTokens == 0 {
		return false
	}
	return s.KVCacheFreeTokens >= req.InputTokens
}
