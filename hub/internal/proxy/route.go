package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// loop is the state of one request's routing loop
// (docs/design/hub-request.md#retries): what failed, and the counters the
// retry budgets and the trace read.
type loop struct {
	failedBackends  map[string]bool
	failedClusters  []string
	connectRetries  int
	requestRetries  int
	attempts        int
	waits           int
	waitLogged      bool
	routingRecorded bool
}

// failBackend excludes a backend for the rest of the request. The set is
// made at the first failure: most requests never have one.
func (st *loop) failBackend(id string) {
	if st.failedBackends == nil {
		st.failedBackends = map[string]bool{}
	}
	st.failedBackends[id] = true
}

// route runs the request's routing loop: a routing pass on a fresh
// snapshot (hub/internal/dispatch decides), then the action the outcome
// calls for, until an answer is written. A cluster given up by tryCluster
// is excluded and the loop passes again.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request, req *request, rng *rand.Rand) {
	st := &loop{}
	defer traceCounters(req.span, st, len(req.body))
	loopStart := p.cfg.Clock.Now() // the body is already read: routing time starts here
	for {
		req.pass.Req.Excluded = st.failedClusters
		snap := p.store.Snapshot(req.target)
		out := dispatch.Decide(&req.pass, snap, p.cfg.Clock.Now(), rng)
		switch out.Kind {
		case dispatch.Wait:
			if !p.waitToPass(r, req, st, &out) {
				p.done(req, "", statusClientClosed)
				return
			}
		case dispatch.Chosen:
			p.recordSelection(req, snap, &out, st, loopStart)
			if p.tryCluster(w, r, req, st, &out.Decision) == nextDone {
				return
			}
			st.failedClusters = append(st.failedClusters, out.Decision.ClusterID)
		case dispatch.Rejected:
			p.rejectAdmission(w, req, out.Reason)
			return
		default:
			p.noCandidate(w, req, st, &out)
			return
		}
	}
}

// waitToPass sleeps out a pass's wait on the proxy's clock; it reports
// false when the client left meanwhile.
func (p *Proxy) waitToPass(r *http.Request, req *request, st *loop, out *dispatch.Outcome) bool {
	if !st.waitLogged {
		st.waitLogged = true
		p.cfg.Log.Debug("waiting for routing bucket eligibility", "request_id", req.pass.Req.ID,
			"model", req.target.Model, "wait", out.Decision.Wait)
	}
	st.waits++
	return clock.Sleep(p.cfg.Clock, r.Context().Done(), out.Wait)
}

// recordSelection records a choice: the routing time (at the first choice
// only), the selection metrics, the span's routing fields and, for a
// classified request, its session selection.
func (p *Proxy) recordSelection(req *request, snap *routing.Snapshot, out *dispatch.Outcome, st *loop, loopStart time.Time) {
	t := req.target
	if !st.routingRecorded {
		st.routingRecorded = true
		p.cfg.Metrics.routingDuration(t, p.cfg.Clock.Since(loopStart))
	}
	dec := &out.Decision
	p.cfg.Metrics.selection(t, req.pass.Route.Algorithm, out.Selection)
	traceSelection(req.span, req, snap, dec, st)
	if dec.SelectedAfterKVFreeTokensSkip {
		p.cfg.Metrics.kvFallback(t, req.pass.Route.Algorithm)
	}
	if out.SessionSelection != "" {
		p.recordSession(req, dec, out.SessionSelection)
	}
}

// noCandidate ends a request the routing pass could not place: 404 when
// the target was never advertised and nothing failed, else 503.
func (p *Proxy) noCandidate(w http.ResponseWriter, req *request, st *loop, out *dispatch.Outcome) {
	t := req.target
	failed := len(st.failedBackends) > 0 || len(st.failedClusters) > 0
	if out.Kind == dispatch.NoCandidates && !failed && !p.store.Registered(t) {
		p.cfg.Log.Warn("no inference server candidates for routing target", "request_id", req.pass.Req.ID, "model", t.Model, "routing_key", t.RoutingKey)
		w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeNoEligibleCandidates)
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeNotFound,
			Code: headers.ErrorCodeNoEligibleCandidates, Message: "no eligible candidates"})
		p.done(req, "", http.StatusNotFound)
		return
	}
	if failed {
		p.cfg.Metrics.exhausted(t, "no_eligible_backend")
	} else if out.Candidates > 0 {
		// Clusters exist but the load balancer found none it could use
		// (no capacity, locked buckets) before the wait ran out.
		p.cfg.Metrics.admissionRejected(t, dispatch.ReasonRoutingCapacity)
	}
	w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeOverloaded)
	openai.WriteError(w, openai.Unavailable(headers.ErrorCodeOverloaded, fmt.Sprintf("no cluster can serve model %s now", t.Model)))
	p.done(req, "", http.StatusServiceUnavailable)
}

// rejectAdmission answers an input-work admission rejection: 503 with
// code input_work_limit_exceeded for both reasons, as upstream Stargate
// does, so a client has one code to back off on; the metric and the log
// keep the reason.
func (p *Proxy) rejectAdmission(w http.ResponseWriter, req *request, reason string) {
	t := req.target
	p.cfg.Log.Warn("rejecting request before routing due to input-work admission", "request_id", req.pass.Req.ID,
		"model", t.Model, "routing_key", t.RoutingKey, "reason", reason, "max_input_work_seconds", req.pass.Route.MaxInputWorkSeconds)
	p.cfg.Metrics.admissionRejected(t, reason)
	w.Header().Set(headers.StargateErrorCode, dispatch.ReasonInputWorkLimit)
	openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer,
		Code: dispatch.ReasonInputWorkLimit, Message: "input work admission limit exceeded"})
	p.done(req, "", http.StatusServiceUnavailable)
}
