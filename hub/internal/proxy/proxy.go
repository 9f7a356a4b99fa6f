package proxy

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/hub/internal/waitroom"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// Store is the routing state as the proxy reads and reserves it.
type Store interface {
	Snapshot(t routing.Target) *routing.Snapshot
	// Known reports whether a registration has listed t since the hub
	// started (state.Store.Known).
	Known(t routing.Target) bool
	// Activated is closed the next time any target gains its first active
	// backend (state.Store.Activated).
	Activated() <-chan struct{}
	// Publications and PublishedAfter are t's waking-publication signal,
	// which ends a routing wait when a change may give the request room
	// (state.Store.PublishedAfter).
	Publications(t routing.Target) uint64
	PublishedAfter(t routing.Target, seen uint64) <-chan struct{}
	NextBackend(t routing.Target, clusterID, affinityKey string, skip func(backendID string) bool) (state.Backend, bool)
	HasBackend(t routing.Target, clusterID string, skip func(backendID string) bool) bool
	Reserve(t routing.Target, clusterID, backendID string, tokens uint64, prio uint32) state.Reservation
	// MarkFull records a backend's queue_estimate_mismatch refusal: it
	// counts as full until its next registration (state.Store.MarkFull).
	MarkFull(t routing.Target, clusterID, backendID string, queueMs uint64) bool
}

// Tunnels gives the transport to a connected backend. The requests it is
// given file the header names the hub knows in lower case (forwardHeaders),
// as HTTP/2 sends them: a RoundTripper that reads the request in process
// must use those keys, not Header.Get.
type Tunnels interface {
	RoundTripper(backendID string) (http.RoundTripper, bool)
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
	// MaxQueueMismatchRetries bounds the retries after a pylon's 429
	// queue_estimate_mismatch in one request, on a sibling backend or
	// through another routing pass (DefaultMaxQueueMismatchRetries); those
	// retries do not use MaxRequestRetries
	// (docs/design/hub-request.md#queue-refusals).
	MaxQueueMismatchRetries int
	// RetryableStatusCodes is --proxy-retryable-status-codes (429, 503).
	RetryableStatusCodes []int
	// RequirePylonRetrySignal is --proxy-require-pylon-retry-signal (true).
	RequirePylonRetrySignal bool
	// RetryBudgetHeader is --proxy-retry-budget-header; empty disables it.
	RetryBudgetHeader string
	// MaxRoutingWait caps x-max-wait-ms (60 s), and is the routing wait of
	// a request without the header when its load balancer asks to wait.
	MaxRoutingWait time.Duration
	// MaxWaitSleep bounds one sleep of a routing wait (1 s,
	// dispatch.DefaultMaxWaitSleep). A waiting request wakes at its
	// target's next waking publication; the bound only guards against the
	// changes that wake nobody (docs/design/hub-request.md#waits).
	MaxWaitSleep time.Duration
	// GatewayToken is --gateway-token-file's token. When set, a request
	// without Authorization: Bearer <token> is refused with 401, so a
	// caller that reaches the hub directly cannot bypass the gateway's API
	// keys and rate limits. Empty means every caller is trusted
	// (--insecure-no-client-auth).
	GatewayToken string
	// AllowAnonymous is --allow-anonymous-clients: with a GatewayToken, a
	// request without it is served instead of refused, with its routing
	// and x-stargate-* headers removed before parsing so it cannot steer
	// routing.
	AllowAnonymous bool
	// ConfiguredModel reports whether lb-config names model; such a model
	// is known even before any pylon registered it. Nil names none. It is
	// the first generation's; SetGeneration replaces it.
	ConfiguredModel func(model string) bool
	// ModelUnavailableWait bounds how long a request for a known model
	// with no backend waits for one to register
	// (--proxy-model-unavailable-wait-ms, 15 s), within the request's own
	// routing wait; then it is a 503 model_temporarily_unavailable.
	ModelUnavailableWait time.Duration
	// StartupGrace is how long after New every model counts as known
	// (--proxy-startup-grace-ms, 15 s): after a hub restart the pylons
	// reconnect within their backoff (at most 10 s) and a request
	// meanwhile must wait for them, not get the 404 of a model nobody
	// serves. 0 disables it.
	StartupGrace time.Duration
	// Prefix is the prefix index that prefix-aware routes read and every
	// answered request of such a route feeds
	// (docs/load-balancing.md#content-prefix-affinity); nil disables
	// content-prefix routing, and those routes then see no summary.
	Prefix PrefixIndex
	// Breakers is the per-backend breaker; nil disables it.
	Breakers *breaker.Set
	// WaitingRoom is the overload policy of requests waiting for a cluster
	// with room: --proxy-max-waiting-requests (Limit, 1024 per target) and
	// --proxy-returning-session-priority (ReturningFirst, on).
	WaitingRoom waitroom.Config

	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *Metrics
	// Records, when set, gets one entry per request that reached the
	// routing loop, as it ends (the routing page's log).
	Records Recorder
	// TracerProvider and Propagator trace requests
	// (docs/design/hub-request.md#tracing); nil takes the otel globals at
	// New (set them first, e.g. with obs.SetupTracing). Without an
	// exporter spans do not record.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// Seed seeds the per-request random sources; 0 picks one at random.
	Seed uint64
}

// Defaults returns the hub's defaults, the same as upstream Stargate's so
// that a deployment moving between the two keeps its retry and wait
// behaviour.
func Defaults() Config {
	limits := dispatch.DefaultLimits()
	return Config{
		MaxReplayBodyBytes:      64 << 20,
		RequestTimeout:          30 * time.Second,
		MaxRequestRetries:       2,
		MaxConnectRetries:       2,
		MaxQueueMismatchRetries: DefaultMaxQueueMismatchRetries,
		RetryableStatusCodes:    []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
		RequirePylonRetrySignal: true,
		RetryBudgetHeader:       headers.StargateMaxWaitMs,
		MaxRoutingWait:          limits.MaxRoutingWait,
		MaxWaitSleep:            limits.MaxWaitSleep,
		ModelUnavailableWait:    DefaultModelUnavailableWait,
		StartupGrace:            DefaultStartupGrace,
		WaitingRoom:             waitroom.Config{Limit: DefaultMaxWaitingRequests, ReturningFirst: true},
	}
}

// DefaultMaxQueueMismatchRetries is generous on purpose: a refusal marks
// its backend full until the backend's next registration, so a request
// that passes again waits for that registration (or goes elsewhere), and
// a second refusal of the same request needs a new race on fresh
// statistics: about one per registration interval, so 16 refusals span
// 4 s at a 250 ms interval and 16 s at the default 1 s. The request's
// routing wait, retry budget and deadline bound it as well; the count
// stops a pylon that refuses whatever the estimate after 16 round trips
// of a few milliseconds each.
const DefaultMaxQueueMismatchRetries = 16

// DefaultMaxWaitingRequests bounds each target's waiting room: at the
// demo fleet's rate a room this size holds several seconds of arrivals,
// and past it a burst is refused at once instead of holding bodies and
// goroutines for the whole routing wait.
const DefaultMaxWaitingRequests = 1024

// DefaultModelUnavailableWait and DefaultStartupGrace cover a pylon's or
// the hub's restart: a pylon redials within its backoff (at most 10 s)
// and registers within one heartbeat of connecting, so 15 s rides out a
// restart while bounding how many requests (and their bodies) pile up
// while a model is gone for good.
const (
	DefaultModelUnavailableWait = 15 * time.Second
	DefaultStartupGrace         = 15 * time.Second
)

// Proxy serves the inference endpoints. Build it with New.
type Proxy struct {
	cfg     Config
	limits  dispatch.Limits
	store   Store
	tunnels Tunnels
	// gen is the load-balancer configuration new requests capture
	// (SetGeneration).
	gen   atomic.Pointer[Generation]
	rooms *waitroom.Rooms
	rngs  sync.Pool
	// escapes counts stargate_session_escapes_total again for
	// /debug/state (Escapes).
	escapes escapeCounts

	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	seq        atomic.Uint64
	started    time.Time // for StartupGrace
}

// New returns a proxy whose first generation is resolver with
// cfg.ConfiguredModel and no hash. A nil Clock is the wall clock and a nil
// Log discards.
func New(cfg Config, store Store, tunnels Tunnels, resolver lb.Resolver) *Proxy {
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
	p := &Proxy{cfg: cfg, store: store, tunnels: tunnels, rooms: waitroom.New(cfg.WaitingRoom),
		limits: dispatch.Limits{MaxRoutingWait: cfg.MaxRoutingWait, MaxWaitSleep: cfg.MaxWaitSleep},
		tracer: cfg.TracerProvider.Tracer(tracerName), propagator: cfg.Propagator, started: cfg.Clock.Now()}
	p.SetGeneration(Generation{Resolver: resolver, ConfiguredModel: cfg.ConfiguredModel})
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64() //nolint:gosec // G404: load balancing needs spread, not secrecy.
	}
	p.rngs.New = func() any { return rand.New(rand.NewPCG(seed, p.seq.Add(1))) } //nolint:gosec // G404: as above.
	return p
}

// Handler returns the inference routes, behind Authenticate.
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
	return p.Authenticate(mux)
}

// Authenticate applies the gateway token to every request of next
// (docs/hub.md#trust): a request bearing it has the token removed (it
// authenticated the gateway to this hub and is not for the pylon or the
// engine); with AllowAnonymous any other request loses its steering
// headers; otherwise any other request is a 401 that says only that
// authentication failed, never why. The hub wraps GET /v1/models with it
// too.
func (p *Proxy) Authenticate(next http.Handler) http.Handler {
	if p.cfg.GatewayToken == "" {
		return next
	}
	want := tokenHash(p.cfg.GatewayToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header
		switch {
		case bearerMatches(h.Get("Authorization"), want):
			h.Del("Authorization")
		case p.cfg.AllowAnonymous:
			stripSteering(h)
		default:
			p.cfg.Metrics.unauthorized()
			w.Header().Set("WWW-Authenticate", `Bearer realm="stargate-hub"`)
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Type: openai.TypeAuthentication,
				Code: ErrorCodeUnauthorized, Message: "authentication required"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ErrorCodeUnauthorized is the code of the hub's 401.
const ErrorCodeUnauthorized = "unauthorized"

// ErrorCodeModelUnavailable is the code (and x-stargate-error-code) of the
// 503 for a known model that had no backend for the whole wait: a
// transient outage a client should retry, unlike the 404 of a model
// nobody serves.
const ErrorCodeModelUnavailable = "model_temporarily_unavailable"

// serve handles one request Authenticate let through: parse, read the body,
// route.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	ctx, span := p.startRequestSpan(r)
	defer span.End()
	r = r.WithContext(ctx)
	// The generation is captured once, before the routing headers are
	// read: everything after this (the route, waits, retries, the answer's
	// hash header) belongs to it.
	gen := p.gen.Load()
	stampGeneration(w.Header(), gen)
	req, oerr := p.parse(r, gen)
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
	if !req.deadline.IsZero() {
		// The deadline bounds everything from here: a request that
		// arrives with none left is answered at once, and one whose
		// deadline passes while it waits or while its cluster works is
		// cancelled, which resets its tunnel stream to the pylon.
		if !req.deadline.After(req.start) {
			p.deadlineExceeded(w, req, "", stageReceived)
			return
		}
		var stop func()
		r, stop = p.withDeadline(r, req)
		defer stop()
	}
	if !p.readBody(w, r, req) {
		return
	}
	rng := p.rngs.Get().(*rand.Rand)
	defer p.rngs.Put(rng)
	p.route(w, r, req, rng)
	if req.expired {
		// The routing loop ended the request as if its client had left
		// (done recorded nothing): the deadline did, so it gets its 504.
		p.deadlineExceeded(w, req, "", stageRouting)
	}
}

// readBody buffers the request body for replay on retries; a body over the
// replay limit is a 413 before any routing.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, req *request) bool {
	if r.ContentLength > p.cfg.MaxReplayBodyBytes {
		openai.WriteError(w, openai.TooLarge(p.cfg.MaxReplayBodyBytes))
		return false
	}
	body, oerr := readDeclared(r)
	if body == nil && oerr == nil {
		body, oerr = openai.ReadBody(w, r, p.cfg.MaxReplayBodyBytes)
	}
	if oerr != nil {
		openai.WriteError(w, oerr)
		return false
	}
	req.body = body
	p.cfg.Metrics.replayBytes(req.target.Model, len(body))
	return true
}

// readDeclared reads a body of declared length (already checked against the
// replay limit) into one buffer of exactly that size. io.ReadAll would start
// at 512 bytes and grow by appending: for a 256 KiB prompt that is a dozen
// allocations and copies, twice the body in garbage, for bytes whose size
// the request states. It returns nil, nil when the length is not declared.
// The server stops the body at its Content-Length, so the declared bytes
// are all there is; a body that ends early is a 400, as in openai.ReadBody.
func readDeclared(r *http.Request) ([]byte, *openai.Error) {
	if r.ContentLength <= 0 {
		return nil, nil
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, openai.BadRequest("", "body_read_error", "reading request body: %v", err)
	}
	return body, nil
}
