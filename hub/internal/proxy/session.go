package proxy

import (
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Session selection classes (hub.md §10.6).
const (
	selectionPrimary  = "primary"
	selectionFallback = "fallback"
)

// recordSession records a classified request's selection: the session
// metric (its six pairs created at zero for the target first), and the debug
// log. A returning session's selection is primary when it went to its last
// cluster; a new or stale one's when it came from the affinity group. The
// log never carries the affinity key or any session id.
func (p *Proxy) recordSession(req *request, dec *routing.Decision) {
	r := &req.rreq
	selection := selectionFallback
	switch r.Session {
	case routing.SessionReturning:
		if dec.ClusterID == r.LastClusterID {
			selection = selectionPrimary
		}
	default:
		if dec.RankDepth <= max(dec.GroupSize, 1) {
			selection = selectionPrimary
		}
	}
	p.cfg.Metrics.session(req.target, req.route.Algorithm, r.Session.String(), selection)
	p.cfg.Log.Debug("routing session classified", "request_id", r.ID, "model_id", req.target.Model,
		"routing_key", req.target.RoutingKey, "algorithm", req.route.Algorithm, "session_state", r.Session.String(),
		"last_cluster_promoted", r.SessionPromoted, "selected_cluster_id", dec.ClusterID, "selection", selection)
}
