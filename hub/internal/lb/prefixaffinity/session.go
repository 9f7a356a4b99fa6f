package prefixaffinity

import "github.com/stargate-router/stargate/hub/internal/routing"

// sessionPlan is what last_cluster_affinity contributes to one decision.
type sessionPlan struct {
	state    routing.SessionState
	promoted bool
	// last is the snapshot index of a returning session's last cluster
	// when it leads the tiers (returning_prefers_last_cluster on, the
	// cluster in the snapshot and not excluded), else -1.
	last int
}

// session classifies req as wait-and-widen does
// (docs/design/hub-request.md#session-classification): only with
// last_cluster_affinity and an affinity key; new without a hint, stale when
// the hint names a cluster outside the snapshot (the hint is then ignored),
// returning otherwise. A request an earlier decision classified keeps that
// class. req is only read.
//
// Promoted is set when returning_prefers_last_cluster puts the last
// cluster ahead of what the prefix index alone would prefer: the index
// knows no holder, or knows a longer prefix elsewhere.
func (p *Picker) session(req *routing.Request, snap *routing.Snapshot) sessionPlan {
	if !p.cfg.LastClusterAffinity || req.AffinityKey == "" {
		return sessionPlan{last: -1}
	}
	hint := req.LastClusterID
	idx := -1
	if hint != "" {
		idx = snap.Index(hint)
	}
	s := sessionPlan{state: req.Session, promoted: req.SessionPromoted, last: -1}
	if s.state == routing.SessionUnclassified {
		switch {
		case hint == "":
			s.state = routing.SessionNew
		case idx < 0:
			s.state = routing.SessionStale
		default:
			s.state = routing.SessionReturning
			h := req.Prefix.Holders
			s.promoted = p.cfg.PreferLastCluster && (len(h) == 0 || req.Prefix.HeldBlocks(hint) < h[0].Blocks)
		}
	}
	if s.state == routing.SessionReturning && p.cfg.PreferLastCluster && idx >= 0 && !req.IsExcluded(hint) {
		s.last = idx
	}
	return s
}

// stamp returns d carrying the session classification, so the routing
// pass can keep it for the request's later decisions.
func stamp(d routing.Decision, s sessionPlan) routing.Decision {
	d.Session, d.SessionPromoted = s.state, s.promoted
	return d
}
