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
