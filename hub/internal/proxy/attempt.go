package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

type next int

const (
	nextDone    next = iota // a response was written (or the client left)
	nextCluster             // exclude this cluster and run the load balancer again
	nextPass                // run the load balancer again, the cluster still a candidate
)

// tryCluster runs attempts on the chosen cluster's backends, sibling after
// sibling, until one answers or the cluster must be given up. When the
// backends that were left refused with a queue mismatch
// (docs/design/hub-request.md#queue-refusals), the cluster is not given up:
// the state now shows it full, and the next pass decides whether to wait
// for it or go elsewhere.
func (p *Proxy) tryCluster(w http.ResponseWriter, r *http.Request, req *request, st *loop, dec *routing.Decision) next {
	clear(st.refusedBackends)
	for {
		b, ok := p.store.NextBackend(req.target, dec.ClusterID, req.innerKey(), func(id string) bool {
			return st.failedBackends[id] || st.refusedBackends[id] || (!st.failOpen && !p.cfg.Breakers.Available(id))
		})
		if !ok {
			if len(st.refusedBackends) > 0 {
				return nextPass
			}
			return nextCluster
		}
		permit, ok := p.cfg.Breakers.Acquire(b.ID)
		if !ok && !st.failOpen {
			st.failBackend(b.ID)
			continue
		}
		st.permit = permit
		switch p.attempt(w, r, req, st, dec, b) {
		case attemptDone:
			return nextDone
		case attemptSibling:
			st.failBackend(b.ID)
		case attemptRefused:
			st.refuseBackend(b.ID)
		case attemptOtherCluster:
			st.failBackend(b.ID)
			return nextCluster
		}
	}
}

// attemptResult is what an attempt leaves the routing loop to do.
type attemptResult int

const (
	attemptDone         attemptResult = iota // answered (or the client left)
	attemptSibling                           // fail this backend, try the cluster's next one
	attemptRefused                           // skip this backend in this pass only, try the next one
	attemptOtherCluster                      // fail this backend and its cluster, pass again
)

// statusClientClosed labels requests whose client left before an answer
// (nginx's 499).
const statusClientClosed = 499

// attempt sends the request to one backend of the chosen cluster and acts
// on the result (docs/design/hub-request.md#one-attempt): reserve load on
// the cluster, build the outbound request, make the round trip bounded by
// the head timeout, then classify a transport failure or an answer into a
// retry on a sibling, a retry on another cluster, or the answer written to
// the client.
func (p *Proxy) attempt(w http.ResponseWriter, r *http.Request, req *request, st *loop, dec *routing.Decision, b state.Backend) attemptResult {
	st.attempts++
	res := p.store.Reserve(req.target, dec.ClusterID, b.ID, req.pass.Req.InputTokens, req.pass.Req.Priority)
	// Leave the waiting room only now: a request that yielded to this one
	// passes again as soon as it has left, and must see the reservation.
	p.rooms.Leave(st.ticket)
	st.ticket = nil
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rt, ok := p.tunnels.RoundTripper(b.ID)
	if !ok {
		return p.transportFailed(w, r, req, st, b, errors.New("no tunnel to backend "+b.ID))
	}
	out, err := outbound(ctx, r, req, dec, p.returningAllowance(req, dec))
	if err != nil {
		openai.WriteError(w, openai.Internal("building upstream request"))
		return attemptDone
	}
	p.forwardDeadline(out, req)
	// answered closes the body: a retry closes it at once, an answer once
	// it is copied to the client.
	resp, err := p.roundTrip(ctx, cancel, rt, out, req, st, dec, b) //nolint:bodyclose // closed by answered, as above
	if err != nil {
		return p.transportFailed(w, r, req, st, b, err)
	}
	p.markPrefix(req, dec, resp.StatusCode)
	return p.answered(w, r, req, st, dec.ClusterID, b, resp, res)
}

// outbound builds the request to the pylon: the buffered body (replayable
// on a retry), the forwarded headers, and the hub's queue estimate of the
// chosen cluster when it has one, raised to allowanceMs, the queue a
// returning session accepts on its last cluster (returningAllowance).
func outbound(ctx context.Context, r *http.Request, req *request, dec *routing.Decision, allowanceMs uint64) (*http.Request, error) {
	// The host is a placeholder: the tunnel RoundTripper sends every
	// request to its one pylon, whatever the URL says.
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pylon"+r.URL.RequestURI(), bytes.NewReader(req.body))
	if err != nil {
		return nil, err
	}
	out.Header = forwardHeaders(r.Header)
	if req.backendKey != "" {
		out.Header[sendCacheAffinityKey] = []string{req.backendKey}
	}
	switch {
	case allowanceMs > 0:
		out.Header[sendExpectedQueueMs] = []string{strconv.FormatUint(max(allowanceMs, dec.QueueEstimateMs), 10)}
	case dec.QueueEstimateKnown:
		out.Header[sendExpectedQueueMs] = []string{strconv.FormatUint(dec.QueueEstimateMs, 10)}
	}
	out.ContentLength = int64(len(req.body))
	return out, nil
}

// roundTrip sends out over rt and returns the response head. The head must
// arrive within RequestTimeout, else cancel ends the attempt; once it has
// arrived the body may stream for as long as it takes.
func (p *Proxy) roundTrip(ctx context.Context, cancel context.CancelFunc, rt http.RoundTripper, out *http.Request,
	req *request, st *loop, dec *routing.Decision, b state.Backend) (*http.Response, error) {
	var headArrived atomic.Bool
	timer := p.cfg.Clock.AfterFunc(p.cfg.RequestTimeout, func() {
		if !headArrived.Load() {
			cancel()
		}
	})
	p.logAttempt(ctx, req, st, b)
	_, aspan := p.startAttemptSpan(ctx, out, req, st, dec, b)
	var sent time.Time
	if aspan.IsRecording() {
		sent = p.cfg.Clock.Now()
	}
	resp, err := rt.RoundTrip(out)
	headArrived.Store(true)
	timer.Stop()
	var ttfb time.Duration
	if !sent.IsZero() {
		ttfb = p.cfg.Clock.Since(sent)
	}
	endAttemptSpan(aspan, resp, err, ttfb)
	return resp, err
}

// logAttempt logs one attempt at info. Enabled is checked first: building
// the arguments allocates on every request, and production hubs log at
// warn.
func (p *Proxy) logAttempt(ctx context.Context, req *request, st *loop, b state.Backend) {
	if !p.cfg.Log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	t, rr := req.target, &req.pass.Req
	p.cfg.Log.Info("proxying request", "request_id", rr.ID, "routing_key", t.RoutingKey, "model_id", t.Model,
		"input_tokens", rr.InputTokens, "routing_algorithm", req.pass.Route.Algorithm, "inference_server_id", b.ID,
		"attempt", st.attempts, "connect_retries", st.connectRetries, "request_retries", st.requestRetries,
		"queue_mismatch_retries", st.mismatchRetries)
}

// transportFailed handles an attempt that got no answer: the client left
// (499), or the tunnel failed, which moves to a sibling backend while the
// retry budget and the connect retries last, and is a 502 after.
func (p *Proxy) transportFailed(w http.ResponseWriter, r *http.Request, req *request, st *loop, b state.Backend, err error) attemptResult {
	t := req.target
	if p.pastDeadline(req) {
		// The deadline cancelled the attempt: not the backend's failure,
		// and no time is left for another.
		st.report(breaker.Ignored)
		p.cfg.Metrics.attempt(t, b.ID, "proxy_"+strconv.Itoa(http.StatusGatewayTimeout))
		p.deadlineExceeded(w, req, b.ID, stageUpstream)
		return attemptDone
	}
	if r.Context().Err() != nil {
		st.report(breaker.Ignored)
		p.cfg.Metrics.attempt(t, b.ID, "proxy_"+strconv.Itoa(statusClientClosed))
		p.done(req, b.ID, statusClientClosed)
		return attemptDone
	}
	st.report(breaker.Failure)
	p.cfg.Metrics.attempt(t, b.ID, "proxy_502")
	p.cfg.Log.Warn("tunnel upstream request failed", "request_id", req.pass.Req.ID, "inference_server_id", b.ID, "err", err)
	switch {
	case p.budgetSpent(req):
		p.cfg.Metrics.exhausted(t, "retry_budget_exhausted")
	case st.connectRetries >= p.cfg.MaxConnectRetries:
		p.cfg.Metrics.exhausted(t, "connect_retries_exhausted")
	default:
		st.connectRetries++
		p.cfg.Metrics.retry(t, "connect_failover")
		return attemptSibling
	}
	openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "upstream_unreachable",
		Message: "the serving cluster could not be reached"})
	p.done(req, b.ID, http.StatusBadGateway)
	return attemptDone
}

// answered handles an upstream answer: a queue-estimate mismatch marks the
// backend full until its next registration and releases the reservation
// (the pylon refused the load it stands for); a retryable answer is
// retried while the budgets last; anything else is written to the client.
func (p *Proxy) answered(w http.ResponseWriter, r *http.Request, req *request, st *loop, clusterID string, b state.Backend,
	resp *http.Response, res state.Reservation) attemptResult {
	t := req.target
	p.cfg.Metrics.attempt(t, b.ID, upstreamLabel(resp.StatusCode))
	p.cfg.Metrics.proxyDuration(t, b.ID, p.cfg.Clock.Since(req.start))
	if pylonDeadline(resp) {
		// Not the backend's failure, and no time is left for a retry.
		_ = resp.Body.Close()
		st.report(breaker.Ignored)
		p.deadlineExceeded(w, req, b.ID, stageUpstream)
		return attemptDone
	}
	reason := strings.TrimSpace(headers.First(resp.Header, canonRetryReason))
	if resp.StatusCode == http.StatusTooManyRequests && isTrue(headers.First(resp.Header, canonRetryable)) && reason == headers.ReasonQueueEstimateMismatch {
		// Mark before releasing: in between, another request would see
		// the slot the reservation held as free.
		p.store.MarkFull(t, clusterID, b.ID, refusedQueueMs(resp))
		res.Release()
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || (p.retryable(resp) && reason != headers.ReasonLocalConnectFailure):
		st.report(breaker.Ignored)
	case resp.StatusCode >= 500:
		st.report(breaker.Failure)
	}
	if p.retryable(resp) {
		st.retryAfter = max(st.retryAfter, retryAfterHint(resp.Header))
		if result, retry := p.retryAnswer(req, st, b, resp, reason); retry {
			return result
		}
	}
	setRetryAfter(resp)
	return p.writeAnswer(w, r, req, st, clusterID, b, resp)
}

// retryAnswer decides whether a retryable answer is retried. A
// queue-estimate mismatch follows retryMismatch; any other reason goes to
// another cluster within the retry budget and --proxy-max-request-retries,
// except for a returning session on its last cluster, which tries the
// cluster's next backend first (siblingFirst). Otherwise it counts the
// exhaustion and reports false: the answer is passed through.
func (p *Proxy) retryAnswer(req *request, st *loop, b state.Backend, resp *http.Response, reason string) (attemptResult, bool) {
	t := req.target
	if reason == headers.ReasonQueueEstimateMismatch {
		return p.retryMismatch(req, st, b, resp)
	}
	if reason == "" {
		reason = "retryable_upstream_response"
	}
	switch {
	case p.budgetSpent(req):
		p.cfg.Metrics.exhausted(t, "retry_budget_exhausted")
		return attemptDone, false
	case st.requestRetries >= p.cfg.MaxRequestRetries:
		p.cfg.Metrics.exhausted(t, reason)
		return attemptDone, false
	}
	st.requestRetries++
	p.cfg.Metrics.retry(t, reason)
	_ = resp.Body.Close()
	p.cfg.Log.Warn("retrying request after retryable upstream response", "request_id", req.pass.Req.ID, "inference_server_id", b.ID,
		"status", resp.StatusCode, "reason", reason)
	if siblingFirst(req, b) {
		return attemptSibling, true
	}
	return attemptOtherCluster, true
}

// siblingFirst reports that a retryable answer from b is retried on b's
// cluster first: the request is a returning session and b is in its last
// cluster, where its KV cache is. One engine's refusal (an engine 429 or
// 503, an engine it cannot reach) says nothing of the cluster's other
// backends, and leaving would cost the session its cache: it would escape
// on a single transient refusal. The cluster is given up once every
// backend has failed, and each try is a request retry, as before.
func siblingFirst(req *request, b state.Backend) bool {
	return req.sessionState() == routing.SessionReturning && b.ClusterID == req.pass.Req.LastClusterID
}

// retryMismatch decides the retry of a 429 queue_estimate_mismatch
// (docs/design/hub-request.md#queue-refusals). The refusal says this hub's
// view of the cluster was stale (other hubs' requests took the slots it
// saw free), not that the cluster failed; answered has marked the backend
// full. Within the retry budget, the deadline and
// --proxy-max-queue-mismatch-retries the request tries a sibling backend
// (another engine may have room) and, with none left, passes again with
// the cluster still a candidate, so a returning session can wait for its
// cache instead of escaping. Once the routing wait is over a pass cannot
// wait any more, so the cluster is given up as before. At a bound the
// pylon's answer is passed through.
func (p *Proxy) retryMismatch(req *request, st *loop, b state.Backend, resp *http.Response) (attemptResult, bool) {
	t, reason := req.target, headers.ReasonQueueEstimateMismatch
	switch {
	case p.budgetSpent(req) || p.pastDeadline(req):
		p.cfg.Metrics.exhausted(t, "retry_budget_exhausted")
		return attemptDone, false
	case st.mismatchRetries >= p.cfg.MaxQueueMismatchRetries:
		p.cfg.Metrics.exhausted(t, reason)
		return attemptDone, false
	}
	st.mismatchRetries++
	p.cfg.Metrics.retry(t, reason)
	_ = resp.Body.Close()
	if !p.cfg.Clock.Now().Before(req.pass.WaitUntil) {
		p.cfg.Log.Warn("retrying request elsewhere after local queue mismatch; no routing wait left", "request_id", req.pass.Req.ID,
			"inference_server_id", b.ID)
		return attemptSibling, true
	}
	p.cfg.Log.Warn("retrying request after local queue mismatch; the backend counts as full until its next registration",
		"request_id", req.pass.Req.ID, "inference_server_id", b.ID, "queue_mismatch_retries", st.mismatchRetries)
	return attemptRefused, true
}

// returningAllowance is the queue a returning session accepts on its last
// cluster: what is left of the route's affinity wait, in ms (0 for any
// other request). The algorithm holds such a session that long for its
// cluster anyway; telling the pylon lets it admit the session to the
// engine's queue when another hub's request took the slot first, rather
// than refuse it and send it back through the hub's routing.
func (p *Proxy) returningAllowance(req *request, dec *routing.Decision) uint64 {
	wait := req.pass.Route.AffinityWait
	if wait <= 0 || req.sessionState() != routing.SessionReturning || dec.ClusterID != req.pass.Req.LastClusterID {
		return 0
	}
	left := wait - p.cfg.Clock.Since(req.start)
	if left < time.Millisecond {
		return 0
	}
	return uint64(left / time.Millisecond)
}

// maxRefusalBody bounds how much of a refusal's body is read for its
// actual_queue_ms: the pylon's problem document is a few hundred bytes.
const maxRefusalBody = 4 << 10

// refusedQueueMs reads actual_queue_ms, the pylon's own queue estimate,
// from a queue_estimate_mismatch refusal's JSON body; 0 when it is absent
// or unreadable (the backend is still marked full). The bytes read are put
// back in front of the body, so a refusal passed through to the client is
// unchanged.
func refusedQueueMs(resp *http.Response) uint64 {
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil {
		return 0
	}
	var body struct {
		ActualQueueMs uint64 `json:"actual_queue_ms"`
	}
	if json.Unmarshal(head, &body) != nil {
		return 0
	}
	return body.ActualQueueMs
}

// writeAnswer copies the upstream answer to the client. The backend's
// identity goes into response headers, so a value that is not a valid
// header value is a 500 instead. A body that breaks after the head aborts
// the client's stream.
func (p *Proxy) writeAnswer(w http.ResponseWriter, r *http.Request, req *request, st *loop, clusterID string, b state.Backend,
	resp *http.Response) attemptResult {
	if !httpguts.ValidHeaderFieldValue(b.ID) || !httpguts.ValidHeaderFieldValue(b.URL) || !httpguts.ValidHeaderFieldValue(clusterID) {
		_ = resp.Body.Close()
		p.cfg.Log.Error("backend identity is not a valid header value", "request_id", req.pass.Req.ID,
			"inference_server_id", b.ID, "cluster_id", clusterID)
		openai.WriteError(w, openai.Internal("the serving backend cannot be named in a response header"))
		p.done(req, b.ID, http.StatusInternalServerError)
		return attemptDone
	}
	p.countEscape(req, st, clusterID, resp.StatusCode)
	req.served = clusterID
	err := p.copyResponse(w, resp, clusterID, b, req.sessionState())
	p.done(req, b.ID, resp.StatusCode)
	expired := err != nil && p.pastDeadline(req)
	switch {
	case r.Context().Err() != nil || expired:
		st.report(breaker.Ignored)
	case err != nil:
		st.report(breaker.Failure)
	default:
		st.report(breaker.Success)
	}
	if expired {
		p.logDeadline(req, b.ID, stageStreaming)
	}
	if err != nil && (r.Context().Err() == nil || expired) {
		// The upstream stream broke after the head, or the deadline cut
		// it: abort the client's stream so that it reads as truncated, not
		// complete, as httputil.ReverseProxy does
		// (docs/design/hub-request.md#streaming).
		p.cfg.Log.Warn("upstream response body failed; aborting the client stream", "request_id", req.pass.Req.ID,
			"inference_server_id", b.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return attemptDone
}

// budgetSpent reports that the request may not retry: its budget header
// was 0, or the budget's deadline has passed.
func (p *Proxy) budgetSpent(req *request) bool {
	return req.noRetries || (!req.budgetUntil.IsZero() && !p.cfg.Clock.Now().Before(req.budgetUntil))
}

// retryable reports whether an answer may be retried
// (docs/design/hub-request.md#retries): a retryable status and the
// pylon's signal; an explicit false always blocks.
func (p *Proxy) retryable(resp *http.Response) bool {
	if !slices.Contains(p.cfg.RetryableStatusCodes, resp.StatusCode) {
		return false
	}
	v := strings.TrimSpace(headers.First(resp.Header, canonRetryable))
	if v == "" {
		return !p.cfg.RequirePylonRetrySignal
	}
	return strings.EqualFold(v, "true")
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }
