package proxy

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

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
	// Enabled first: the arguments allocate on every request even when the
	// record is dropped, and hubs run at info or above.
	if !p.cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
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

// countEscape counts a classified request's escape (st.escape) once, as
// its answer's head is written: only a 2xx counts, since only a 2xx moves
// the session (the gateway remembers the cluster of a 2xx answer), so an
// error answered from elsewhere is not an escape.
func (p *Proxy) countEscape(req *request, st *loop, clusterID string, status int) {
	if st.escape == "" || status < 200 || status > 299 {
		return
	}
	st.escaped = true
	p.cfg.Metrics.escape(req.target, st.escape)
	p.escapes.add(req.target, st.escape)
	r := &req.pass.Req
	p.cfg.Log.Debug("session left its cluster", "request_id", r.ID, "model_id", req.target.Model,
		"routing_key", req.target.RoutingKey, "session_state", r.Session.String(), "reason", st.escape,
		"selected_cluster_id", clusterID)
}

// EscapeCount is one target's count of one escape reason since the hub
// started, as /debug/state shows it.
type EscapeCount struct {
	RoutingKey string `json:"routing_key"`
	Model      string `json:"model"`
	Reason     string `json:"reason"`
	Count      uint64 `json:"count"`
}

// Escapes returns the escapes counted since the proxy was built, by
// target and reason, sorted: stargate_session_escapes_total without a
// Prometheus server, for /debug/state.
func (p *Proxy) Escapes() []EscapeCount {
	out := []EscapeCount{}
	p.escapes.m.Range(func(k, v any) bool {
		key := k.(escapeKey)           //nolint:forcetypeassert // the map holds only these
		n := v.(*atomic.Uint64).Load() //nolint:forcetypeassert // as above
		out = append(out, EscapeCount{RoutingKey: key.target.RoutingKey, Model: key.target.Model, Reason: key.reason, Count: n})
		return true
	})
	slices.SortFunc(out, func(a, b EscapeCount) int {
		return cmp.Or(cmp.Compare(a.RoutingKey, b.RoutingKey), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// escapeCounts are the proxy's escape counts. Escapes are rare (a
// session's answer from another cluster), so a map entry per target and
// reason costs nothing on the common path.
type escapeCounts struct{ m sync.Map } // escapeKey → *atomic.Uint64

type escapeKey struct {
	target routing.Target
	reason string
}

func (e *escapeCounts) add(t routing.Target, reason string) {
	key := escapeKey{target: t, reason: reason}
	v, ok := e.m.Load(key)
	if !ok {
		v, _ = e.m.LoadOrStore(key, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1) //nolint:forcetypeassert // the map holds only these
}
