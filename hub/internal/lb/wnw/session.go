package wnw

import (
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Missing says what promotion does when a returning session's last cluster
// is a candidate but not in the affinity order.
type Missing uint8

const (
	// InsertAndTruncate is for a fixed-size group (wait-and-widen's ring
	// group): the last cluster goes first and the group's last member drops,
	// so the group keeps its size.
	InsertAndTruncate Missing = iota
	// Keep is for a full ranking (pulsar-wait-and-widen) that omits the
	// cluster, e.g. for lack of a weight: the order stays as it is.
	Keep
)

// Plan is the affinity input of one decision after the session rules.
type Plan struct {
	// Order is the affinity order to use; it aliases the order passed to
	// ApplySession, reordered in place for a returning session.
	Order []int
	// Wait and Scale are the affinity wait and the prefill discount.
	Wait  time.Duration
	Scale float64
}

// ApplySession applies last_cluster_affinity (hub.md §10.3–§10.4) to one
// decision. order is the caller's private copy of the original affinity
// order, never a cached slice: it is reordered in place.
// The request is classified on its first call and the classification is
// kept in req for every later decision (timed waits and retries).
//
// New and stale sessions get no affinity wait and no discount; a returning
// session keeps the configured wait and discount and has its last cluster
// moved to the front of the order for this request only.
func ApplySession(enabled bool, req *routing.Request, snap *routing.Snapshot, order []int, missing Missing,
	wait time.Duration, scale float64) Plan {
	if !enabled || req.AffinityKey == "" {
		return Plan{Order: order, Wait: wait, Scale: scale}
	}
	last := -1
	if id := req.LastClusterID; id != "" {
		// A returning session's last cluster is usually near the front of
		// its order: look there before searching the whole snapshot.
		for _, i := range order {
			if snap.Clusters[i].ClusterID == id {
				last = i
				break
			}
		}
		if last < 0 {
			last = snap.Index(id)
		}
	}
	if req.Session == routing.SessionUnclassified {
		switch {
		case req.LastClusterID == "":
			req.Session = routing.SessionNew
		case last < 0:
			req.Session = routing.SessionStale
		default:
			req.Session = routing.SessionReturning
			pos := indexOf(order, last)
			req.SessionPromoted = pos != 0 && (pos > 0 || (missing == InsertAndTruncate && len(order) > 0))
		}
	}
	if req.Session != routing.SessionReturning {
		return Plan{Order: order, Wait: 0, Scale: 1}
	}
	if last >= 0 {
		order = promote(order, last, missing)
	}
	return Plan{Order: order, Wait: wait, Scale: scale}
}

// promote moves last to the front of order: rotating the prefix keeps every
// other member's relative order; a fixed-size group that lacks it gains it
// first and loses its last member.
func promote(order []int, last int, missing Missing) []int {
	switch pos := indexOf(order, last); {
	case pos == 0:
	case pos > 0:
		copy(order[1:pos+1], order[:pos])
		order[0] = last
	case missing == InsertAndTruncate && len(order) > 0:
		copy(order[1:], order[:len(order)-1])
		order[0] = last
	}
	return order
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
