package proxy

import (
	"net/http"

	"github.com/stargate-router/stargate/hub/internal/routelog"
)

// Recorder keeps a record of each routed request (routelog.Log).
type Recorder interface {
	Append(e routelog.Entry)
}

// record hands the ended request to Config.Records. An escape is recorded
// when countEscape counted it (a 2xx from the escape's cluster): an error
// answered from elsewhere does not move the session.
func (p *Proxy) record(req *request, st *loop) {
	if p.cfg.Records == nil {
		return
	}
	r := &req.pass.Req
	e := routelog.Entry{Request: routelog.Request{At: req.start, Duration: p.cfg.Clock.Since(req.start),
		Model: req.target.Model, RoutingKey: req.target.RoutingKey, Algorithm: req.pass.Route.Algorithm,
		Cluster: req.served, Hint: r.LastClusterID, Class: req.sessionState(),
		RankDepth: st.rank, Waits: st.waits, Retries: st.requestRetries + st.connectRetries + st.mismatchRetries,
		Status: req.status, Selection: st.selection, PrefixTier: st.tier}, Session: r.AffinityKey}
	if req.expired {
		e.Status = http.StatusGatewayTimeout
	}
	if st.escaped {
		e.Escape = st.escape
	}
	if req.anchor != 0 {
		e.Prefix = req.anchor
		for _, holder := range r.Prefix.Holders {
			e.PrefixBlocks = max(e.PrefixBlocks, holder.Blocks)
		}
	}
	p.cfg.Records.Append(e)
}
