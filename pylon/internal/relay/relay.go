package relay

import (
	"bytes"
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
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Endpoint classes the observer distinguishes.
const (
	EndpointChat       = "chat"
	EndpointResponses  = "responses"
	EndpointEmbeddings = "embeddings"
	EndpointOther      = "other"
)

// RequestInfo is what the tracker learns about a request when it arrives.
type RequestInfo struct {
	ID          string
	Model       string
	Endpoint    string
	InputTokens uint64
	Priority    uint32
	RoutingKey  string
}

// Observation follows one request through its phases (pylon.md §5.2).
type Observation interface {
	// Headers marks the upstream response head (-> InputProcessing).
	Headers(status int)
	// Output reports one output event's payload or a non-SSE body
	// (-> OutputGeneration on the first one).
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

// Tracker is the stats collector as the relay uses it.
type Tracker interface {
	// Published reports whether model has a published generation.
	Published(model string) bool
	// Begin enters a request into the live projection as Pending.
	Begin(info RequestInfo) Observation
	// LocalQueueMs is the local queue estimate at priority p, leaving out
	// self's own prompt work (pylon.md §4 step 3).
	LocalQueueMs(model string, p uint32, self Observation) (uint64, bool)
}

// Relay serves the hub's requests. Build it with New.
type Relay struct {
	cfg     Config
	tracker Tracker
	metrics *Metrics
	pool    *pool

	healthMu   sync.Mutex
	healthPath string // the first health path that answered, cached

	// notForwarded and notRelayed are the request and response headers
	// the relay drops, canonical, built once (they include the configured
	// upstream retry header).
	notForwarded, notRelayed headers.Set
}

// New returns a relay; cfg must be valid.
func New(cfg Config, tracker Tracker, m *Metrics) *Relay {
	cfg.UpstreamBaseURL = strings.TrimRight(cfg.UpstreamBaseURL, "/")
	return &Relay{cfg: cfg, tracker: tracker, metrics: m, pool: newPool(cfg.engineURLs(), cfg.Clock, m),
		notForwarded: headers.NewSet(append([]string{"Host", headers.TunnelMethod, headers.TunnelPath, headers.StargateExpectedQueueMs,
			headers.StargateUpstreamRetryable, headers.StargateRetryable, headers.StargateRetryReason, headers.StargateRetryAfterMs,
			cfg.UpstreamRetryHeader, headers.DynamoRequestPriority, headers.DynamoRequestStrictPriority}, headers.HopByHop...)...),
		notRelayed: headers.NewSet(append([]string{"Content-Length", headers.StargateUpstreamRetryable, headers.StargateRetryable,
			headers.StargateRetryReason, headers.StargateRetryAfterMs, cfg.UpstreamRetryHeader}, headers.HopByHop...)...),
	}
}

// Headers the relay reads or sets on every request, in canonical form:
// Header.Get and Set canonicalise their key, allocating a new string for
// these lower-case names on every call.
var (
	canonRequestID            = http.CanonicalHeaderKey(headers.RequestID)
	canonModel                = http.CanonicalHeaderKey(headers.Model)
	canonRoutingKey           = http.CanonicalHeaderKey(headers.RoutingKey)
	canonDynamoPriority       = http.CanonicalHeaderKey(headers.DynamoRequestPriority)
	canonDynamoStrictPriority = http.CanonicalHeaderKey(headers.DynamoRequestStrictPriority)
)

var _ http.Handler = (*Relay)(nil)

// ServeHTTP handles one tunnel stream.
func (rl *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == protocol.HealthPath && r.Method == http.MethodGet {
		rl.serveHealth(w, r)
		return
	}
	rl.serveInference(w, r)
}

// problem writes an RFC 7807 body, the reference's error shape on the
// pylon hop.
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

func endpointOf(path string) string {
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

// requestHeaders reads and validates the headers every request must carry
// (pylon.md §5.1 step 2).
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
	return info, ""
}

func (rl *Relay) serveInference(w http.ResponseWriter, r *http.Request) {
	start := rl.cfg.Clock.Now()
	info, bad := requestHeaders(r.Header)
	if bad != "" {
		problem(w, http.StatusBadRequest, bad, nil)
		return
	}
	info.Endpoint = endpointOf(r.URL.Path)
	if !rl.tracker.Published(info.Model) {
		rl.retryable(w, http.StatusServiceUnavailable, headers.ReasonModelGenerationUnavailable, 0,
			fmt.Sprintf("model %q has no published generation on this pylon", info.Model))
		return
	}
	obs := rl.tracker.Begin(info)
	outcome := "cancelled"
	abort := false
	defer func() {
		switch outcome {
		case "complete":
			obs.Complete()
		case "failed":
			obs.Fail()
		default:
			obs.Cancel()
		}
		rl.metrics.finished(info, outcome, rl.cfg.Clock.Since(start))
		if abort {
			// The response was cut short after (or instead of) its head:
			// reset the stream so the hub cannot mistake a truncated
			// body for a complete one (pylon.md §5.1 steps 8 and 10).
			panic(http.ErrAbortHandler)
		}
	}()

	body, err := readAll(http.MaxBytesReader(w, r.Body, rl.cfg.MaxBodyBytes), r.ContentLength, rl.cfg.MaxBodyBytes)
	if err != nil {
		outcome = "failed"
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "request body exceeds 64 MiB", nil)
		} else if r.Context().Err() == nil {
			problem(w, http.StatusBadRequest, "reading request body: "+err.Error(), nil)
		}
		return
	}
	if detail := checkBody(info.Endpoint, r.URL.Path, body); detail != "" {
		outcome = "failed"
		problem(w, http.StatusBadRequest, detail, nil)
		return
	}
	if !rl.admit(w, r, info, obs) {
		outcome = "failed"
		return
	}
	outcome, abort = rl.forward(w, r, info, body, obs, start)
}

// readAll is io.ReadAll with a first buffer sized for a declared length
// (bounded by limit), so a body is read without growing the buffer two or
// three times; the extra byte lets the read that sees EOF find room.
func readAll(r io.Reader, declared, limit int64) ([]byte, error) {
	size := int64(512) // io.ReadAll's first buffer
	if declared > 0 && declared < limit {
		size = declared + 1
	}
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append pick the growth
		}
	}
}

// checkBody enforces a JSON body, and stream:true where the reference needs
// streaming bodies to observe them (pylon.md §5.1 step 5).
func checkBody(endpoint, path string, body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return "request body must be a JSON document"
	}
	if endpoint != EndpointChat && endpoint != EndpointResponses {
		return ""
	}
	var peek struct {
		Stream *bool `json:"stream"`
	}
	if json.Unmarshal(body, &peek) != nil || peek.Stream == nil || !*peek.Stream {
		return path + " requests must set stream=true"
	}
	return ""
}

// admit runs the queue admission check (pylon.md §4) and answers the 429
// itself when the request is refused.
func (rl *Relay) admit(w http.ResponseWriter, r *http.Request, info RequestInfo, obs Observation) bool {
	if !rl.cfg.QueueMismatchEnabled {
		rl.metrics.admission(rl.cfg.InferenceServerID, info.Model, "disabled")
		return true
	}
	expected, present, err := headers.GetUint64(r.Header, headers.StargateExpectedQueueMs)
	if !present || err != nil {
		rl.metrics.admission(rl.cfg.InferenceServerID, info.Model, "missing_estimate")
		return true
	}
	actual, ok := rl.tracker.LocalQueueMs(info.Model, info.Priority, obs)
	if !ok {
		rl.metrics.admission(rl.cfg.InferenceServerID, info.Model, "unknown_local_estimate")
		return true
	}
	threshold := admissionThreshold(expected, uint64(rl.cfg.QueueMismatchMinDelta/time.Millisecond), rl.cfg.QueueMismatchToleranceFactor)
	rl.metrics.admissionMs(float64(expected), float64(actual))
	if actual <= threshold {
		rl.metrics.admission(rl.cfg.InferenceServerID, info.Model, "accepted")
		return true
	}
	rl.metrics.admission(rl.cfg.InferenceServerID, info.Model, "rejected")
	rl.metrics.retryable(rl.cfg.InferenceServerID, headers.ReasonQueueEstimateMismatch, http.StatusTooManyRequests)
	h := w.Header()
	h.Set(headers.StargateRetryable, "true")
	h.Set(headers.StargateRetryReason, headers.ReasonQueueEstimateMismatch)
	if rl.cfg.QueueMismatchRetryAfter > 0 {
		h.Set(headers.StargateRetryAfterMs, strconv.FormatInt(rl.cfg.QueueMismatchRetryAfter.Milliseconds(), 10))
	}
	problem(w, http.StatusTooManyRequests, "local queue estimate exceeded Stargate routing estimate", map[string]any{
		"reason": headers.ReasonQueueEstimateMismatch, "expected_queue_ms": expected, "actual_queue_ms": actual, "threshold_ms": threshold,
	})
	return false
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
func (rl *Relay) retryable(w http.ResponseWriter, status int, reason string, retryAfter time.Duration, detail string) {
	h := w.Header()
	h.Set(headers.StargateRetryable, "true")
	h.Set(headers.StargateRetryReason, reason)
	if retryAfter > 0 {
		h.Set(headers.StargateRetryAfterMs, strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	rl.metrics.retryable(rl.cfg.InferenceServerID, reason, status)
	problem(w, status, detail, map[string]any{"reason": reason})
}

// upstreamRequestHeaders is the header set sent to the engine (pylon.md
// §5.1 step 7).
func (rl *Relay) upstreamRequestHeaders(in http.Header, prio uint32) http.Header {
	out := make(http.Header, len(in)+2) // +2: the dynamo priority headers
	headers.CopyExcept(out, in, rl.notForwarded)
	if strings.EqualFold(rl.cfg.UpstreamBackend, "dynamo") {
		rank := uint32(0)
		if rl.cfg.PriorityCeiling > prio {
			rank = rl.cfg.PriorityCeiling - prio
		}
		out[canonDynamoPriority] = []string{strconv.FormatUint(uint64(rank), 10)}
		out[canonDynamoStrictPriority] = []string{"0"}
	}
	return out
}

// forward sends the request to an engine and relays the answer; it returns
// the observation outcome, and abort when the response must be reset
// rather than ended cleanly. With several engines, an attempt that fails
// before a response head marks its engine down and is retried once on
// another eligible engine (the body is buffered, so it replays); nothing
// is retried once a head has arrived.
func (rl *Relay) forward(w http.ResponseWriter, r *http.Request, info RequestInfo, body []byte, obs Observation, start time.Time) (outcome string, abort bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	e := rl.pool.acquire(nil, false)
	defer func() { rl.pool.release(e) }()
	resp, gotConn, err := rl.send(ctx, r, info, body, obs, e)
	var be buildError
	if errors.As(err, &be) {
		problem(w, http.StatusBadGateway, "building upstream request: "+be.err.Error(), nil)
		return "failed", false
	}
	if err != nil && r.Context().Err() == nil {
		rl.pool.failed(e)
		if alt := rl.pool.acquire(e, true); alt != nil {
			rl.cfg.Log.Warn("engine failed before answering; retrying on another engine", "request_id", info.ID, "model", info.Model,
				"engine", e.label, "retry_engine", alt.label, "err", err)
			rl.metrics.engineRequest(e.label, engineStatusRetried)
			rl.pool.release(e)
			e = alt
			resp, gotConn, err = rl.send(ctx, r, info, body, obs, e)
			if err != nil && r.Context().Err() == nil {
				rl.pool.failed(e)
			}
		}
	}
	if err != nil {
		if r.Context().Err() != nil {
			rl.metrics.engineRequest(e.label, engineStatusCancelled)
			return "cancelled", false
		}
		rl.metrics.engineRequest(e.label, engineStatusError)
		if !isConnectFailure(err, gotConn) {
			// The request may have reached the engine: no 503, abort the
			// stream (pylon.md §5.1 step 8).
			rl.cfg.Log.Warn("upstream request failed after connecting", "request_id", info.ID, "model", info.Model, "err", err)
			return "failed", true
		}
		rl.cfg.Log.Warn("upstream request failed", "request_id", info.ID, "model", info.Model, "err", err)
		if rl.cfg.LocalConnectFailuresRetryable {
			rl.retryable(w, http.StatusServiceUnavailable, headers.ReasonLocalConnectFailure, 0, "engine unreachable: "+err.Error())
		} else {
			rl.metrics.nonretryable(rl.cfg.InferenceServerID, headers.ReasonLocalConnectFailure)
			w.Header().Set(headers.StargateRetryReason, headers.ReasonLocalConnectFailure)
			problem(w, http.StatusServiceUnavailable, "engine unreachable: "+err.Error(), map[string]any{"reason": headers.ReasonLocalConnectFailure})
		}
		return "failed", false
	}
	rl.pool.succeeded(e)
	rl.metrics.engineRequest(e.label, statusClass(resp.StatusCode))
	defer func() { _ = resp.Body.Close() }()
	obs.Headers(resp.StatusCode)
	rl.metrics.headers(info, rl.cfg.Clock.Since(start))
	rl.copyResponseHeaders(w.Header(), resp)
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
		return rl.relaySSE(ctx, cancel, w, rc, resp.Body, info, obs, start, ok2xx)
	}
	// Copy the body through as it arrives (an SSE answer on another path
	// must still stream), keeping it for the observation.
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
				return "cancelled", false
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
			if r.Context().Err() != nil {
				return "cancelled", false
			}
			return "failed", true
		}
	}
	if !ok2xx {
		return "failed", false
	}
	obs.Output(kept)
	rl.metrics.firstOutput(info, rl.cfg.Clock.Since(start))
	return "complete", false
}

// buildError is a failure to build the upstream request; it is never
// retried.
type buildError struct{ err error }

func (b buildError) Error() string { return b.err.Error() }

// send makes one attempt on engine e, telling obs which engine it goes to
// first. gotConn reports whether a connection to the engine was obtained.
func (rl *Relay) send(ctx context.Context, r *http.Request, info RequestInfo, body []byte, obs Observation, e *engine) (resp *http.Response, gotConn bool, err error) {
	if eo, ok := obs.(EngineObservation); ok {
		eo.Dispatched(e.idx)
	}
	var conn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conn.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, r.Method, e.base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, false, buildError{err}
	}
	req.Header = rl.upstreamRequestHeaders(r.Header, info.Priority)
	req.ContentLength = int64(len(body))
	resp, err = rl.cfg.Client.Do(req)
	return resp, conn.Load(), err
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
// engine answer to the hub's retry signal (pylon.md §5.1 step 9).
func (rl *Relay) copyResponseHeaders(dst http.Header, resp *http.Response) {
	headers.CopyExcept(dst, resp.Header, rl.notRelayed)
	if !slices.Contains(rl.cfg.RetryableStatusCodes, resp.StatusCode) {
		if resp.StatusCode >= 400 {
			rl.metrics.nonretryable(rl.cfg.InferenceServerID, "upstream_nonretryable_status")
		}
		return
	}
	if rl.cfg.RequireUpstreamRetryHeader && !strings.EqualFold(strings.TrimSpace(resp.Header.Get(rl.cfg.UpstreamRetryHeader)), "true") {
		rl.metrics.nonretryable(rl.cfg.InferenceServerID, "missing_upstream_retry_header")
		return
	}
	dst.Set(headers.StargateRetryable, "true")
	dst.Set(headers.StargateRetryReason, headers.ReasonUpstreamAdmissionRejected)
	if rl.cfg.PropagateRetryAfter {
		if ms, ok := retryAfterMs(resp.Header.Get("Retry-After"), rl.cfg.Clock.Now()); ok {
			dst.Set(headers.StargateRetryAfterMs, strconv.FormatInt(ms, 10))
		}
	}
	rl.metrics.retryable(rl.cfg.InferenceServerID, headers.ReasonUpstreamAdmissionRejected, resp.StatusCode)
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
