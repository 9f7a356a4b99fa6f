package random

import (
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "random"

// probeAttempts is how many uniform probes a request with exclusions tries
// before it falls back to the exact reservoir scan; 8 is upstream
// Stargate's EXCLUSION_REJECTION_ATTEMPTS, kept so a seeded run draws alike.
const probeAttempts = 8

// probeRatioDivisor bounds when probing is worth it: only when at most 1/4 of
// the clusters are excluded, so each probe succeeds with probability ≥ 3/4
// and eight of them all fail with probability ≤ 4^-8.
const probeRatioDivisor = 4

// Picker is the random load balancer. It has no configuration and no state,
// so the zero value is ready to use and safe for concurrent use.
type Picker struct{}

var _ lb.Picker = (*Picker)(nil)

// New returns a random Picker.
func New() *Picker { return &Picker{} }

// String returns the canonical algorithm name.
func (*Picker) String() string { return Name }

// Pick implements lb.Picker: a uniform index when nothing is excluded, else a
// uniform choice among the clusters not excluded. RankDepth is always 1.
func (*Picker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	i, ok := choose(req, snap.Clusters, rng)
	if !ok {
		return routing.Decision{}, false
	}
	return lb.NewDecision(snap, i, 1, req), true
}

// choose returns the chosen index into clusters.
//
// Retries usually exclude just the cluster that failed, so a few O(1) probes
// that reject excluded clusters almost always succeed without the O(n) scan.
// Rejection sampling is uniform over the clusters it accepts, and the
// reservoir fallback is uniform too, so the combination stays uniform over
// the eligible clusters whichever path answers.
func choose(req *routing.Request, clusters []routing.ClusterView, rng *rand.Rand) (int, bool) {
	n := len(clusters)
	if len(req.Excluded) == 0 {
		return rng.IntN(n), true
	}
	if distinct(req.Excluded) <= n/probeRatioDivisor {
		for range probeAttempts {
			i := rng.IntN(n)
			if !req.IsExcluded(clusters[i].ClusterID) {
				return i, true
			}
		}
	}
	// Reservoir sampling of size one: the j-th eligible cluster replaces the
	// choice with probability 1/j, which leaves each of them chosen with
	// probability 1/eligible after one pass and no allocation.
	chosen, seen := -1, 0
	for i := range clusters {
		if req.IsExcluded(clusters[i].ClusterID) {
			continue
		}
		seen++
		if rng.IntN(seen) == 0 {
			chosen = i
		}
	}
	return chosen, chosen >= 0
}

// distinct counts the distinct ids in ids. Upstream Stargate holds
// exclusions in a set, so a repeated id must count once for the probe bound
// to match; the list is a handful of retried clusters, for which the
// quadratic scan is cheaper than any map.
func distinct(ids []string) int {
	n := 0
outer:
	for i, id := range ids {
		for _, prev := range ids[:i] {
			if prev == id {
				continue outer
			}
		}
		n++
	}
	return n
}
