package server

import (
	"bytes"
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/answer"
	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// propagator carries W3C trace context and baggage from the client to the
// hub; it is the only client-supplied header family forwarded.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// exchange is one POST API request on its way through the gateway: what
// the steps of endpoint share, from the parsed body to the settlement.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	e     request.Endpoint
	st    *reqState
	start time.Time

	p     *Prepared
	model config.ModelConfig
	// deadline is when the request's end-to-end budget runs out (zero:
	// none); it ends the hub exchange, streams included.
	deadline time.Time
	// fn is the function_id metric label: the routing key, or "none".
	fn     string
	target lastcluster.Target

	res *ratelimit.Reservation
	// used is what the reservation settles at: the input estimate until
	// the hub answers, 0 when it refused, the reported total once usage
	// arrived.
	used int64
	span trace.Span

	// session is the session_state label of a 2xx hub answer, read from
	// its x-stargate-session-state.
	session string
	// outputSeen is set once the first event carrying output was timed.
	outputSeen bool

	// hubCtx is the hub exchange's context: its cause says which
	// deadline, if any, ended it.
	hubCtx context.Context
	// head is the response-head timer (nil without one); headState says
	// whether the head or the timer came first.
	head      clock.Timer
	headState atomic.Int32
	// abort is set when a stream was cut short: after the error event the
	// handler aborts the client's connection (see endpoint).
	abort bool
}

// The states of an exchange's response-head timer: the first of the head
// and the timer to leave headPending wins.
const (
	headPending int32 = iota
	headArrived
	headLate
)

// Causes of a hub exchange that the gateway ended; both answer 504.
var (
	errHubHeadTimeout    = errors.New("the hub sent no response head within --hub-response-header-timeout")
	errHubRequestTimeout = errors.New("the hub exchange outlasted --hub-request-timeout")
)

// endpoint serves one POST API: parse the body, admit the request, call
// the hub with the session's last cluster as a hint, and write the answer
// the client asked for. Each step answers the client itself when it ends
// the request.
func (s *Server) endpoint(e request.Endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x := exchange{s: s, w: w, r: r, e: e, st: state(r.Context()), start: s.d.Clock.Now()}
		if !x.parse() || !x.allowlisted() || !x.admit() {
			return
		}
		defer x.settle()
		ctx := x.startSpan()
		defer x.endSpan()
		x.p.Out.LastCluster = s.d.Tracker.Lookup(ctx, x.target)
		ctx, cancel := x.hubDeadlines(ctx)
		defer cancel()
		resp, ok := x.callHub(ctx)
		if !ok {
			return
		}
		defer func() { _ = resp.Body.Close() }()
		x.respond(ctx, resp)
		if x.abort {
			// The stream was cut short and the client has its error
			// event. Aborting the response (HTTP/2: RST_STREAM; HTTP/1.1:
			// the connection closes without the last chunk) also shows
			// the cut to clients and proxies that do not read SSE errors,
			// as the hub and the pylon show it on their hops. The
			// deferred settlement, span end and metrics still run.
			panic(http.ErrAbortHandler)
		}
	}
}

// parse reads the body and prepares the hub request; false means the
// client has its 4xx.
func (x *exchange) parse() bool {
	d := &x.s.d
	if !isJSONContentType(x.r.Header.Get("Content-Type")) {
		openai.WriteError(x.w, &openai.Error{Status: http.StatusUnsupportedMediaType, Type: openai.TypeInvalidRequest,
			Code: "unsupported_media_type", Message: "Content-Type must be application/json"})
		return false
	}
	body, oe := openai.ReadBody(x.w, x.r, d.MaxBodyBytes)
	if oe != nil {
		openai.WriteError(x.w, oe)
		return false
	}
	p, oe := Prepare(x.e, body, x.r.Header, x.st.requestID, Options{RoutingKeyPrefix: d.RoutingKeyPrefix, Models: d.Models,
		DefaultMaxOutputTokens: d.DefaultMaxOutputTokens, Limiting: d.Limiter != nil, PromptPrefix: d.PromptPrefix,
		Anchor: d.ConversationAnchor && d.Tracker.Enabled()})
	if oe != nil {
		openai.WriteError(x.w, oe)
		return false
	}
	x.s.setRoutingKey(x.st, p.RoutingKey)
	x.p, x.model, x.fn = p, d.Models.For(p.Model), functionLabel(p.RoutingKey)
	if b := requestBudget(x.r.Header, p.Req.Stream, d.RequestDeadline); b > 0 {
		x.deadline = x.start.Add(b)
	}
	x.target = lastcluster.Target{RoutingKey: p.RoutingKey, Model: p.Model, Session: p.Session, RequestID: x.st.requestID}
	return true
}

// isJSONContentType accepts JSON media types and an absent Content-Type
// (many clients post JSON without one); anything else is refused with 415
// rather than failing later as a misleading 400.
func isJSONContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "text/json")
}

// functionLabel is the function_id label of a routing key: "none" when
// there is none, so the series stays bounded and findable.
func functionLabel(routingKey string) string {
	if routingKey == "" {
		return "none"
	}
	return routingKey
}

// allowlisted applies the model URI allowlist (docs/gateway.md#model-config):
// a model whose config lists uris may be called only on those paths.
// Responses always refuse a miss; the other endpoints refuse it only with
// --model-uri-allowlist-enabled and otherwise log it. Every miss is
// counted. False means the client has its 400.
func (x *exchange) allowlisted() bool {
	path := x.e.Path()
	if x.model.AllowsPath(path) {
		return true
	}
	x.s.d.Metrics.AllowlistMisses.WithLabelValues(x.e.String()).Inc()
	if x.e == request.Responses || x.s.d.ModelURIAllowlist {
		openai.WriteError(x.w, openai.BadRequest("model", "model_not_supported", "model %q does not support %s", x.p.Model, path))
		return false
	}
	x.s.d.Log.Info("model called outside its uris", "request_id", x.st.requestID, "model", x.p.Model, "path", path, "mode", "log")
	return true
}

// admit reserves the request's tokens (input estimate plus output
// maximum) with the rate limiter and sets the x-ratelimit-* headers;
// false means the client has its 429, or its 503 when the limiter's store
// failed under fail-closed. Without a limiter every request is admitted.
func (x *exchange) admit() bool {
	x.used = x.p.Input
	lim := x.s.d.Limiter
	if lim == nil {
		return true
	}
	limits := ratelimit.Limits{RequestsPerMinute: x.model.RequestsPerMinute, TokensPerMinute: x.model.TokensPerMinute}
	res, dec := lim.Reserve(x.r.Context(), x.st.principal, x.p.Model, limits, x.p.Input+x.p.MaxOutput)
	setRateLimitHeaders(x.w.Header(), dec)
	if dec.Err != nil {
		openai.WriteError(x.w, openai.Unavailable("rate_limit_unavailable", "rate limiting is unavailable; retry later"))
		return false
	}
	if !dec.Allowed {
		openai.WriteError(x.w, openai.RateLimited("rate_limit_exceeded", "rate limit exceeded for this API key and model", retryAfterSeconds(dec.RetryAfter)))
		return false
	}
	x.res = res
	return true
}

// settle replaces the reservation by what the request used, exactly once
// whatever happened after admission (a nil reservation is a no-op).
func (x *exchange) settle() { x.res.Settle(x.r.Context(), x.used) }

// startSpan starts the request's server span as a child of the client's
// trace context (W3C traceparent/tracestate and baggage), which also
// continues to the hub. The attributes are listed in
// docs/gateway.md#tracing. With tracing off and no trace context in the
// request there is nothing to record or continue, so the request's context
// is used as it is: extracting nothing and starting a no-op span cost
// header lookups and a context per request for no effect.
func (x *exchange) startSpan() context.Context {
	if !x.s.tracing && !hasTraceContext(x.r.Header) {
		x.span = trace.SpanFromContext(x.r.Context())
		return x.r.Context()
	}
	path := x.e.Path()
	ctx := propagator.Extract(x.r.Context(), propagation.HeaderCarrier(x.r.Header))
	ctx, x.span = x.s.tracer.Start(ctx, x.r.Method+" "+path, trace.WithSpanKind(trace.SpanKindServer))
	if x.span.IsRecording() {
		x.span.SetAttributes(attribute.String("http.request.method", x.r.Method), attribute.String("url.path", path),
			attribute.String("http.request_id", x.st.requestID), attribute.String("gateway.routing_key", x.p.RoutingKey))
		if x.p.RoutingKey != "" {
			x.span.SetAttributes(attribute.String("stargate.routing_key", x.p.RoutingKey))
		}
	}
	return ctx
}

// The trace-context headers the propagator reads, as net/http keys them.
var (
	hTraceparent = http.CanonicalHeaderKey("traceparent")
	hBaggage     = http.CanonicalHeaderKey("baggage")
)

// hasTraceContext reports whether h carries trace context the propagator
// would continue: a traceparent (tracestate means nothing without one) or
// baggage.
func hasTraceContext(h http.Header) bool {
	return len(h[hTraceparent]) > 0 || len(h[hBaggage]) > 0
}

// endSpan records the status the client got and ends the server span; a
// stream that was cut short is an error whatever its status.
func (x *exchange) endSpan() {
	if sw, ok := x.w.(*statusWriter); ok && x.span.IsRecording() {
		code := sw.code()
		x.span.SetAttributes(attribute.Int("http.response.status_code", code))
		switch {
		case code >= 400:
			x.span.SetStatus(codes.Error, http.StatusText(code))
		case x.abort:
			x.span.SetStatus(codes.Error, "upstream stream cut short")
		}
	}
	x.span.End()
}

// hubDeadlines bounds the hub exchange on the injected clock. The
// response head must arrive within --hub-response-header-timeout, streams
// included, so a hung hub cannot hold its clients forever; a
// non-streaming exchange must also end within --hub-request-timeout. A
// stream's body is cut by neither (a long generation is not a failure),
// only by the request's own deadline, whose client has stopped reading
// by then. Each bound cancels the exchange with its own cause, which
// hubFailed and upstreamFailed turn into a 504 and a started stream into
// its error event. The returned func stops the timers.
func (x *exchange) hubDeadlines(ctx context.Context) (context.Context, func()) {
	d := &x.s.d
	whole := !x.p.Req.Stream && d.HubRequestTimeout > 0
	if d.HubResponseHeaderTimeout <= 0 && !whole && x.deadline.IsZero() {
		x.hubCtx = ctx
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	x.hubCtx = ctx
	if d.HubResponseHeaderTimeout > 0 {
		x.head = d.Clock.AfterFunc(d.HubResponseHeaderTimeout, func() {
			if x.headState.CompareAndSwap(headPending, headLate) {
				cancel(errHubHeadTimeout)
			}
		})
	}
	// The whole-exchange bound and the request's deadline end the same
	// thing, so one timer serves both: the earlier, with its own cause.
	var end time.Time
	var endCause error
	now := d.Clock.Now()
	if whole {
		end, endCause = now.Add(d.HubRequestTimeout), errHubRequestTimeout
	}
	if !x.deadline.IsZero() && (end.IsZero() || x.deadline.Before(end)) {
		end, endCause = x.deadline, errDeadlineExceeded
	}
	var endTimer clock.Timer
	if !end.IsZero() {
		endTimer = d.Clock.AfterFunc(end.Sub(now), func() { cancel(endCause) })
	}
	return ctx, func() {
		for _, t := range [...]clock.Timer{x.head, endTimer} {
			if t != nil {
				t.Stop()
			}
		}
		cancel(nil)
	}
}

// headCame stops the response-head timer once the hub's head (or a
// transport error) is back. False means the timer won the race: the
// exchange is being cancelled and must be answered as a head timeout even
// if a head did arrive in the same instant.
func (x *exchange) headCame() bool {
	if x.head == nil {
		return true
	}
	x.head.Stop()
	return x.headState.CompareAndSwap(headPending, headArrived)
}

// timedOut is the bound that ended the hub exchange, nil when none did. A
// failure seen once the request's deadline has passed on the clock is the
// deadline's too, even before the gateway's own timer has fired (a busy
// machine fires timers late): the hub's deadline falls after the
// gateway's, so a hub that ended the request for its deadline is seen
// only then.
func (x *exchange) timedOut() error {
	if x.hubCtx == nil {
		return nil
	}
	if c := context.Cause(x.hubCtx); errors.Is(c, errHubHeadTimeout) || errors.Is(c, errHubRequestTimeout) || errors.Is(c, errDeadlineExceeded) {
		return c
	}
	if !x.deadline.IsZero() && !x.s.d.Clock.Now().Before(x.deadline) {
		return errDeadlineExceeded
	}
	return nil
}

// writeTimeout answers 504 for an exchange the bound cause ended:
// deadline_exceeded for the request's own deadline, upstream_timeout for
// the hub timeouts.
func writeTimeout(w http.ResponseWriter, cause error) {
	if errors.Is(cause, errDeadlineExceeded) {
		openai.WriteError(w, &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer, Code: headers.ErrorCodeDeadlineExceeded,
			Message: "the request's deadline passed before the answer was complete"})
		return
	}
	openai.WriteError(w, &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer, Code: "upstream_timeout", Message: "the hub did not answer in time"})
}

// callHub sends the prepared request to a hub, and to another when the
// exchange fails before the response head (roundTrip), and counts the
// client request's final hub outcome; ok is false when there is no hub
// answer to write (the client has its error, or has gone). The deadline
// headers are recomputed for each attempt, and the response-head timer
// runs across the attempts: it bounds the client's wait, not one hub's.
func (x *exchange) callHub(ctx context.Context) (*http.Response, bool) {
	if !x.sendDeadline() {
		return nil, false
	}
	first := true
	newReq := func(hub *hubclient.Hub) (*http.Request, error) {
		if !first {
			x.refreshDeadline()
		}
		first = false
		hreq, err := x.s.d.Hub.NewRequest(ctx, hub, http.MethodPost, x.e.Path(), x.p.Out.Header(), x.p.Body)
		if err != nil {
			return nil, err
		}
		propagator.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
		return hreq, nil
	}
	resp, err := x.s.roundTrip(ctx, x.st.requestID, x.span, newReq, x.deadlineLeft)
	var be *buildError
	switch {
	case errors.Is(err, errNoHub):
		x.s.d.Log.Warn("no hub to send the request to", "request_id", x.st.requestID, "err", err)
		writeNoHub(x.w)
		return nil, false
	case errors.As(err, &be):
		x.s.d.Log.Error("building hub request", "request_id", x.st.requestID, "err", be.err)
		openai.WriteError(x.w, openai.Internal("gateway cannot reach the hub"))
		return nil, false
	}
	if !x.headCame() {
		if err == nil {
			_ = resp.Body.Close()
		}
		err = errHubHeadTimeout
	}
	if err != nil {
		x.upstreamMetric("error", "error")
		x.hubFailed(err)
		return nil, false
	}
	result := "success"
	if resp.StatusCode >= 400 {
		result = "error"
	}
	x.upstreamMetric(result, strconv.Itoa(resp.StatusCode))
	return resp, true
}

// hubFailed answers a transport failure: 504 when a hub deadline ended
// the exchange, 502 otherwise, and nothing when the client went away
// (nobody is left to answer).
func (x *exchange) hubFailed(err error) {
	if x.r.Context().Err() != nil {
		return
	}
	// The head timer may have won its race with the head before its
	// callback cancelled the exchange, so err is checked as well.
	te := x.timedOut()
	if te == nil && errors.Is(err, errHubHeadTimeout) {
		te = err
	}
	if te != nil {
		x.s.d.Log.Warn("hub request timed out", "request_id", x.st.requestID, "err", te)
		writeTimeout(x.w, te)
		return
	}
	x.s.d.Log.Warn("hub request failed", "request_id", x.st.requestID, "err", err)
	openai.WriteError(x.w, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "upstream_unavailable", Message: "the hub is unreachable"})
}

func (x *exchange) upstreamMetric(result, status string) {
	m := x.s.d.Metrics
	m.UpstreamRequests.WithLabelValues("hub", result, status, x.fn).Inc()
	m.UpstreamDuration.WithLabelValues("hub", result, status, x.fn).Observe(x.s.d.Clock.Since(x.start).Seconds())
}

// respond writes the hub's answer. The session id is echoed so the client
// can send it back. A non-2xx passes through and consumes no tokens. A 2xx
// is counted under its session class, first records the serving cluster,
// then becomes what the client asked for, and its usage is counted.
func (x *exchange) respond(ctx context.Context, resp *http.Response) {
	if x.p.Session.ID != "" {
		setHeader(x.w.Header(), hMultiTurnSessionID, x.p.Session.ID)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		x.used = 0
		passHubError(x.w, resp)
		return
	}
	x.session = metrics.SessionState(headers.First(resp.Header, canonicalSessionState))
	x.s.d.Metrics.SessionRequests.WithLabelValues(x.e.String(), x.session, x.fn).Inc()
	x.rememberCluster(ctx, resp)
	x.recordUsage(x.writeAnswer(resp))
}

// canonicalSessionState is x-stargate-session-state as net/http stores it.
var canonicalSessionState = http.CanonicalHeaderKey(headers.StargateSessionState)

// rememberCluster records the serving cluster as soon as the 2xx headers
// arrive, before a byte is written: the session's cache is warm there even
// if the stream fails later
// (docs/design/sessions.md#last-cluster-tracking).
func (x *exchange) rememberCluster(ctx context.Context, resp *http.Response) {
	ids := resp.Header[hClusterID]
	var id string
	if len(ids) > 0 {
		id = ids[0]
	}
	x.s.d.Tracker.Remember(ctx, x.target, id, len(ids) > 0)
	x.hintResult(id)
}

// hintResult counts, for a request that carried a last-cluster hint,
// whether the hub served it on the hinted cluster (followed) or elsewhere
// (moved: another cluster, or no cluster id at all). servedBy is the
// answer's x-stargate-cluster-id, which the HTTP client has trimmed like
// the hint the tracker parsed.
func (x *exchange) hintResult(servedBy string) {
	hint := x.p.Out.LastCluster
	if hint == "" {
		return
	}
	result := metrics.HintMoved
	if servedBy == hint {
		result = metrics.HintFollowed
	}
	x.s.d.Metrics.HintResults.WithLabelValues(result).Inc()
}

// sawOutput times the first event carrying output, once per answer:
// request start to that event, on the session first-token histogram for
// every answer and on the stream first-token histogram for a streamed one
// (its name says stream, and its dashboards read it so).
func (x *exchange) sawOutput(streamed bool) {
	if x.outputSeen {
		return
	}
	x.outputSeen = true
	m, ep, d := x.s.d.Metrics, x.e.String(), x.s.d.Clock.Since(x.start).Seconds()
	if streamed {
		m.FirstToken.WithLabelValues(ep, x.fn).Observe(d)
	}
	m.SessionFirstToken.WithLabelValues(ep, x.session, x.fn).Observe(d)
}

// checkResponsesOutput times the first output of a Responses answer the
// gateway aggregates. Only a response.output_text.delta event carries
// output, and its data always holds that quoted type name, so a byte
// search skips parsing the events before it (created, in_progress,
// output_item.added, ...), which would cost allocations on every request.
func (x *exchange) checkResponsesOutput(data []byte) {
	if !x.outputSeen && bytes.Contains(data, outputTextDelta) && answer.Inspect(data).Output {
		x.sawOutput(false)
	}
}

// outputTextDelta is the quoted type of the one Responses event that
// carries generated text.
var outputTextDelta = []byte(`"response.output_text.delta"`)

// writeAnswer turns a 2xx hub answer into what the client asked for and
// returns the usage it carried, nil when none.
func (x *exchange) writeAnswer(resp *http.Response) *answer.Usage {
	upstreamJSON := !headers.IsStreamingContentType(resp.Header.Get("Content-Type"))
	switch {
	case upstreamJSON:
		// Some engines ignore stream:true and answer JSON: pass it on,
		// to a streaming client too (it has no events to end early).
		return x.passJSON(resp)
	case x.p.Req.Stream:
		return x.streamEvents(resp)
	case x.e == request.Chat:
		return x.aggregateChat(resp)
	case x.e == request.Responses:
		return x.writeTerminalResponse(resp)
	default:
		return x.passJSON(resp)
	}
}

// recordUsage counts the reported tokens (also per session class),
// settles the reservation against their total, and observes the provider
// times. Per-phase times exist only when the backend reports them in its
// usage; total is always the gateway's wall time of the exchange, one
// clock for every backend.
func (x *exchange) recordUsage(u *answer.Usage) {
	m, ep, stream := x.s.d.Metrics, x.e.String(), strconv.FormatBool(x.p.Req.Stream)
	if u != nil {
		x.used = u.Total
		m.Tokens.WithLabelValues(ep, "prompt", stream, x.fn).Add(tokenCount(u.Prompt))
		m.Tokens.WithLabelValues(ep, "completion", stream, x.fn).Add(tokenCount(u.Completion))
		m.Tokens.WithLabelValues(ep, "total", stream, x.fn).Add(tokenCount(u.Total))
		m.Tokens.WithLabelValues(ep, "cached", stream, x.fn).Add(tokenCount(u.Cached))
		x.sessionTokens(u)
		for _, ph := range u.Phases {
			m.ProviderTime.WithLabelValues(ep, ph.Phase, stream, x.fn).Observe(ph.Seconds)
		}
	}
	m.ProviderTime.WithLabelValues(ep, "total", stream, x.fn).Observe(x.s.d.Clock.Since(x.start).Seconds())
}

// sessionTokens splits the usage's prompt tokens by the session class into
// cache hits (the cached tokens) and misses (the rest). Cached tokens are
// capped at the prompt tokens, so a usage that reports more cached than
// prompt tokens cannot make the miss count shrink.
func (x *exchange) sessionTokens(u *answer.Usage) {
	prompt := max(u.Prompt, 0)
	hit := min(max(u.Cached, 0), prompt)
	c := x.s.d.Metrics.SessionPromptTokens
	c.WithLabelValues(x.session, metrics.CacheHit, x.fn).Add(float64(hit))
	c.WithLabelValues(x.session, metrics.CacheMiss, x.fn).Add(float64(prompt - hit))
}

// tokenCount is a usage count as a counter increment: a negative count (a
// broken backend's usage) adds nothing, since a Prometheus counter panics
// on a negative increment.
func tokenCount(n int64) float64 { return float64(max(n, 0)) }
