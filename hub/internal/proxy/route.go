package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/waitroom"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// loop is the state of one request's routing loop
// (docs/design/hub-request.md#retries): what failed, and the counters the
// retry budgets and the trace read.
type loop struct {
	failedBackends map[string]bool
	failedClusters []string
	connectRetries int
	requestRetries int
	// mismatchRetries counts the retries after queue_estimate_mismatch
	// refusals (MaxQueueMismatchRetries); refusedBackends are the backends
	// that refused in the current pass, skipped only until it ends.
	mismatchRetries int
	refusedBackends map[string]bool
	attempts        int
	waits           int
	waitLogged      bool
	routingRecorded bool
	// retryAfter is the longest x-stargate-retry-after-ms a pylon sent
	// with a retryable refusal in this request: the hub's own 503 passes
	// it on as Retry-After when every cluster has refused.
	retryAfter time.Duration
	permit     breaker.Permit
	failOpen   bool
	// ticket is the request's place in its target's waiting room while it
	// waits for a cluster with room; yielded reports that its previous
	// pass gave a cluster up to waiting returning sessions.
	ticket  *waitroom.Ticket
	yielded bool
	// escape is why the latest choice leaves the session's own cluster
	// (dispatch.Outcome.Escape); ownFailed reports that a choice of that
	// cluster was given up earlier in this request. The answer counts
	// the escape (countEscape).
	escape    string
	ownFailed bool
	// escaped reports that countEscape counted the escape: the answer was
	// a 2xx from the escape's cluster.
	escaped bool
	// selection, rank and tier describe the latest choice, for the
	// request's record.
	selection routelog.Selection
	rank      int
	tier      routing.PrefixTier
	// timer is the request's wait timer, made at its first wait and reset
	// for each later one: a waiting request sleeps again after every
	// publication of its target that does not give it room.
	timer clock.Timer
}

// sleep arms the wait timer for d and returns its channel.
func (st *loop) sleep(clk clock.Clock, d time.Duration) <-chan time.Time {
	if st.timer == nil {
		st.timer = clk.NewTimer(d)
	} else {
		st.timer.Reset(d)
	}
	return st.timer.C()
}

// wake stops the wait timer and drops a tick that fired alongside another
// wake, so the next sleep does not end at once.
func (st *loop) wake() {
	if !st.timer.Stop() {
		select {
		case <-st.timer.C():
		default:
		}
	}
}

// report ends the current attempt's breaker permit.
func (st *loop) report(o breaker.Outcome) {
	st.permit.Done(o)
	st.permit = breaker.Permit{}
}

// failBackend excludes a backend for the rest of the request. The set is
// made at the first failure: most requests never have one.
func (st *loop) failBackend(id string) {
	if st.failedBackends == nil {
		st.failedBackends = map[string]bool{}
	}
	st.failedBackends[id] = true
}

// refuseBackend skips a backend that refused with a queue mismatch for the
// rest of the current pass (tryCluster clears the set at the next).
func (st *loop) refuseBackend(id string) {
	if st.refusedBackends == nil {
		st.refusedBackends = map[string]bool{}
	}
	st.refusedBackends[id] = true
}

// route runs the request's routing loop: a routing pass on a fresh
// snapshot (hub/internal/dispatch decides), then the action the outcome
// calls for, until an answer is written. A cluster given up by tryCluster
// is excluded and the loop passes again; one whose backends only refused
// with a queue mismatch stays a candidate. The target's publication count
// is read before each snapshot, so a wait ends at any waking publication
// after it, even one between the snapshot and the sleep.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request, req *request, rng *rand.Rand) {
	st := &loop{}
	defer p.record(req, st)
	defer traceCounters(req.span, st, len(req.body))
	defer func() {
		p.rooms.Leave(st.ticket)
		if st.timer != nil {
			st.timer.Stop()
		}
	}()
	loopStart := p.cfg.Clock.Now() // the body is already read: routing time starts here
	for {
		p.rooms.Pass(st.ticket)
		seen := p.store.Publications(req.target)
		snap := p.store.Snapshot(req.target)
		req.pass.Req.Excluded = p.excludeBroken(req, st, snap)
		out := dispatch.Decide(&req.pass, snap, p.cfg.Clock.Now(), rng)
		switch out.Kind {
		case dispatch.Wait:
			st.yielded = false
			switch p.waitToPass(r, req, st, &out, seen) {
			case waitPassAgain:
			case waitClientGone:
				p.done(req, "", statusClientClosed)
				return
			case waitRoomFull, waitDisplaced:
				p.shed(w, req, st)
				return
			}
		case dispatch.Chosen:
			if p.yieldToReturning(r, req, st) {
				if r.Context().Err() != nil {
					p.done(req, "", statusClientClosed)
					return
				}
				continue
			}
			p.recordSelection(req, snap, &out, st, loopStart)
			res := p.tryCluster(w, r, req, st, &out.Decision)
			if res == nextDone {
				return
			}
			if out.SessionSelection == dispatch.SelectionPrimary {
				st.ownFailed = true
			}
			if res == nextCluster {
				st.failedClusters = append(st.failedClusters, out.Decision.ClusterID)
			}
		case dispatch.Rejected:
			p.rejectAdmission(w, req, out.Reason)
			return
		case dispatch.NoCandidates:
			switch p.awaitBackend(r, req, st) {
			case backendAppeared:
				continue
			case backendClientGone:
				p.done(req, "", statusClientClosed)
				return
			case backendTimedOut:
				p.modelUnavailable(w, req, st)
				return
			}
			p.noCandidate(w, req, st, &out)
			return
		default:
			p.noCandidate(w, req, st, &out)
			return
		}
	}
}

// excludeBroken adds to the failed clusters those whose every backend's
// breaker refuses, unless that leaves no cluster (fail open).
func (p *Proxy) excludeBroken(req *request, st *loop, snap *routing.Snapshot) []string {
	if p.cfg.Breakers.AllClosed() || snap == nil {
		return st.failedClusters
	}
	var broken []string
	for _, c := range snap.Clusters {
		if slices.Contains(st.failedClusters, c.ClusterID) {
			continue
		}
		if !p.store.HasBackend(req.target, c.ClusterID, func(id string) bool { return st.failedBackends[id] || !p.cfg.Breakers.Available(id) }) {
			broken = append(broken, c.ClusterID)
		}
	}
	if len(broken) == 0 {
		return st.failedClusters
	}
	if len(st.failedClusters)+len(broken) >= len(snap.Clusters) {
		st.failOpen = true
		return st.failedClusters
	}
	return append(slices.Clone(st.failedClusters), broken...)
}

// backendWait is how awaitBackend ended.
type backendWait uint8

const (
	backendUnknown    backendWait = iota // the model is not known: no wait, a 404
	backendAppeared                      // a backend registered: pass again
	backendTimedOut                      // none came within the wait
	backendClientGone                    // the client left during the wait
)

// backendWaitOutcomes are the outcome labels of
// stargate_model_unavailable_waits_total.
var backendWaitOutcomes = [...]string{backendAppeared: "appeared", backendTimedOut: "timed_out", backendClientGone: "client_gone"}

// awaitBackend handles a pass that found no cluster at all. A target that
// no configuration or registration has ever named, in a request where
// nothing failed, is a model nobody serves: no wait. Any other is a model
// whose backends are gone for now (a pylon or the hub restarting): the
// request waits for a backend to register, until its routing wait
// deadline or ModelUnavailableWait from its start, whichever is first.
func (p *Proxy) awaitBackend(r *http.Request, req *request, st *loop) backendWait {
	t := req.target
	failed := len(st.failedBackends) > 0 || len(st.failedClusters) > 0
	if !failed && !p.known(req) {
		return backendUnknown
	}
	st.waits++
	deadline := req.pass.WaitUntil
	if bound := req.start.Add(p.cfg.ModelUnavailableWait); bound.Before(deadline) {
		deadline = bound
	}
	res := backendTimedOut
	if p.cfg.Clock.Now().Before(deadline) {
		p.cfg.Log.Debug("waiting for a backend of a known model", "request_id", req.pass.Req.ID,
			"model", t.Model, "routing_key", t.RoutingKey, "until", deadline)
		p.cfg.Metrics.waitingForBackend(t, 1)
		res = p.sleepUntilBackend(r.Context(), t, deadline)
		p.cfg.Metrics.waitingForBackend(t, -1)
	}
	p.cfg.Metrics.backendWait(t, backendWaitOutcomes[res])
	return res
}

// sleepUntilBackend sleeps until t has a snapshot, deadline passes or ctx
// ends. It wakes on the store's activation signal, not on a poll, so a
// long wait costs nothing while nothing registers; the signal is taken
// before the snapshot is checked, so an activation between the two is
// never missed.
func (p *Proxy) sleepUntilBackend(ctx context.Context, t routing.Target, deadline time.Time) backendWait {
	for {
		activated := p.store.Activated()
		if p.store.Snapshot(t) != nil {
			return backendAppeared
		}
		left := deadline.Sub(p.cfg.Clock.Now())
		if left <= 0 {
			return backendTimedOut
		}
		timer := p.cfg.Clock.NewTimer(left)
		select {
		case <-activated:
		case <-timer.C():
		case <-ctx.Done():
			timer.Stop()
			return backendClientGone
		}
		timer.Stop()
	}
}

// known reports whether the request's target names a model the hub knows:
// one the request's lb-config generation names, one a registration listed
// since the hub started, or any model during the startup grace, while the
// pylons are still reconnecting.
func (p *Proxy) known(req *request) bool {
	t, configured := req.target, req.gen.ConfiguredModel
	if p.store.Known(t) || (configured != nil && configured(t.Model)) {
		return true
	}
	return p.cfg.StartupGrace > 0 && p.cfg.Clock.Since(p.started) < p.cfg.StartupGrace
}

// modelUnavailable ends a request whose known model had no backend for its
// whole wait: 503 model_temporarily_unavailable with Retry-After, so
// clients and SDKs retry a transient outage instead of treating it as a
// missing model.
func (p *Proxy) modelUnavailable(w http.ResponseWriter, req *request, st *loop) {
	t := req.target
	p.cfg.Log.Warn("no backend registered for a known model within the wait", "request_id", req.pass.Req.ID,
		"model", t.Model, "routing_key", t.RoutingKey)
	w.Header().Set(headers.StargateErrorCode, ErrorCodeModelUnavailable)
	openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer,
		Code: ErrorCodeModelUnavailable, Message: fmt.Sprintf("model %s is temporarily unavailable; retry later", t.Model),
		RetryAfter: retryAfterSeconds(st.retryAfter)})
	p.done(req, "", http.StatusServiceUnavailable)
}

// waitEnd is how one routing wait ended.
type waitEnd uint8

const (
	waitPassAgain  waitEnd = iota // the wait is over (or a wake came): pass again
	waitClientGone                // the client left
	waitRoomFull                  // the target's waiting room had no place
	waitDisplaced                 // a returning session took this request's place
)

// waitToPass sleeps out a pass's wait, in the target's waiting room
// (hub/internal/waitroom): the request takes a place at its first wait
// and keeps it until an attempt reserves a cluster for it (attempt leaves
// the room right after the reservation). The sleep ends at the first of:
// the wait's end on the proxy's clock; the target's first waking
// publication after seen (a registration, a reservation released, a
// backend gone: docs/design/hub-request.md#waits), which wakes every
// waiter of the target at once; and, for a returning session, a request
// about to take a cluster yielding it.
func (p *Proxy) waitToPass(r *http.Request, req *request, st *loop, out *dispatch.Outcome, seen uint64) waitEnd {
	if st.ticket == nil {
		tk, ok := p.rooms.Enter(req.target, waitroom.ClassOf(req.pass.Req.Session))
		if !ok {
			return waitRoomFull
		}
		st.ticket = tk
	}
	if !st.waitLogged {
		st.waitLogged = true
		p.cfg.Log.Debug("waiting for routing bucket eligibility", "request_id", req.pass.Req.ID,
			"model", req.target.Model, "wait", out.Decision.Wait, "class", st.ticket.Class().String())
	}
	st.waits++
	wake := p.rooms.Sleep(st.ticket)
	published := p.store.PublishedAfter(req.target, seen)
	ticked := st.sleep(p.cfg.Clock, out.Wait)
	defer st.wake()
	select {
	case <-ticked:
	case <-published:
	case <-wake:
	case <-st.ticket.Shed():
		return waitDisplaced
	case <-r.Context().Done():
		return waitClientGone
	}
	return waitPassAgain
}

// yieldToReturning applies the returning-first policy to a pass that gave
// a request which is not a returning session a cluster: when returning
// sessions wait for the same target, it wakes them and waits until each
// has passed (at most maxYieldWait), so the room this pass found goes to
// them first. It reports whether the request yielded; it then passes
// again and takes what that pass gives, so a request yields at most every
// other pass and its delay is bounded by maxYieldWait.
func (p *Proxy) yieldToReturning(r *http.Request, req *request, st *loop) bool {
	if st.yielded || waitroom.ClassOf(req.pass.Req.Session) == waitroom.Returning {
		st.yielded = false
		return false
	}
	settled, ok := p.rooms.Yield(req.target)
	if !ok {
		return false
	}
	st.yielded = true
	timer := p.cfg.Clock.NewTimer(maxYieldWait)
	defer timer.Stop()
	var shed <-chan struct{}
	if st.ticket != nil {
		shed = st.ticket.Shed()
	}
	select {
	case <-settled:
	case <-timer.C():
	case <-shed:
	case <-r.Context().Done():
	}
	return true
}

// maxYieldWait bounds how long a request waits for the returning sessions
// it yielded to. Woken, each passes within microseconds; the bound only
// matters when one is held elsewhere (waiting for a backend to register)
// and keeps the yielding request's delay at most what the 25 ms poll of
// the waits once made it.
const maxYieldWait = 25 * time.Millisecond

// shed ends a request the waiting room could not keep: its target's room
// was full, or a returning session took its place. 503 overloaded_error
// with Retry-After, the room's reason in x-stargate-error-code and the
// admission metric, so a client backs off as from any overload.
func (p *Proxy) shed(w http.ResponseWriter, req *request, st *loop) {
	t := req.target
	reason := ReasonWaitingRoomFull
	if st.ticket != nil {
		reason = ReasonDisplaced
	}
	p.cfg.Log.Warn("shedding a waiting request", "request_id", req.pass.Req.ID,
		"model", t.Model, "routing_key", t.RoutingKey, "reason", reason)
	p.cfg.Metrics.admissionRejected(t, reason)
	w.Header().Set(headers.StargateErrorCode, reason)
	oerr := openai.Unavailable(reason, fmt.Sprintf("no cluster can serve model %s now (%s)", t.Model, reason))
	oerr.RetryAfter = retryAfterSeconds(st.retryAfter)
	openai.WriteError(w, oerr)
	p.done(req, "", http.StatusServiceUnavailable)
}

// Reasons a waiting request is shed (the reason label of
// stargate_admission_rejections_total and x-stargate-error-code).
const (
	// ReasonWaitingRoomFull: the target's waiting room held
	// --proxy-max-waiting-requests and nobody could be displaced.
	ReasonWaitingRoomFull = "waiting_room_full"
	// ReasonDisplaced: a returning session took the place of this waiting
	// request in a full room.
	ReasonDisplaced = "shed_for_returning_session"
)

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
	st.selection, st.rank, st.tier = routelog.SelectionFallback, dec.RankDepth, dec.PrefixTier
	if out.Selection == dispatch.SelectionPrimary {
		st.selection = routelog.SelectionPrimary
	}
	st.escape = out.Escape
	if st.ownFailed {
		st.escape = dispatch.EscapeAfterFailure(out.Escape, req.pass.Req.Session)
	}
}

// noCandidate ends a request the routing pass could not place: 404 for a
// model nobody serves (awaitBackend found it unknown), else 503
// overloaded_error with Retry-After: the longest hint a refusing pylon
// gave, or 1 s.
func (p *Proxy) noCandidate(w http.ResponseWriter, req *request, st *loop, out *dispatch.Outcome) {
	t := req.target
	failed := len(st.failedBackends) > 0 || len(st.failedClusters) > 0
	if out.Kind == dispatch.NoCandidates {
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
	oerr := openai.Unavailable(headers.ErrorCodeOverloaded, fmt.Sprintf("no cluster can serve model %s now", t.Model))
	oerr.RetryAfter = retryAfterSeconds(st.retryAfter)
	openai.WriteError(w, oerr)
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
		Code: dispatch.ReasonInputWorkLimit, Message: "input work admission limit exceeded", RetryAfter: minRetryAfterSeconds})
	p.done(req, "", http.StatusServiceUnavailable)
}
