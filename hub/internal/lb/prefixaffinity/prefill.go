package prefixaffinity

import (
	"math"
	"math/rand/v2"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// PrefillTolerance is how much slower than the best other cluster, by
// estimateMs, the best holder of a prompt may be and still be chosen
// with prefill_aware. The estimates are coarse (a cluster's aggregate,
// up to one statistics interval old, blind to which engine inside the
// cluster the request will reach), so only a clear difference moves a
// prompt's requests away from its cache. In the simulator with pinned
// pylon input rates, over the prefix suites at their default rates
// (docs/load-balancing.md#prefill_aware), 2 cached up to 3 points less of
// the ceiling than the free-slot rule on three suites and 4 as much or
// more on every suite, with the same TTFT tails as 2.
const PrefillTolerance = 4

// candidate is the best cluster offered so far to one side of the
// prefill-aware choice, by estimate; ties are broken as in reservoir.
type candidate struct {
	reservoir
	ms float64
}

func (k *candidate) offer(i int, ms float64, rng *rand.Rand) {
	order := 1 // a NaN estimate is never better nor equal
	switch {
	case ms < k.ms:
		order = -1
	case ms == k.ms:
		order = 0
	}
	if k.reservoir.offer(i, order, rng) {
		k.ms = ms
	}
}

// prefillAware is the choice with prefill_aware on. Every selectable
// cluster is estimated (estimateMs): the holders of the prompt (the band,
// and a returning session's last cluster, which counts as holding the
// longest known prefix) and every other cluster, each with the blocks
// the index knows it holds. The best holder is chosen unless it is more than PrefillTolerance
// times slower than the best other cluster, which is then chosen: a split
// when the prompt has holders (marked, past the split guard: the estimate
// already says the copy is cheaper), load when it has none. The free-slot
// rule does not enter: a cluster's backlog already says how long a request
// waits there, slot or not. It reports false only when no cluster is
// selectable.
func (p *Picker) prefillAware(req *routing.Request, snap *routing.Snapshot, band []int, s sessionPlan,
	rng *rand.Rand) (routing.Decision, bool) {
	longest := 0
	if len(band) > 0 {
		longest = req.Prefix.HeldBlocks(snap.Clusters[band[0]].ClusterID)
	}
	holder := candidate{reservoir: reservoir{best: -1}, ms: math.Inf(1)}
	other := holder
	for i := range snap.Clusters {
		v := &snap.Clusters[i]
		if !selectable(req, v) {
			continue
		}
		switch {
		case i == s.last:
			holder.offer(i, estimateMs(req, v, longest), rng)
		case indexOf(band, i) >= 0:
			holder.offer(i, estimateMs(req, v, req.Prefix.HeldBlocks(v.ClusterID)), rng)
		default:
			// A holder outside the band holds much less than the longest
			// (a shared system prompt, say): what it holds still counts.
			other.offer(i, estimateMs(req, v, req.Prefix.HeldBlocks(v.ClusterID)), rng)
		}
	}
	if holder.best >= 0 && (other.best < 0 || holder.ms <= PrefillTolerance*other.ms) {
		return p.decide(req, snap, holder.best, routing.PrefixTierCache, s), true
	}
	if other.best < 0 {
		return stamp(routing.Decision{}, s), false
	}
	tier := routing.PrefixTierSplit
	if holder.best < 0 {
		tier = routing.PrefixTierLoad
	}
	return p.decide(req, snap, other.best, tier, s), true
}

// estimateMs is the time to first token of req on v with held blocks of
// its prompt cached there: the round trip, the prefill backlog (every
// prompt token queued or in prefill on v's engines, the hub's pending
// reservations included, at v's measured rate) and the prefill of the
// prompt tokens v does not hold. Unlike the free-slot rule's queue
// estimate, the backlog counts while a slot is free, because the engines
// of a cluster share their prefill rate. A cluster whose rate is not
// known yet gets +Inf when it has a backlog or the prompt is not all
// cached there.
func estimateMs(req *routing.Request, v *routing.ClusterView, held int) float64 {
	cached := uint64(max(held, 0)) * uint64(max(req.Prefix.BlockTokens, 0)) //nolint:gosec // non-negative
	uncached := req.InputTokens - min(cached, req.InputTokens)
	tps := lb.InputTPS(&v.Stats)
	return lb.RTTMs(v) + lb.DelayMs(float64(v.Stats.QueuedInputSize), tps) + lb.DelayMs(float64(uncached), tps)
}
