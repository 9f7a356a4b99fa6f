package roundrobin

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "round-robin"

// Picker is a round-robin load balancer for one routing target. It is safe
// for concurrent use: concurrent decisions each take their own counter value.
type Picker struct {
	// counter counts decisions; each one takes a value with Add, so two
	// concurrent requests never get the same turn.
	counter atomic.Uint64
}

var _ lb.Picker = (*Picker)(nil)

// New returns a round-robin Picker whose first decision takes the first
// eligible cluster.
func New() *Picker { return &Picker{} }

// String returns the canonical algorithm name.
func (*Picker) String() string { return Name }

// next returns the counter's value before this call and advances it.
func (p *Picker) next() uint64 { return p.counter.Add(1) - 1 }

// Pick implements lb.Picker. RankDepth is always 1.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	clusters := snap.Clusters
	n := uint64(len(clusters))
	if len(req.Excluded) == 0 {
		return lb.NewDecision(snap, int(p.next()%n), 1, req), true
	}
	if i, ok := p.fewExcluded(req, clusters); ok {
		return lb.NewDecision(snap, i, 1, req), true
	}
	if i, ok := p.anyExcluded(req, clusters); ok {
		return lb.NewDecision(snap, i, 1, req), true
	}
	return routing.Decision{}, false
}

// fewExcluded is the O(log n) path for the common retry shapes, one or two
// excluded clusters that are all in the snapshot: take turn
// counter mod (n − excluded) among the eligible positions and map it back to a
// position in the full list by stepping over the excluded positions in order.
// It reports false, without taking a turn, when the shape does not apply.
func (p *Picker) fewExcluded(req *routing.Request, clusters []routing.ClusterView) (int, bool) {
	// Upstream Stargate holds exclusions in a set, so count repeated ids
	// once: the turn then matches upstream's for the same request.
	var ids [2]string
	k := 0
	for _, id := range req.Excluded {
		if k > 0 && ids[0] == id || k > 1 && ids[1] == id {
			continue
		}
		if k == len(ids) {
			return 0, false // three or more distinct ids
		}
		ids[k] = id
		k++
	}
	if len(clusters) <= k {
		return 0, false
	}
	var pos [2]int
	for j, id := range ids[:k] {
		i, ok := find(clusters, id)
		if !ok {
			return 0, false // an excluded id is not a candidate: count exactly instead
		}
		pos[j] = i
	}
	if k == 2 && pos[0] > pos[1] {
		pos[0], pos[1] = pos[1], pos[0]
	}
	i := int(p.next() % uint64(len(clusters)-k))
	for _, x := range pos[:k] {
		if i >= x {
			i++
		}
	}
	// Cluster ids are unique in a published snapshot; the guard only keeps a
	// malformed one (a repeated id) from yielding an excluded cluster. The
	// turn is spent, and the exact path below takes another, as upstream
	// Stargate does.
	if req.IsExcluded(clusters[i].ClusterID) {
		return 0, false
	}
	return i, true
}

// find returns the position of id in clusters by binary search, relying on
// the state store's sort by cluster id. On a snapshot that is not sorted it
// may miss an id that is there, which only sends the request down the exact
// path; a position it returns always holds id.
func find(clusters []routing.ClusterView, id string) (int, bool) {
	lo, hi := 0, len(clusters)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if clusters[m].ClusterID < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(clusters) && clusters[lo].ClusterID == id
}

// anyExcluded handles every other shape exactly: the (counter mod
// eligible)-th cluster that is not excluded.
func (p *Picker) anyExcluded(req *routing.Request, clusters []routing.ClusterView) (int, bool) {
	eligible := 0
	for i := range clusters {
		if !req.IsExcluded(clusters[i].ClusterID) {
			eligible++
		}
	}
	if eligible == 0 {
		return 0, false
	}
	turn := int(p.next() % uint64(eligible))
	for i := range clusters {
		if req.IsExcluded(clusters[i].ClusterID) {
			continue
		}
		if turn == 0 {
			return i, true
		}
		turn--
	}
	return 0, false // unreachable: turn < eligible
}
