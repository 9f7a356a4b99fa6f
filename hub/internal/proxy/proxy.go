package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// Store is the routing state as the proxy reads and reserves it.
type Store interface {
	Snapshot(t routing.Target) *routing.Snapshot
	Registered(t routing.Target) bool
	NextBackend(t routing.Target, clusterID string, skip func(backendID string) bool) (state.Backend, bool)
	Reserve(t routing.Target, clusterID, backendID string, tokens uint64, prio uint32) state.Reservation
}

// Tunnels gives the transport to a connected backend.
type Tunnels interface {
	RoundTripper(backendID string) (http.RoundTripper, bool)
}

// Route is the load balancer resolved for one request.
type Route struct {
	// Algorithm is the canonical name, for labels and logs.
	Algorithm string
	Picker    lb.Picker
	// RequireAffinityKey makes a request without x-cache-affinity-key a 400.
	RequireAffinityKey bool
	// MaxInputWorkSeconds is max_input_work_seconds (hub.md §5.10); it is
	// enforced only when HasInputWorkLimit is set.
	MaxInputWorkSeconds float64
	HasInputWorkLimit   bool
	// AdmissionNeedsWeight restricts input-work admission to clusters with a
	// valid input TPS (pulsar and pulsar-wait-and-widen), and
	// AdmissionConsidersKV also drops clusters that fail the free-KV check
	// (consider_kv_free_tokens on those algorithms).
	AdmissionNeedsWeight bool
	AdmissionConsidersKV bool
	// LastClusterAffinity reports that the algorithm classifies sessions, so
	// the proxy records stargate_routing_session_selections_total.
	LastClusterAffinity bool
}

// Resolver picks the load balancer for a target and the requested
// algorithm ("" when the request names none).
type Resolver interface {
	Resolve(t routing.Target, requested string) (Route, *openai.Error)
	// KnownMethod reports whether method (an x-routing-method value, or
	// the part of a routing expression before its first ';') names an
	// algorithm or alias at all. The proxy asks at step 4 of hub.md §3.2,
	// before the numeric headers; whether it is configured for the model
	// is Resolve's answer at step 8.
	KnownMethod(method string) bool
}

// Config holds the proxy's limits; the hub flag that sets each is named.
type Config struct {
	// MaxReplayBodyBytes is --proxy-max-replay-body-bytes (64 MiB).
	MaxReplayBodyBytes int64
	// RequestTimeout bounds the time to the response head of one attempt
	// (--tunnel-request-timeout-ms, 30 s).
	RequestTimeout time.Duration
	// MaxRequestRetries is --proxy-max-request-retries (2).
	MaxRequestRetries int
	// MaxConnectRetries is --proxy-max-connect-retries (2).
	MaxConnectRetries int
	// RetryableStatusCodes is --proxy-retryable-status-codes (429, 503).
	RetryableStatusCodes []int
	// RequirePylonRetrySignal is --proxy-require-pylon-retry-signal (true).
	RequirePylonRetrySignal bool
	// RetryBudgetHeader is --proxy-retry-budget-header; empty disables it.
	RetryBudgetHeader string
	// MaxRoutingWait caps x-max-wait-ms (60 s), and is the routing wait of
	// a request without the header when its load balancer asks to wait.
	MaxRoutingWait time.Duration
	// MaxWaitPoll caps one sleep of a timed routing wait (25 ms), so a
	// waiting request sees state changes soon after they happen.
	MaxWaitPoll time.Duration
	// GatewayToken is --gateway-token-file's token. When set, the routing
	// and x-stargate-* headers of a request are honoured only if it carries
	// Authorization: Bearer <token>; any other request has them removed
	// before parsing, so it cannot steer routing.
	GatewayToken string

	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *Metrics
	// TracerProvider and Propagator trace requests (hub.md §8.2); nil
	// takes the otel globals at New (set them first, e.g. with
	// obs.SetupTracing). Without an exporter spans do not record.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// Seed seeds the per-request random sources; 0 picks one at random.
	Seed uint64
}

// Defaults returns the reference defaults.
func Defaults() Config {
	return Config{
		MaxReplayBodyBytes:      64 << 20,
		RequestTimeout:          30 * time.Second,
		MaxRequestRetries:       2,
		MaxConnectRetries:       2,
		RetryableStatusCodes:    []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
		RequirePylonRetrySignal: true,
		RetryBudgetHeader:       headers.StargateMaxWaitMs,
		MaxRoutingWait:          60 * time.Second,
		MaxWaitPoll:             25 * time.Millisecond,
	}
}

// Proxy serves the inference endpoints. Build it with New.
type Proxy struct {
	cfg      Config
	store    Store
	tunnels  Tunnels
	resolver Resolver
	rngs     sync.Pool

	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	seq        atomic.Uint64
}

// New returns a proxy. A nil Clock is the wall clock and a nil Log
// discards.
func New(cfg Config, store Store, tunnels Tunnels, resolver Resolver) *Proxy {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
	}
	p := &Proxy{cfg: cfg, store: store, tunnels: tunnels, resolver: resolver,
		tracer: cfg.TracerProvider.Tracer(tracerName), propagator: cfg.Propagator}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64() //nolint:gosec // G404: load balancing needs spread, not secrecy.
	}
	p.rngs.New = func() any { return rand.New(rand.NewPCG(seed, p.seq.Add(1))) } //nolint:gosec // G404: as above.
	return p
}

// Handler returns the inference routes.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				openai.WriteError(w, openai.MethodNotAllowed(r.Method, http.MethodPost))
				return
			}
			p.serve(w, r)
		})
	}
	return mux
}

// request is one parsed inbound request.
type request struct {
	target      routing.Target
	route       Route
	rreq        routing.Request
	body        []byte
	start       time.Time
	routeUntil  time.Time // zero: no x-max-wait-ms (no untimed re-polls)
	waitUntil   time.Time // end of timed waits the load balancer asks for
	budgetUntil time.Time // zero: no budget header (retries limited by counts only)
	noRetries   bool      // budget header 0
	span        trace.Span
}

// parse reads the headers in hub.md §3.2's order; every failure is a 400
// that names the header (the reference sends an empty body; we keep the
// status and say why).
func (p *Proxy) parse(r *http.Request) (*request, *openai.Error) {
	h := r.Header
	req := &request{start: p.cfg.Clock.Now()}
	id, ok := headers.GetText(h, headers.RequestID)
	if !ok {
		return nil, openai.BadRequest(headers.RequestID, "missing_header", "header %s is required", headers.RequestID)
	}
	tok, present, err := headers.GetUint64(h, headers.InputTokens)
	if !present {
		return nil, openai.BadRequest(headers.InputTokens, "missing_header", "header %s is required", headers.InputTokens)
	}
	if err != nil {
		return nil, openai.BadRequest(headers.InputTokens, "invalid_header", "%v", err)
	}
	model, ok := headers.GetText(h, headers.Model)
	if !ok {
		return nil, openai.BadRequest(headers.Model, "missing_header", "header %s is required", headers.Model)
	}
	rk, _ := headers.GetText(h, headers.RoutingKey)
	req.target = routing.Target{RoutingKey: rk, Model: model}
	requested := ""
	if vs := h.Values(headers.RoutingMethod); len(vs) > 0 {
		v, ok := headers.ParseText(vs[0])
		if !ok {
			return nil, openai.BadRequest(headers.RoutingMethod, "invalid_routing_method", "header %s must be visible ASCII and not blank", headers.RoutingMethod)
		}
		// Step 4 rejects an unknown name before the numeric headers are
		// read; whether a known one is configured is step 8 (Resolve).
		// Only the method is checked here; the parameters of a routing
		// expression (method;k=v…) are the resolver's, which reports its
		// own error classes at step 8.
		method, _, _ := strings.Cut(v, ";")
		if !p.resolver.KnownMethod(method) {
			p.cfg.Log.Warn("invalid routing algorithm header", "request_id", id, "model", model, "rejection_reason", "unknown_method")
			return nil, openai.BadRequest(headers.RoutingMethod, "unknown_method", "unknown routing method %q", v)
		}
		requested = v
	}
	prio, _, err := headers.GetUint32(h, headers.Priority)
	if err != nil {
		return nil, openai.BadRequest(headers.Priority, "invalid_header", "%v", err)
	}
	maxWait, mwPresent, err := headers.GetUint64(h, headers.MaxWaitMs)
	if err != nil {
		return nil, openai.BadRequest(headers.MaxWaitMs, "invalid_header", "%v", err)
	}
	slo, _, err := headers.GetUint64(h, headers.RequestSLOMs)
	if err != nil {
		return nil, openai.BadRequest(headers.RequestSLOMs, "invalid_header", "%v", err)
	}
	affinity, _ := headers.GetText(h, headers.CacheAffinityKey)
	route, oerr := p.resolver.Resolve(req.target, requested)
	if oerr != nil {
		p.cfg.Log.Warn("invalid routing algorithm header", "request_id", id, "model", model, "rejection_reason", oerr.Code)
		return nil, oerr
	}
	if route.RequireAffinityKey && affinity == "" {
		p.cfg.Log.Warn("missing cache affinity key for load-balanced proxy request", "request_id", id, "model", model)
		return nil, openai.BadRequest(headers.CacheAffinityKey, "missing_header", "header %s is required for model %s", headers.CacheAffinityKey, model)
	}
	req.route = route
	if name := p.cfg.RetryBudgetHeader; name != "" {
		budget, present, err := headers.GetUint64(h, name)
		if err != nil {
			return nil, openai.BadRequest(name, "invalid_header", "%v", err)
		}
		if present {
			// Overflow is a deadline a time.Duration cannot hold (about
			// 292 years); any shorter budget is valid.
			if budget > math.MaxInt64/uint64(time.Millisecond) {
				return nil, openai.BadRequest(name, "invalid_header", "header %s is out of range", name)
			}
			req.budgetUntil = req.start.Add(headers.MillisDuration(budget))
			req.noRetries = budget == 0
		}
	}
	req.waitUntil = req.start.Add(p.cfg.MaxRoutingWait)
	if mwPresent {
		req.routeUntil = req.start.Add(min(headers.MillisDuration(maxWait), p.cfg.MaxRoutingWait))
		req.waitUntil = req.routeUntil
	}
	// The hint is consumed here and never forwarded (forwardHeaders drops
	// it); a malformed one is no hint.
	last, _ := headers.GetText(h, headers.StargateLastClusterID)
	if len(last) > headers.MaxClusterIDLen {
		last = ""
	}
	req.rreq = routing.Request{
		ID: id, InputTokens: tok, Priority: prio, AffinityKey: affinity,
		SLO: headers.MillisDuration(slo), MaxWait: headers.MillisDuration(maxWait),
		ReceivedAt: req.start, LastClusterID: last,
	}
	return req, nil
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	ctx, span := p.startRequestSpan(r)
	defer span.End()
	r = r.WithContext(ctx)
	if p.cfg.GatewayToken != "" {
		if bearerMatches(r.Header.Get("Authorization"), p.cfg.GatewayToken) {
			// The token authenticated the gateway to this hub; it is not
			// for the pylon or the engine.
			r.Header.Del("Authorization")
		} else {
			stripSteering(r.Header)
		}
	}
	req, oerr := p.parse(r)
	if oerr != nil {
		if oerr.Code != "" && oerr.Param == headers.RoutingMethod {
			w.Header().Set(headers.StargateErrorCode, oerr.Code)
		}
		traceRejected(span, oerr.Status, oerr.Code, oerr.Param)
		openai.WriteError(w, oerr)
		return
	}
	req.span = span
	traceParsed(span, r, req, r.Header.Get(headers.RoutingMethod))
	if r.ContentLength > p.cfg.MaxReplayBodyBytes {
		openai.WriteError(w, openai.TooLarge(p.cfg.MaxReplayBodyBytes))
		return
	}
	body, oerr := openai.ReadBody(w, r, p.cfg.MaxReplayBodyBytes)
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	req.body = body
	p.cfg.Metrics.replayBytes(req.target.Model, len(body))
	rng := p.rngs.Get().(*rand.Rand)
	defer p.rngs.Put(rng)
	p.route(w, r, req, rng)
}

// loop is the state of one request's routing loop (hub.md §3.3).
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

func (p *Proxy) route(w http.ResponseWriter, r *http.Request, req *request, rng *rand.Rand) {
	st := &loop{}
	defer traceCounters(req.span, st, len(req.body))
	t := req.target
	loopStart := p.cfg.Clock.Now() // the body is already read: routing time starts here
	for {
		snap := p.store.Snapshot(t)
		candidates, eligible := 0, 0
		if snap != nil {
			candidates = len(snap.Clusters)
			for _, c := range snap.Clusters {
				if !slices.Contains(st.failedClusters, c.ClusterID) {
					eligible++
				}
			}
		}
		req.rreq.Excluded = st.failedClusters
		if eligible > 0 && req.route.HasInputWorkLimit {
			if reason := admit(&req.route, &req.rreq, snap); reason != "" {
				p.rejectAdmission(w, req, reason)
				return
			}
		}
		var dec routing.Decision
		ok := false
		now := p.cfg.Clock.Now()
		if snap != nil && eligible > 0 {
			dec, ok = req.route.Picker.Pick(&req.rreq, snap, now, rng)
		}
		if !ok {
			if candidates > 0 && eligible > 0 {
				// A timed wait the load balancer asked for (a locked bucket,
				// the affinity wait, the next band), polled at most every
				// MaxWaitPoll so fresh stats are seen; else the untimed
				// 1–10 ms re-polls that x-max-wait-ms allows.
				var wait time.Duration
				switch {
				case dec.Wait > 0 && now.Before(req.waitUntil):
					wait = min(dec.Wait, p.cfg.MaxWaitPoll, req.waitUntil.Sub(now))
				case !req.routeUntil.IsZero() && now.Before(req.routeUntil):
					wait = min(time.Duration(1+rng.IntN(9))*time.Millisecond, req.routeUntil.Sub(now))
				}
				if wait > 0 {
					if !st.waitLogged {
						st.waitLogged = true
						p.cfg.Log.Debug("waiting for routing bucket eligibility", "request_id", req.rreq.ID,
							"model", t.Model, "wait", dec.Wait)
					}
					st.waits++
					if !clock.Sleep(p.cfg.Clock, r.Context().Done(), wait) {
						p.done(req, "", statusClientClosed)
						return
					}
					continue
				}
			}
			p.noCandidate(w, req, st, candidates)
			return
		}
		if !st.routingRecorded {
			st.routingRecorded = true
			p.cfg.Metrics.routingDuration(t, p.cfg.Clock.Since(loopStart))
		}
		selection := "primary"
		if dec.RankDepth > 1 {
			selection = "fallback"
		}
		p.cfg.Metrics.selection(t, req.route.Algorithm, selection)
		traceSelection(req.span, req, snap, &dec, st)
		if dec.SelectedAfterKVFreeTokensSkip {
			p.cfg.Metrics.kvFallback(t, req.route.Algorithm)
		}
		if req.route.LastClusterAffinity && req.rreq.Session != routing.SessionUnclassified {
			p.recordSession(req, &dec)
		}
		// The decision carries the cluster's queue estimate, taken from this
		// snapshot before this request's reservation (hub.md §3.4 step 4).
		next := p.tryCluster(w, r, req, st, dec.ClusterID, dec.QueueEstimateMs, dec.QueueEstimateKnown)
		switch next {
		case nextDone:
			return
		case nextCluster:
			st.failedClusters = append(st.failedClusters, dec.ClusterID)
		}
	}
}

// noCandidate ends a request the load balancer could not place.
func (p *Proxy) noCandidate(w http.ResponseWriter, req *request, st *loop, candidates int) {
	t := req.target
	failed := len(st.failedBackends) > 0 || len(st.failedClusters) > 0
	if candidates == 0 && !failed && !p.store.Registered(t) {
		p.cfg.Log.Warn("no inference server candidates for routing target", "request_id", req.rreq.ID, "model", t.Model, "routing_key", t.RoutingKey)
		w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeNoEligibleCandidates)
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeNotFound,
			Code: headers.ErrorCodeNoEligibleCandidates, Message: "no eligible candidates"})
		p.done(req, "", http.StatusNotFound)
		return
	}
	if failed {
		p.cfg.Metrics.exhausted(t, "no_eligible_backend")
	} else if candidates > 0 {
		// Clusters exist but the load balancer found none it could use
		// (no capacity, locked buckets) before the wait ran out: the [L]
		// admission reason routing_capacity_unavailable.
		p.cfg.Metrics.admissionRejected(t, reasonRoutingCapacity)
	}
	w.Header().Set(headers.StargateErrorCode, headers.ErrorCodeOverloaded)
	openai.WriteError(w, openai.Unavailable(headers.ErrorCodeOverloaded, fmt.Sprintf("no cluster can serve model %s now", t.Model)))
	p.done(req, "", http.StatusServiceUnavailable)
}

type next int

const (
	nextDone    next = iota // a response was written (or the client left)
	nextCluster             // exclude this cluster and run the load balancer again
)

// tryCluster runs attempts on the cluster's backends, sibling after
// sibling, until one answers or the cluster must be given up.
func (p *Proxy) tryCluster(w http.ResponseWriter, r *http.Request, req *request, st *loop, clusterID string, qest uint64, qok bool) next {
	for {
		b, ok := p.store.NextBackend(req.target, clusterID, func(id string) bool { return st.failedBackends[id] })
		if !ok {
			return nextCluster
		}
		switch p.attempt(w, r, req, st, clusterID, b, qest, qok) {
		case attemptDone:
			return nextDone
		case attemptSibling:
			st.failBackend(b.ID)
		case attemptOtherCluster:
			st.failBackend(b.ID)
			return nextCluster
		}
	}
}

type attemptResult int

const (
	attemptDone attemptResult = iota
	attemptSibling
	attemptOtherCluster
)

// statusClientClosed labels requests whose client left before an answer
// (nginx's 499).
const statusClientClosed = 499

// attempt sends the request to one backend (hub.md §3.4).
func (p *Proxy) attempt(w http.ResponseWriter, r *http.Request, req *request, st *loop, clusterID string, b state.Backend, qest uint64, qok bool) attemptResult {
	t := req.target
	st.attempts++
	res := p.store.Reserve(t, clusterID, b.ID, req.rreq.InputTokens, req.rreq.Priority)
	rt, ok := p.tunnels.RoundTripper(b.ID)
	var resp *http.Response
	var err error
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !ok {
		err = errors.New("no tunnel to backend " + b.ID)
	} else {
		// The host is a placeholder: the tunnel RoundTripper sends every
		// request to its one pylon, whatever the URL says.
		out, berr := http.NewRequestWithContext(ctx, http.MethodPost, "http://pylon"+r.URL.RequestURI(), bytes.NewReader(req.body))
		if berr != nil {
			openai.WriteError(w, openai.Internal("building upstream request"))
			return attemptDone
		}
		out.Header = forwardHeaders(r.Header)
		if qok {
			out.Header[canonExpectedQueueMs] = []string{strconv.FormatUint(qest, 10)}
		}
		out.ContentLength = int64(len(req.body))
		var headArrived atomic.Bool
		timer := p.cfg.Clock.AfterFunc(p.cfg.RequestTimeout, func() {
			if !headArrived.Load() {
				cancel()
			}
		})
		// Checked first: building the arguments allocates on every
		// request, and production hubs log at warn.
		if p.cfg.Log.Enabled(ctx, slog.LevelInfo) {
			p.cfg.Log.Info("proxying request", "request_id", req.rreq.ID, "routing_key", t.RoutingKey, "model_id", t.Model,
				"input_tokens", req.rreq.InputTokens, "routing_algorithm", req.route.Algorithm, "inference_server_id", b.ID,
				"attempt", st.attempts, "connect_retries", st.connectRetries, "request_retries", st.requestRetries)
		}
		_, aspan := p.startAttemptSpan(ctx, out, req, st, clusterID, b, qok)
		var sent time.Time
		if aspan.IsRecording() {
			sent = p.cfg.Clock.Now()
		}
		resp, err = rt.RoundTrip(out)
		headArrived.Store(true)
		timer.Stop()
		var ttfb time.Duration
		if !sent.IsZero() {
			ttfb = p.cfg.Clock.Since(sent)
		}
		endAttemptSpan(aspan, resp, err, ttfb)
	}
	if err != nil {
		if r.Context().Err() != nil {
			p.cfg.Metrics.attempt(t, b.ID, "proxy_"+strconv.Itoa(statusClientClosed))
			p.done(req, b.ID, statusClientClosed)
			return attemptDone
		}
		p.cfg.Metrics.attempt(t, b.ID, "proxy_502")
		p.cfg.Log.Warn("tunnel upstream request failed", "request_id", req.rreq.ID, "inference_server_id", b.ID, "err", err)
		switch {
		case req.noRetries || (!req.budgetUntil.IsZero() && !p.cfg.Clock.Now().Before(req.budgetUntil)):
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
	p.cfg.Metrics.attempt(t, b.ID, "upstream_"+strconv.Itoa(resp.StatusCode))
	p.cfg.Metrics.proxyDuration(t, b.ID, p.cfg.Clock.Since(req.start))

	reason := strings.TrimSpace(headers.First(resp.Header, canonRetryReason))
	if resp.StatusCode == http.StatusTooManyRequests && isTrue(headers.First(resp.Header, canonRetryable)) && reason == headers.ReasonQueueEstimateMismatch {
		res.Release()
	}
	if p.retryable(resp) {
		if reason == "" {
			reason = "retryable_upstream_response"
		}
		exhausted := ""
		switch {
		case req.noRetries || (!req.budgetUntil.IsZero() && !p.cfg.Clock.Now().Before(req.budgetUntil)):
			exhausted = "retry_budget_exhausted"
		case st.requestRetries >= p.cfg.MaxRequestRetries:
			exhausted = reason
		}
		if exhausted == "" {
			st.requestRetries++
			p.cfg.Metrics.retry(t, reason)
			_ = resp.Body.Close()
			if reason == headers.ReasonQueueEstimateMismatch {
				p.cfg.Log.Warn("retrying request on a sibling backend after local queue mismatch", "request_id", req.rreq.ID, "inference_server_id", b.ID)
				return attemptSibling
			}
			p.cfg.Log.Warn("retrying request after retryable upstream response", "request_id", req.rreq.ID, "inference_server_id", b.ID,
				"status", resp.StatusCode, "reason", reason)
			return attemptOtherCluster
		}
		p.cfg.Metrics.exhausted(t, exhausted)
	}
	if !httpguts.ValidHeaderFieldValue(b.ID) || !httpguts.ValidHeaderFieldValue(b.URL) || !httpguts.ValidHeaderFieldValue(clusterID) {
		_ = resp.Body.Close()
		p.cfg.Log.Error("backend identity is not a valid header value", "request_id", req.rreq.ID,
			"inference_server_id", b.ID, "cluster_id", clusterID)
		openai.WriteError(w, openai.Internal("the serving backend cannot be named in a response header"))
		p.done(req, b.ID, http.StatusInternalServerError)
		return attemptDone
	}
	err = p.relay(w, resp, clusterID, b)
	p.done(req, b.ID, resp.StatusCode)
	if err != nil && r.Context().Err() == nil {
		// The upstream stream broke after the head: abort the client's
		// stream so that it reads as truncated, not complete (hub.md
		// §3.5), as httputil.ReverseProxy does.
		p.cfg.Log.Warn("upstream response body failed; aborting the client stream", "request_id", req.rreq.ID,
			"inference_server_id", b.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return attemptDone
}

// retryable applies hub.md §3.4 step 8: a retryable status and the pylon's
// signal (an explicit false always blocks).
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

// forwardHeaders is the request header set sent to the pylon: everything
// but hop-by-hop headers, Host, the routing method, the hint the hub
// consumes, and the headers only the hub may set (hub.md §3.2 step 12).
func forwardHeaders(in http.Header) http.Header {
	out := make(http.Header, len(in))
	headers.CopyExcept(out, in, notForwarded)
	return out
}

// notForwarded is the set forwardHeaders leaves out.
var notForwarded = headers.NewSet(append([]string{"Host", headers.RoutingMethod, headers.StargateLastClusterID, headers.StargateRetryable,
	headers.StargateRetryReason, headers.StargateRetryAfterMs, headers.StargateExpectedQueueMs, headers.StargateErrorCode}, headers.HopByHop...)...)

// notRelayed is the set of upstream response headers relay leaves out.
var notRelayed = headers.NewSet(append([]string{"Content-Length", headers.StargateRetryable, headers.StargateRetryReason,
	headers.StargateRetryAfterMs, headers.StargateExpectedQueueMs, headers.StargateErrorCode}, headers.HopByHop...)...)

// The headers the hub sets or reads on every request and answer, in
// canonical form: Header.Set and Get canonicalise their key, allocating a
// new string for these lower-case names on every call.
var (
	canonExpectedQueueMs    = http.CanonicalHeaderKey(headers.StargateExpectedQueueMs)
	canonInferenceServerID  = http.CanonicalHeaderKey(headers.InferenceServerID)
	canonInferenceServerURL = http.CanonicalHeaderKey(headers.InferenceServerURL)
	canonClusterID          = http.CanonicalHeaderKey(headers.StargateClusterID)
	canonRetryReason        = http.CanonicalHeaderKey(headers.StargateRetryReason)
	canonRetryable          = http.CanonicalHeaderKey(headers.StargateRetryable)
)

// relay writes the upstream answer: status and headers first, then the body
// flushed chunk by chunk so SSE events are never held back. It returns the
// error that ended reading the upstream body: nil at its end, and nil when
// writing to the client failed (the client is gone).
func (p *Proxy) relay(w http.ResponseWriter, resp *http.Response, clusterID string, b state.Backend) error {
	defer func() { _ = resp.Body.Close() }()
	h := w.Header()
	headers.CopyExcept(h, resp.Header, notRelayed)
	h[canonInferenceServerID] = []string{b.ID}
	if b.URL != "" {
		h[canonInferenceServerURL] = []string{b.URL}
	}
	h[canonClusterID] = []string{clusterID}
	w.WriteHeader(resp.StatusCode)
	// Every chunk is flushed as it arrives, since a body of any type may be
	// a stream. The head goes out on its own only for declared streams (SSE,
	// NDJSON), so they show their status before the first event; other
	// answers send it with their first chunk, one write fewer.
	rc := http.NewResponseController(w)
	if headers.IsStreamingContentType(resp.Header.Get("Content-Type")) {
		_ = rc.Flush()
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	remaining := resp.ContentLength // -1: unknown
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			// The chunk that completes the body is not flushed alone: it
			// goes out with the end of the response when the handler
			// returns, so a short answer costs one write to the client
			// instead of two, and the client cannot complete it any
			// earlier. The pylon sends Content-Length for the answers it
			// relays whole, and the next Read only confirms the end.
			remaining -= int64(n)
			if !errors.Is(err, io.EOF) && remaining != 0 && rc.Flush() != nil {
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// copyBuffers recycles the relay's 32 KiB copy buffers across requests.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
