package pulsar

import (
	"cmp"
	"slices"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// maxStackTiers is how many clusters tiering handles in stack arrays; a
// larger snapshot costs one heap buffer per tier computation.
const maxStackTiers = 64

// noTier is the tier of a cluster without a valid weight: it is never
// ranked, so its tier means nothing and takes no part in forming tiers.
const noTier = -1

// rttTiers writes the RTT tier of every cluster of snap into tiers (which
// has room for len(snap.Clusters)) and returns it: the ranked clusters
// (those with a valid weight under w), sorted by RTT, start a new tier
// wherever an RTT lies more than gap above the one before it
// (docs/design/algorithms.md#rtt-tiers). Tier 0 holds the nearest
// clusters.
//
// The boundaries fall in the gaps between regions, not at fixed offsets
// from the nearest cluster, so a millisecond of jitter moves a cluster to
// another tier only when two of its neighbours' RTTs are themselves within
// a millisecond of gap apart: hub replicas that measure slightly different
// RTTs to the same regions still rank a key alike.
func rttTiers(tiers []int32, snap *routing.Snapshot, w Weight, gap time.Duration) []int32 {
	cl := snap.Clusters
	tiers = tiers[:len(cl)]
	// Sorting (RTT, index) pairs copied out of the views keeps the sort
	// within a few cache lines; a view is hundreds of bytes.
	var stack [maxStackTiers]rttIndex
	order := stack[:0]
	if len(cl) > maxStackTiers {
		order = make([]rttIndex, 0, len(cl))
	}
	for i := range cl {
		tiers[i] = noTier
		if _, ok := Weighted(&cl[i], w); ok {
			order = append(order, rttIndex{rtt: cl[i].RTT, i: int32(i)})
		}
	}
	// Ties by index keep the walk deterministic; equal RTTs share a tier
	// whatever their order.
	slices.SortFunc(order, func(a, b rttIndex) int {
		if c := cmp.Compare(a.rtt, b.rtt); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	tier := int32(0)
	for j, e := range order {
		if j > 0 && e.rtt-order[j-1].rtt > gap {
			tier++
		}
		tiers[e.i] = tier
	}
	return tiers
}

// rttIndex is a ranked cluster's RTT and its index in the snapshot.
type rttIndex struct {
	rtt time.Duration
	i   int32
}

// tierBuf returns a buffer for rttTiers of snap: stack when it fits (the
// caller passes its own array), else one heap slice.
func tierBuf(stack *[maxStackTiers]int32, snap *routing.Snapshot) []int32 {
	if len(snap.Clusters) <= maxStackTiers {
		return stack[:]
	}
	return make([]int32, len(snap.Clusters))
}

// compareTiered orders two ranked clusters with tiering on: the nearer tier
// first, then the rendezvous order inside the tier.
func compareTiered(tierA int32, scoreA float64, idA string, tierB int32, scoreB float64, idB string) int {
	if tierA != tierB {
		return cmp.Compare(tierA, tierB)
	}
	return compareRanked(scoreA, idA, scoreB, idB)
}
