package engineproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/jsonscan"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/roundtrip"
	"github.com/stargate-router/stargate/pkg/stackgrow"
)

// Endpoint is the class of a request's path, which decides how it is
// checked and observed.
type Endpoint string

// Endpoint classes the observer distinguishes.
const (
	EndpointChat       Endpoint = "chat"       // POST /v1/chat/completions
	EndpointResponses  Endpoint = "responses"  // POST /v1/responses
	EndpointEmbeddings Endpoint = "embeddings" // POST /v1/embeddings
	EndpointOther      Endpoint = "other"      // any other forwarded path
)

// RequestInfo is what the tracker learns about a request when it arrives.
type RequestInfo struct {
	ID          string
	Model       string
	Endpoint    Endpoint
	InputTokens uint64
	Priority    uint32
	RoutingKey  string
	// Aggregated is true when the caller turns the answer's events into
	// one body (x-stargate-aggregated: true): after the first event
	// carrying text, events need not be flushed one read at a time.
	Aggregated bool
}

// Observation follows one request through its phases
// (docs/design/statistics.md#request-observation).
type Observation interface {
	// Headers marks the upstream response head (-> InputProcessing).
	Headers(status int)
	// Output reports one output event's payload or a non-SSE body
	// (-> OutputGeneration on the first one). chunk is valid only during
	// the call: it may be a slice of the proxy's read buffer.
	Output(chunk []byte)
	// Complete, Fail and Cancel end the observation; the first call wins.
	Complete()
	Fail()
	Cancel()
}

// EngineObservation is an Observation that learns which engine each
// attempt of its request goes to: the engine's index in the configured
// list, reported before the request is sent (again on a retry), so the
// engine's statistics for the request id are attributed to that engine
// only.
type EngineObservation interface {
	Observation
	Dispatched(engine int)
}

// Tracker is the stats collector as the proxy uses it.
type Tracker interface {
	// Published reports whether model has a published generation.
	Published(model string) bool
	// Begin enters a request into the live projection as Pending.
	Begin(info RequestInfo) Observation
	// LocalQueueMs is the local queue estimate at priority p, leaving out
	// self's own prompt work: Begin already counted self as Pending, and a
	// request is not queued behind itself.
	LocalQueueMs(model string, p uint32, self Observation) (uint64, bool)
}

// outcome is how a request served over the tunnel ended. It picks the
// observation's terminal call and is the status label of
// pylon_requests_total and pylon_request_duration_seconds.
type outcome uint8

const (
	// outcomeCancelled: the hub went away, or writing back to it failed,
	// before the answer was complete. It is the zero value, so a request
	// that stops before deciding counts as cancelled.
	outcomeCancelled outcome = iota
	// outcomeComplete: a 2xx answer relayed to its end with output.
	outcomeComplete
	// outcomeFailed: refused, unreachable engine, non-2xx answer, no
	// output, or cut short by the proxy.
	outcomeFailed
)

// String returns the metric label of o.
func (o outcome) String() string {
	switch o {
	case outcomeComplete:
		return "complete"
	case outcomeFailed:
		return "failed"
	}
	return "cancelled"
}

// end makes the observation's terminal call for o.
func (o outcome) end(obs Observation) {
	switch o {
	case outcomeComplete:
		obs.Complete()
	case outcomeFailed:
		obs.Fail()
	default:
		obs.Cancel()
	}
}

// Proxy serves the hub's requests. Build it with New.
type Proxy struct {
	cfg     Config
	tracker Tracker
	metrics *Metrics
	pool    *pool
	// transport is cfg.Client's: requests to engines go through it
	// directly (send), so redirects are relayed, not followed.
	transport http.RoundTripper

	healthMu   sync.Mutex
	healthPath string // the first health path that answered, cached

	// notForwarded and notReturned are the request and response headers
	// the proxy drops, canonical, built once (they include the configured
	// upstream retry header).
	notForwarded, notReturned headers.Set
}

// New returns a proxy; cfg must be valid.
func New(cfg Config, tracker Tracker, m *Metrics) *Proxy {
	cfg.UpstreamBaseURL = strings.TrimRight(cfg.UpstreamBaseURL, "/")
	transport := http.DefaultTransport
	if cfg.Client != nil && cfg.Client.Transport != nil {
		transport = cfg.Client.Transport
	}
	return &Proxy{cfg: cfg, tracker: tracker, metrics: m, pool: newPool(&cfg, m), transport: transport,
		notForwarded: headers.NewSet(append([]string{"Host", headers.TunnelMethod, headers.TunnelPath, headers.StargateExpectedQueueMs, headers.StargateDeadlineMs,
			headers.StargateAggregated, headers.StargateUpstreamRetryable, headers.StargateRetryable, headers.StargateRetryReason, headers.StargateRetryAfterMs,
			cfg.UpstreamRetryHeader, headers.DynamoRequestPriority, headers.DynamoRequestStrictPriority}, headers.HopByHop...)...),
		notReturned: headers.NewSet(append([]string{"Content-Length", headers.StargateUpstreamRetryable, headers.StargateRetryable,
			headers.StargateRetryReason, headers.StargateRetryAfterMs, cfg.UpstreamRetryHeader}, headers.HopByHop...)...),
	}
}

// Headers the proxy reads or sets on every request, in canonical form:
// Header.Get and Set canonicalise their key, allocating a new string for
// these lower-case names on every call.
var (
	canonRequestID            = http.CanonicalHeaderKey(headers.RequestID)
	canonModel                = http.CanonicalHeaderKey(headers.Model)
	canonRoutingKey           = http.CanonicalHeaderKey(headers.RoutingKey)
	canonDynamoPriority       = http.CanonicalHeaderKey(headers.DynamoRequestPriority)
	canonDynamoStrictPriority = http.CanonicalHeaderKey(headers.DynamoRequestStrictPriority)
)

var _ http.Handler = (*Proxy)(nil)

// ServeHTTP handles one tunnel stream.
func (px *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == protocol.HealthPath && r.Method == http.MethodGet {
		px.serveHealth(w, r)
		return
	}
	// The tunnel's HTTP/2 server runs each stream on a new goroutine, and
	// every inference request outgrew its first stack inside the engine
	// transport's round trip, twenty frames down (5.9 % of the pylon's
	// CPU under the chain): grown here, four frames down, the copy is
	// short, and the stack ends at the 8 KiB the request reached anyway.
	stackgrow.To8KiB()
	px.serveInference(w, r)
}

// problem writes an RFC 7807 body, the error shape upstream Stargate's
// pylon uses on this hop.
func problem(w http.ResponseWriter, status int, detail string, extra map[string]any) {
	body := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func endpointOf(path string) Endpoint {
	switch path {
	case "/v1/chat/completions":
		return EndpointChat
	case "/v1/responses":
		return EndpointResponses
	case "/v1/embeddings":
		return EndpointEmbeddings
	default:
		return EndpointOther
	}
}

// requestHeaders reads and validates the headers every request must carry:
// x-request-id, x-model and x-input-tokens, with x-priority and
// x-routing-key optional. It returns the problem detail of a bad request.
func requestHeaders(h http.Header) (RequestInfo, string) {
	var info RequestInfo
	info.ID = strings.TrimSpace(headers.First(h, canonRequestID))
	if info.ID == "" {
		return info, "missing required " + headers.RequestID + " header"
	}
	info.Model = strings.TrimSpace(headers.First(h, canonModel))
	if info.Model == "" {
		return info, "missing required " + headers.Model + " header"
	}
	tok, present, err := headers.GetUint64(h, headers.InputTokens)
	if !present {
		return info, "missing required " + headers.InputTokens + " header"
	}
	if err != nil {
		return info, "invalid " + headers.InputTokens + " header"
	}
	info.InputTokens = tok
	p, present, err := headers.GetUint32(h, headers.Priority)
	if err != nil {
		return info, "invalid " + headers.Priority + " header"
	}
	if present {
		info.Priority = p
	}
	info.RoutingKey = strings.TrimSpace(headers.First(h, canonRoutingKey))
	// A hint, not a command: a value that is not true (false, malformed,
	// absent) keeps every event flushed, which is never wrong.
	info.Aggregated, _, _ = headers.GetBool(h, headers.StargateAggregated)
	return info, ""
}

// serveInference runs the request path of docs/pylon.md#request-path for
// one request and records how it ended.
func (px *Proxy) serveInference(w http.ResponseWriter, r *http.Request) {
	start := px.cfg.Clock.Now()
	info, deadline, ok := px.accept(w, r, start)
	if !ok {
		return
	}
	if !deadline.IsZero() {
		// Everything from here runs on a context that ends at the
		// deadline, the engine request included.
		var stop func()
		r, stop = px.withDeadline(r, deadline)
		defer stop()
	}
	obs := px.tracker.Begin(info)
	out, abort := outcomeCancelled, false
	defer func() {
		out.end(obs)
		px.metrics.finished(info, out, px.cfg.Clock.Since(start))
		if abort {
			// The response was cut short after (or instead of) its head:
			// reset the stream so the hub cannot mistake a truncated
			// body for a complete one.
			panic(http.ErrAbortHandler)
		}
	}()
	out, abort = px.handle(w, r, info, obs, start)
}

// accept validates the request headers, that the request's deadline (zero:
// none) has not passed and that the model is published, answering the
// refusal itself; nothing is observed before this passes.
func (px *Proxy) accept(w http.ResponseWriter, r *http.Request, start time.Time) (RequestInfo, time.Time, bool) {
	info, bad := requestHeaders(r.Header)
	if bad != "" {
		problem(w, http.StatusBadRequest, bad, nil)
		return info, time.Time{}, false
	}
	deadline, bad := readDeadline(r.Header, start)
	if bad != "" {
		problem(w, http.StatusBadRequest, bad, nil)
		return info, time.Time{}, false
	}
	info.Endpoint = endpointOf(r.URL.Path)
	if !deadline.IsZero() && !deadline.After(start) {
		px.deadlineExceeded(w, info, stageReceived)
		return info, time.Time{}, false
	}
	if !px.tracker.Published(info.Model) {
		px.retryable(w, http.StatusServiceUnavailable, headers.ReasonModelGenerationUnavailable, 0,
			fmt.Sprintf("model %q has no published generation on this pylon", info.Model))
		return info, time.Time{}, false
	}
	return info, deadline, true
}

// handle reads and checks the body, runs queue admission and forwards the
// request; it returns the outcome, and abort when the response must be
// reset rather than ended cleanly.
func (px *Proxy) handle(w http.ResponseWriter, r *http.Request, info RequestInfo, obs Observation, start time.Time) (outcome, bool) {
	body, err := readBody(http.MaxBytesReader(w, r.Body, px.cfg.MaxBodyBytes), r.ContentLength, px.cfg.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "request body exceeds 64 MiB", nil)
		} else if r.Context().Err() == nil {
			problem(w, http.StatusBadRequest, "reading request body: "+err.Error(), nil)
		}
		return outcomeFailed, false
	}
	defer body.release()
	if detail := checkBody(info.Endpoint, r.URL.Path, body.b); detail != "" {
		problem(w, http.StatusBadRequest, detail, nil)
		return outcomeFailed, false
	}
	if !px.admit(w, r, info, obs) {
		return outcomeFailed, false
	}
	return px.forward(w, r, info, body, obs, start)
}

// checkBody enforces a JSON body, and stream:true on chat and responses:
// the pylon observes those requests through their event streams (first
// output, token counts), so an unstreamed answer would go unmeasured. The
// gateway always asks for a stream and aggregates it for clients that did
// not.
func checkBody(endpoint Endpoint, path string, body []byte) string {
	const notJSON = "request body must be a JSON document"
	if endpoint != EndpointChat && endpoint != EndpointResponses {
		if !jsonscan.Valid(body) {
			return notJSON
		}
		return ""
	}
	var st streamMember
	valid, plain := jsonscan.ValidMembers(body, st.member)
	if !valid {
		return notJSON
	}
	if !st.streams(body, plain) {
		return path + " requests must set stream=true"
	}
	return ""
}

// streamMember reads a body's stream member as decoding it into
// struct{ Stream *bool `json:"stream"` } would: the last top-level member
// named stream (in any case) decides, and one of another kind than a
// boolean or null fails the decoding. It is read in the pass that
// validates the body, not in a second pass of encoding/json over a prompt
// that may be megabytes long.
type streamMember struct {
	set, wrongKind, nonASCII bool
}

func (s *streamMember) member(k, v []byte) {
	switch {
	case !jsonscan.ASCII(k):
		s.nonASCII = true
	case !jsonscan.KeyIs(k, "stream"):
	case string(v) == "true":
		s.set = true
	case string(v) == "false" || string(v) == "null":
		s.set = false
	default:
		s.wrongKind = true
	}
}

// streams reports whether the valid body sets stream to true. A key that
// is escaped or not ASCII (encoding/json folds some non-ASCII letters onto
// ASCII ones) leaves the answer to encoding/json.
func (s *streamMember) streams(body []byte, plain bool) bool {
	if !plain || s.nonASCII {
		if body[jsonscan.SkipSpace(body, 0)] != '{' {
			return false // no object, no stream member
		}
		var peek struct {
			Stream *bool `json:"stream"`
		}
		return json.Unmarshal(body, &peek) == nil && peek.Stream != nil && *peek.Stream
	}
	return s.set && !s.wrongKind
}

// admissionResult is the result label of
// pylon_queue_admission_decisions_total.
type admissionResult string

// Queue admission decisions.
const (
	admissionDisabled   admissionResult = "disabled"               // the check is off
	admissionNoEstimate admissionResult = "missing_estimate"       // no valid x-stargate-expected-queue-ms
	admissionNoLocal    admissionResult = "unknown_local_estimate" // no generation or no valid input TPS here
	admissionAccepted   admissionResult = "accepted"
	admissionRejected   admissionResult = "rejected"
)

// admit runs the queue admission check
// (docs/design/statistics.md#queue-admission) and answers the 429 itself
// when the request is refused.
func (px *Proxy) admit(w http.ResponseWriter, r *http.Request, info RequestInfo, obs Observation) bool {
	if !px.cfg.QueueMismatchEnabled {
		px.metrics.admission(px.cfg.InferenceServerID, info.Model, admissionDisabled)
		return true
	}
	expected, present, err := headers.GetUint64(r.Header, headers.StargateExpectedQueueMs)
	if !present || err != nil {
		px.metrics.admission(px.cfg.InferenceServerID, info.Model, admissionNoEstimate)
		return true
	}
	actual, ok := px.tracker.LocalQueueMs(info.Model, info.Priority, obs)
	if !ok {
		px.metrics.admission(px.cfg.InferenceServerID, info.Model, admissionNoLocal)
		return true
	}
	threshold := admissionThreshold(expected, uint64(px.cfg.QueueMismatchMinDelta/time.Millisecond), px.cfg.QueueMismatchToleranceFactor)
	px.metrics.admissionMs(float64(expected), float64(actual))
	if actual <= threshold {
		px.metrics.admission(px.cfg.InferenceServerID, info.Model, admissionAccepted)
		return true
	}
	px.metrics.admission(px.cfg.InferenceServerID, info.Model, admissionRejected)
	px.refuseQueueMismatch(w, expected, actual, threshold)
	return false
}

// refuseQueueMismatch answers the 429 that tells the hub to try a sibling
// backend: its estimate of the queue here was too low.
func (px *Proxy) refuseQueueMismatch(w http.ResponseWriter, expected, actual, threshold uint64) {
	px.metrics.retryable(px.cfg.InferenceServerID, headers.ReasonQueueEstimateMismatch, http.StatusTooManyRequests)
	h := w.Header()
	h.Set(headers.StargateRetryable, "true")
	h.Set(headers.StargateRetryReason, headers.ReasonQueueEstimateMismatch)
	if px.cfg.QueueMismatchRetryAfter > 0 {
		h.Set(headers.StargateRetryAfterMs, strconv.FormatInt(px.cfg.QueueMismatchRetryAfter.Milliseconds(), 10))
	}
	problem(w, http.StatusTooManyRequests, "local queue estimate exceeded Stargate routing estimate", map[string]any{
		"reason": headers.ReasonQueueEstimateMismatch, "expected_queue_ms": expected, "actual_queue_ms": actual, "threshold_ms": threshold,
	})
}

// admissionThreshold is max(expected + delta, ceil(expected x factor)),
// saturating; a non-finite or non-positive factor counts as 1.0.
func admissionThreshold(expected, deltaMs uint64, factor float64) uint64 {
	if !(factor > 0) || math.IsInf(factor, 1) {
		factor = 1
	}
	a := expected + deltaMs
	if a < expected {
		a = ^uint64(0)
	}
	scaled := float64(expected) * factor
	var b uint64
	if scaled >= float64(^uint64(0)) {
		b = ^uint64(0)
	} else {
		b = uint64(scaled)
		if float64(b) < scaled {
			b++
		}
	}
	return max(a, b)
}

// retryable answers status with the retry signal the hub acts on.
func (px *Proxy) retryable(w http.ResponseWriter, status int, reason string, retryAfter time.Duration, detail string) {
	h := w.Header()
	h.Set(headers.StargateRetryable, "true")
	h.Set(headers.StargateRetryReason, reason)
	if retryAfter > 0 {
		h.Set(headers.StargateRetryAfterMs, strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	px.metrics.retryable(px.cfg.InferenceServerID, reason, status)
	problem(w, status, detail, map[string]any{"reason": reason})
}

// upstreamRequestHeaders makes the hub's request head, in place, the
// header set sent to the engine: minus hop-by-hop, tunnel,
// routing-estimate, retry-control and inbound dynamo priority headers,
// plus (backend dynamo) the priority headers the pylon alone writes. In
// place, because a new map per request was the largest allocation of the
// pylon's own code: the head is the handler's (the HTTP/2 server makes
// one per request), every header the proxy reads has been read before the
// request goes upstream, and every attempt sends the same set, which the
// transports only read. h's keys must be canonical, as they are in any
// header net/http parsed.
func (px *Proxy) upstreamRequestHeaders(h http.Header, prio uint32) http.Header {
	for k := range h {
		if _, ok := px.notForwarded[k]; ok {
			delete(h, k)
		}
	}
	if strings.EqualFold(px.cfg.UpstreamBackend, "dynamo") {
		rank := uint32(0)
		if px.cfg.PriorityCeiling > prio {
			rank = px.cfg.PriorityCeiling - prio
		}
		h[canonDynamoPriority] = []string{strconv.FormatUint(uint64(rank), 10)}
		h[canonDynamoStrictPriority] = []string{"0"}
	}
	return h
}

// forward sends the request to an engine and returns its answer to the
// hub; it returns the outcome, and abort when the response must be reset
// rather than ended cleanly.
func (px *Proxy) forward(w http.ResponseWriter, r *http.Request, info RequestInfo, body requestBody, obs Observation, start time.Time) (outcome, bool) {
	if deadlinePassed(r.Context()) {
		// Reading the body and admission used what was left: the
		// engine is not called for an answer nobody will read.
		px.deadlineExceeded(w, info, stageReceived)
		return outcomeCancelled, false
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	resp, e, gotConn, err := px.dispatch(ctx, r, info, body, obs)
	defer px.pool.release(e)
	if err != nil {
		return px.sendFailed(w, r, info, e, gotConn, err)
	}
	px.pool.succeeded(e)
	px.metrics.engineRequest(e.label, statusClass(resp.StatusCode))
	defer func() { _ = resp.Body.Close() }()
	return px.respond(ctx, cancel, w, r, resp, info, obs, start)
}

// dispatch sends the request to the engine the pool picks for its
// x-cache-affinity-key (pool.acquire). With several engines, an attempt
// that fails before a response head marks its engine down and is retried
// once on another eligible engine, never the failed one (the body is
// buffered, so it replays); nothing is retried once a head has arrived.
// The returned engine is counted outstanding until the caller releases it.
func (px *Proxy) dispatch(ctx context.Context, r *http.Request, info RequestInfo, body requestBody, obs Observation) (*http.Response, *engine, bool, error) {
	key, _ := headers.GetText(r.Header, headers.CacheAffinityKey)
	hd := px.upstreamRequestHeaders(r.Header, info.Priority)
	e := px.pool.acquire(key, nil, false)
	resp, gotConn, err := px.send(ctx, r, hd, body, obs, e)
	var be buildError
	if err == nil || errors.As(err, &be) || r.Context().Err() != nil {
		return resp, e, gotConn, err
	}
	px.pool.failed(e)
	alt := px.pool.acquire(key, e, true)
	if alt == nil {
		return resp, e, gotConn, err
	}
	px.cfg.Log.Warn("engine failed before answering; retrying on another engine", "request_id", info.ID, "model", info.Model,
		"engine", e.label, "retry_engine", alt.label, "err", err)
	px.metrics.engineRequest(e.label, engineStatusRetried)
	px.pool.release(e)
	resp, gotConn, err = px.send(ctx, r, hd, body, obs, alt)
	if err != nil && r.Context().Err() == nil {
		px.pool.failed(alt)
	}
	return resp, alt, gotConn, err
}

// sendFailed answers a request whose last attempt on engine e got no
// response head.
func (px *Proxy) sendFailed(w http.ResponseWriter, r *http.Request, info RequestInfo, e *engine, gotConn bool, err error) (outcome, bool) {
	var be buildError
	if errors.As(err, &be) {
		problem(w, http.StatusBadGateway, "building upstream request: "+be.err.Error(), nil)
		return outcomeFailed, false
	}
	if deadlinePassed(r.Context()) {
		px.metrics.engineRequest(e.label, engineStatusCancelled)
		px.deadlineExceeded(w, info, stageEngine)
		return outcomeCancelled, false
	}
	if r.Context().Err() != nil {
		px.metrics.engineRequest(e.label, engineStatusCancelled)
		return outcomeCancelled, false
	}
	px.metrics.engineRequest(e.label, engineStatusError)
	if !isConnectFailure(err, gotConn) {
		// The request may have reached the engine, so it is not
		// answered as unreachable: the stream is reset instead.
		px.cfg.Log.Warn("upstream request failed after connecting", "request_id", info.ID, "model", info.Model, "err", err)
		return outcomeFailed, true
	}
	px.cfg.Log.Warn("upstream request failed", "request_id", info.ID, "model", info.Model, "err", err)
	if px.cfg.LocalConnectFailuresRetryable {
		px.retryable(w, http.StatusServiceUnavailable, headers.ReasonLocalConnectFailure, 0, "engine unreachable: "+err.Error())
	} else {
		px.metrics.nonretryable(px.cfg.InferenceServerID, headers.ReasonLocalConnectFailure)
		w.Header().Set(headers.StargateRetryReason, headers.ReasonLocalConnectFailure)
		problem(w, http.StatusServiceUnavailable, "engine unreachable: "+err.Error(), map[string]any{"reason": headers.ReasonLocalConnectFailure})
	}
	return outcomeFailed, false
}

// respond passes the engine's response head on and then its body: an event
// stream on chat and responses as its events complete, observed event by
// event, anything else as it arrives.
func (px *Proxy) respond(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request,
	resp *http.Response, info RequestInfo, obs Observation, start time.Time) (outcome, bool) {
	obs.Headers(resp.StatusCode)
	px.metrics.headers(info, px.cfg.Clock.Since(start))
	px.copyResponseHeaders(w.Header(), resp)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	// Every chunk is flushed as it arrives; the head goes out on its own
	// only for declared streams, so other answers save a write.
	if headers.IsStreamingContentType(resp.Header.Get("Content-Type")) {
		_ = rc.Flush()
	}
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if sse && (info.Endpoint == EndpointChat || info.Endpoint == EndpointResponses) {
		return px.streamSSE(ctx, cancel, w, rc, resp.Body, info, obs, start, ok2xx)
	}
	return px.copyBody(w, r, rc, resp, info, obs, start, ok2xx)
}

// copyBody copies a body that is not observed event by event through as it
// arrives (an SSE answer on another path must still stream), keeping it
// for the observation: a 2xx body counts as the request's output.
func (px *Proxy) copyBody(w http.ResponseWriter, r *http.Request, rc *http.ResponseController,
	resp *http.Response, info RequestInfo, obs Observation, start time.Time, ok2xx bool) (outcome, bool) {
	var kept []byte
	if resp.ContentLength > 0 && resp.ContentLength <= 32<<10 {
		kept = make([]byte, 0, resp.ContentLength) // one allocation for the usual short answer
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			kept = append(kept, buf[:n]...)
			if _, werr := w.Write(buf[:n]); werr != nil {
				return outcomeCancelled, false
			}
			// The chunk that ends the body (net/http returns io.EOF with
			// the last bytes of a Content-Length body) is not flushed
			// alone: when the handler returns, the head and this chunk
			// leave as HEADERS (with content-length) and one DATA frame
			// carrying END_STREAM, instead of a third, empty frame and
			// write for the end of the stream.
			if err != io.EOF {
				_ = rc.Flush()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if deadlinePassed(r.Context()) {
				px.logDeadline(info, stageStreaming)
				return outcomeCancelled, true
			}
			if r.Context().Err() != nil {
				return outcomeCancelled, false
			}
			return outcomeFailed, true
		}
	}
	if !ok2xx {
		return outcomeFailed, false
	}
	obs.Output(kept)
	px.metrics.firstOutput(info, px.cfg.Clock.Since(start))
	return outcomeComplete, false
}

// buildError is a failure to build the upstream request; it is never
// retried.
type buildError struct{ err error }

func (b buildError) Error() string { return b.err.Error() }

// send makes one attempt on engine e, telling obs which engine it goes to
// first, with the header set hd (upstreamRequestHeaders). gotConn reports
// whether a connection to the engine was obtained.
func (px *Proxy) send(ctx context.Context, r *http.Request, hd http.Header, body requestBody, obs Observation, e *engine) (resp *http.Response, gotConn bool, err error) {
	if eo, ok := obs.(EngineObservation); ok {
		eo.Dispatched(e.idx)
	}
	var conn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conn.Store(true) }})
	req, err := newUpstreamRequest(ctx, r, e, body)
	if err != nil {
		return nil, false, buildError{err}
	}
	req.Header = hd
	// The transport, not http.Client: an engine's redirect goes back to
	// the hub as it came, as from any reverse proxy, and the Client's
	// copy of the header set for following redirects is not made.
	resp, err = roundtrip.Do(px.transport, req)
	return resp, conn.Load(), err
}

// newUpstreamRequest builds the request to engine e for the hub's request
// r, with the body's buffer, its length and a GetBody (the transport
// replays the body on a new connection when a kept-alive one turns out to
// be dead). The URL is the engine's base, parsed once, with r's path and
// query: parsing the concatenated URL again for every request, as
// http.NewRequest would, cost an allocation of its own and a copy of the
// path. A path with escapes of its own, or a base without a parsed URL
// (see engine.url), takes that standard way.
func newUpstreamRequest(ctx context.Context, r *http.Request, e *engine, body requestBody) (*http.Request, error) {
	base := e.url
	if base == nil || r.URL.RawPath != "" {
		req, err := http.NewRequestWithContext(ctx, r.Method, e.base+r.URL.RequestURI(), nil)
		if err != nil {
			return nil, err
		}
		setBody(req, body)
		return req, nil
	}
	// An empty URL parses without allocating more than the URL itself,
	// and NewRequestWithContext still checks the method.
	req, err := http.NewRequestWithContext(ctx, r.Method, "", nil)
	if err != nil {
		return nil, err
	}
	u := req.URL
	*u = *base
	u.Path = base.Path + r.URL.Path
	u.RawQuery, u.ForceQuery = r.URL.RawQuery, r.URL.ForceQuery
	u.Host, req.Host = e.host, e.host
	setBody(req, body)
	return req, nil
}

// setBody gives req the buffered body, as http.NewRequest does for a
// bytes.Reader.
func setBody(req *http.Request, body requestBody) {
	req.ContentLength = int64(len(body.b))
	if req.ContentLength == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
		return
	}
	req.Body, req.GetBody = body.reader(), body.getBody()
}

// isConnectFailure reports whether a failed upstream call never reached
// the engine: a dial error, or no connection obtained at all (DNS, TLS
// handshake, a dead idle connection whose redial failed).
func isConnectFailure(err error, gotConn bool) bool {
	var op *net.OpError
	return !gotConn || (errors.As(err, &op) && op.Op == "dial")
}

// copyResponseHeaders passes the engine's headers on, minus hop-by-hop,
// content-length and the retry-control headers, then maps a retryable
// engine answer to the hub's retry signal: a status in the retryable set,
// and (unless disabled) the engine's own retry header saying true.
func (px *Proxy) copyResponseHeaders(dst http.Header, resp *http.Response) {
	// Shared, not copied: the tunnel's HTTP/2 server copies the head when
	// it writes it.
	headers.ShareExcept(dst, resp.Header, px.notReturned)
	if !slices.Contains(px.cfg.RetryableStatusCodes, resp.StatusCode) {
		if resp.StatusCode >= 400 {
			px.metrics.nonretryable(px.cfg.InferenceServerID, "upstream_nonretryable_status")
		}
		return
	}
	if px.cfg.RequireUpstreamRetryHeader && !strings.EqualFold(strings.TrimSpace(resp.Header.Get(px.cfg.UpstreamRetryHeader)), "true") {
		px.metrics.nonretryable(px.cfg.InferenceServerID, "missing_upstream_retry_header")
		return
	}
	dst.Set(headers.StargateRetryable, "true")
	dst.Set(headers.StargateRetryReason, headers.ReasonUpstreamAdmissionRejected)
	if px.cfg.PropagateRetryAfter {
		if ms, ok := retryAfterMs(resp.Header.Get("Retry-After"), px.cfg.Clock.Now()); ok {
			dst.Set(headers.StargateRetryAfterMs, strconv.FormatInt(ms, 10))
		}
	}
	px.metrics.retryable(px.cfg.InferenceServerID, headers.ReasonUpstreamAdmissionRejected, resp.StatusCode)
}

// retryAfterMs reads Retry-After as seconds or an HTTP date.
func retryAfterMs(v string, now time.Time) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return int64(s) * 1000, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now).Milliseconds(), 0), true
	}
	return 0, false
}

// copyBuffers recycles the 32 KiB copy buffers across requests.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
