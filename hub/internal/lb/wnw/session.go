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
	// Class is the session classification the decision applies; the
	// picker reports it in every decision it returns after this point.
	Class Class
	// Last is the snapshot index of a returning session's last cluster
	// when it leads Order, else -1. It holds the session's KV cache, so
	// with returning_prefers_last_cluster the picker tries it alone before
	// the group competes (docs/design/algorithms.md#returning-sessions-stay-put).
	Last int
}

// Class is a request's session classification as one decision applied it:
// the state, and whether the first classification promoted the last
// cluster (for the log).
type Class struct {
	State    routing.SessionState
	Promoted bool
}

// Stamp returns d carrying the classification, so the routing pass can keep
// it for the request's later decisions (docs/design/hub-request.md#session-classification).
func (c Class) Stamp(d routing.Decision) routing.Decision {
	d.Session, d.SessionPromoted = c.State, c.Promoted
	return d
}

// ApplySession applies last_cluster_affinity to one decision
// (docs/design/algorithms.md#last-cluster-promotion). order is the caller's
// private copy of the original affinity order, never a cached slice: it is
// reordered in place.
//
// req is only read. A request that is still unclassified is classified
// here and the result is returned in Plan.Class; one an earlier decision
// classified (req.Session set by the routing pass) keeps that class, so
// timed waits and retries never reclassify it.
//
// New and stale sessions get no affinity wait and no discount; a returning
// session keeps the configured wait and discount and has its last cluster
// moved to the front of the order for this request only.
func ApplySession(enabled bool, req *routing.Request, snap *routing.Snapshot, order []int, missing Missing,
	wait time.Duration, scale float64) Plan {
	if !enabled || req.AffinityKey == "" {
		return Plan{Order: order, Wait: wait, Scale: scale, Last: -1}
	}
	last := lastIndex(req.LastClusterID, snap, order)
	class := Class{State: req.Session, Promoted: req.SessionPromoted}
	if class.State == routing.SessionUnclassified {
		class = classify(req.LastClusterID, last, order, missing)
	}
	if class.State != routing.SessionReturning {
		return Plan{Order: order, Wait: 0, Scale: 1, Class: class, Last: -1}
	}
	lead := -1
	if last >= 0 {
		order = promote(order, last, missing)
		if len(order) > 0 && order[0] == last {
			lead = last
		}
	}
	return Plan{Order: order, Wait: wait, Scale: scale, Class: class, Last: lead}
}

// lastIndex is the snapshot index of the hinted last cluster, -1 when there
// is no hint or the cluster is not a candidate. A returning session's last
// cluster is usually near the front of its order, so that is searched
// before the whole snapshot.
func lastIndex(id string, snap *routing.Snapshot, order []int) int {
	if id == "" {
		return -1
	}
	for _, i := range order {
		if snap.Clusters[i].ClusterID == id {
			return i
		}
	}
	return snap.Index(id)
}

// classify is the first classification of a request: new without a hint,
// stale when the hinted cluster is not a candidate, returning otherwise.
// Promoted is set when the last cluster will move to the front: it is not
// first already and is either in the order or inserted into a fixed-size
// group.
func classify(hint string, last int, order []int, missing Missing) Class {
	switch {
	case hint == "":
		return Class{State: routing.SessionNew}
	case last < 0:
		return Class{State: routing.SessionStale}
	}
	pos := indexOf(order, last)
	return Class{State: routing.SessionReturning,
		Promoted: pos != 0 && (pos > 0 || (missing == InsertAndTruncate && len(order) > 0))}
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
