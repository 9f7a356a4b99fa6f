package dispatch

import "github.com/stargate-router/stargate/hub/internal/routing"

// Selection classes, the values of the selection label of
// stargate_routing_selections_total and
// stargate_routing_session_selections_total.
const (
	SelectionPrimary  = "primary"
	SelectionFallback = "fallback"
)

// rankSelection classes a choice by its rank: rank 1 (or an algorithm that
// does not rank, 0) is primary, anything deeper is a fallback.
func rankSelection(rankDepth int) string {
	if rankDepth <= 1 {
		return SelectionPrimary
	}
	return SelectionFallback
}

// sessionSelection classes a classified request's choice
// (docs/design/hub-request.md#session-classification): a returning
// session's choice is primary when it went back to its last cluster, a new
// or stale one's when it came from the affinity group.
func sessionSelection(req *routing.Request, dec *routing.Decision) string {
	if req.Session == routing.SessionReturning {
		if dec.ClusterID == req.LastClusterID {
			return SelectionPrimary
		}
		return SelectionFallback
	}
	if dec.RankDepth <= max(dec.GroupSize, 1) {
		return SelectionPrimary
	}
	return SelectionFallback
}

// keepSession stores the first session classification a decision reports
// in the request, where every later decision of the request reads it: the
// classification is set once, so timed waits and retries never reclassify.
func (p *Pass) keepSession(dec *routing.Decision) {
	if p.Req.Session == routing.SessionUnclassified && dec.Session != routing.SessionUnclassified {
		p.Req.Session, p.Req.SessionPromoted = dec.Session, dec.SessionPromoted
	}
}

// Escape reasons, the values of stargate_session_escapes_total's reason
// label (docs/metrics.md#hub): why a classified request was answered by a
// cluster other than its session's own, its last cluster for a returning
// or stale session, its affinity group for a new one.
const (
	// EscapeNewNotWaiting: a new session (no last-cluster hint) placed
	// outside its affinity group; new sessions take no affinity wait.
	EscapeNewNotWaiting = "new_not_waiting"
	// EscapeGroupSaturated: a returning session placed away from its last
	// cluster, which was still a candidate: the load balancer found no
	// room there (or in its group) within the affinity wait.
	EscapeGroupSaturated = "group_saturated"
	// EscapeClusterLost: the session's last cluster is not an eligible
	// candidate: gone from the snapshot (a stale hint, or it left during
	// the request) or excluded for its backends' breakers.
	EscapeClusterLost = "cluster_lost"
	// EscapeRetry: an attempt on the session's own cluster failed in this
	// request and the retry ended elsewhere.
	EscapeRetry = "retry"
)

// EscapeReasons are the escape reasons, for metrics that create every
// series up front.
var EscapeReasons = [...]string{EscapeNewNotWaiting, EscapeGroupSaturated, EscapeClusterLost, EscapeRetry}

// escape classes a classified request's choice by the session rules: ""
// when it stays on the session's own cluster, else the reason it leaves.
// selection is the choice's session selection.
func escape(req *routing.Request, dec *routing.Decision, snap *routing.Snapshot, selection string) string {
	switch req.Session {
	case routing.SessionStale:
		return EscapeClusterLost
	case routing.SessionReturning:
		switch {
		case dec.ClusterID == req.LastClusterID:
			return ""
		case !eligible(snap, req, req.LastClusterID):
			return EscapeClusterLost
		}
		return EscapeGroupSaturated
	case routing.SessionNew:
		if selection == SelectionFallback {
			return EscapeNewNotWaiting
		}
	}
	return ""
}

// eligible reports whether cluster id is in snap and not excluded by req.
func eligible(snap *routing.Snapshot, req *routing.Request, id string) bool {
	if req.IsExcluded(id) {
		return false
	}
	for i := range snap.Clusters {
		if snap.Clusters[i].ClusterID == id {
			return true
		}
	}
	return false
}

// EscapeAfterFailure classes a choice made after an attempt on the
// session's own cluster failed in the same request (a choice whose
// session selection was primary was given up): a choice that leaves is a
// retry's doing, unless the session had lost its last cluster before any
// attempt (stale), which stays the reason.
func EscapeAfterFailure(escape string, s routing.SessionState) string {
	if escape == "" || s == routing.SessionStale {
		return escape
	}
	return EscapeRetry
}
