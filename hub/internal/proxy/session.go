package proxy

import (
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// recordSession records a classified request's selection: the session
// metric (its six pairs created at zero for the target first), and the
// debug log. selection is the pass's session selection class
// (docs/design/hub-request.md#session-classification). The log never
// carries the affinity key or any session id.
func (p *Proxy) recordSession(req *request, dec *routing.Decision, selection string) {
	r, alg := &req.pass.Req, req.pass.Route.Algorithm
	p.cfg.Metrics.session(req.target, alg, r.Session.String(), selection)
	p.cfg.Log.Debug("routing session classified", "request_id", r.ID, "model_id", req.target.Model,
		"routing_key", req.target.RoutingKey, "algorithm", alg, "session_state", r.Session.String(),
		"last_cluster_promoted", r.SessionPromoted, "selected_cluster_id", dec.ClusterID, "selection", selection)
}

// sessionState is the class the answer's x-stargate-session-state reports:
// the request's classification on a route with last_cluster_affinity, the
// same condition under which recordSession counts it, so the header and
// stargate_routing_session_selections_total never disagree; unclassified
// otherwise.
func (req *request) sessionState() routing.SessionState {
	if !req.pass.Route.LastClusterAffinity {
		return routing.SessionUnclassified
	}
	return req.pass.Req.Session
}
