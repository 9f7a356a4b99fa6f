package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pkg/stackgrow"
)

// Deps are the server's collaborators, built by main.
type Deps struct {
	// Hub is the pool of hubs every request goes to.
	Hub *hubclient.Client
	// HubAttempts is how many hubs one request may try when the
	// exchange fails before the response head; 0 means
	// hubclient.DefaultAttempts, 1 never retries.
	HubAttempts int
	Tracker     *lastcluster.Tracker
	// Limiter is nil when rate limiting is off.
	Limiter *ratelimit.Limiter
	Metrics *metrics.Metrics
	Log     *slog.Logger
	Clock   clock.Clock
	// Keys are the accepted client keys; empty means no auth
	// (--insecure-no-auth, checked by config).
	Keys   []config.APIKey
	Models config.Models
	// MaxBodyBytes caps request bodies (413 above).
	MaxBodyBytes int64
	// RoutingKeyPrefix splits the model on its first '/'.
	RoutingKeyPrefix bool
	// PromptPrefix sends the hub each prompt's prefix summary
	// (x-stargate-prompt-prefix).
	PromptPrefix bool
	// ConversationAnchor tracks a keyless conversation's last cluster
	// under its anchor; it does nothing while the tracker is off.
	ConversationAnchor bool
	// ModelURIAllowlist refuses chat, completions and embeddings calls
	// outside a model's uris (Responses always refuse).
	ModelURIAllowlist bool
	// HubResponseHeaderTimeout bounds the wait for the hub's response
	// head, streams included; 0 = none.
	HubResponseHeaderTimeout time.Duration
	// HubRequestTimeout bounds whole non-streaming exchanges; 0 = none.
	HubRequestTimeout time.Duration
	// RequestDeadline is every request's end-to-end budget, streams
	// included, unless the client's own timeout is shorter; 0 = none.
	RequestDeadline time.Duration
	// DefaultMaxOutputTokens is reserved when a request sets no maximum.
	DefaultMaxOutputTokens int64
	// TracerProvider makes the server spans; nil means tracing is off: no
	// span is made, and a client's trace context still continues to the
	// hub.
	TracerProvider trace.TracerProvider
}

// tracerName names the gateway's tracer (the OpenTelemetry instrumentation
// scope of its spans), the same as its service name.
const tracerName = "stargate-gateway"

// Server is the gateway's API handler.
type Server struct {
	d      Deps
	tracer trace.Tracer
	// tracing is false without a TracerProvider: a request without trace
	// context then skips the span machinery (see startSpan).
	tracing bool
	keys    []hashedKey
	mux     chi.Router
}

type hashedKey struct {
	sum       [sha256.Size]byte
	principal string
}

// New builds the router.
func New(d Deps) *Server {
	tp := d.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := &Server{d: d, tracer: tp.Tracer(tracerName), tracing: d.TracerProvider != nil}
	for _, k := range d.Keys {
		s.keys = append(s.keys, hashedKey{sum: sha256.Sum256([]byte(k.Key)), principal: k.Principal})
	}
	r := chi.NewRouter()
	r.Use(s.recoverer, s.observe)
	r.Group(func(r chi.Router) {
		r.Use(s.auth, rejectClientPriority)
		for _, e := range []request.Endpoint{request.Chat, request.Responses, request.Completions, request.Embeddings} {
			r.Post(e.Path(), s.endpoint(e))
		}
		r.Get("/v1/models", s.models)
	})
	r.NotFound(serve.NotFound)
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		allowed := http.MethodPost
		if strings.HasSuffix(r.URL.Path, "/models") {
			allowed = http.MethodGet
		}
		w.Header().Set("Allow", allowed)
		openai.WriteError(w, openai.MethodNotAllowed(r.Method, allowed))
	})
	s.mux = r
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A request reaches 16 KiB of stack (encoding/json under the answer's
	// usage, some thirty-five frames down), and an HTTP/2 client's request
	// runs on a new goroutine whose stack starts small: grown here, at the
	// top, the runtime copies two frames instead of thirty-five (about a
	// tenth of the handler's CPU for HTTP/2 clients). An HTTP/1
	// connection keeps its goroutine, so there the call finds the stack
	// grown and costs about 0.1 µs.
	stackgrow.To16KiB()
	s.mux.ServeHTTP(w, r)
}

type ctxKey struct{}

// reqState is per-request data middleware and handlers share.
type reqState struct {
	requestID  string
	principal  string
	routingKey string
	// method, route and active are the in-flight gauge's labels and
	// series, moved to the routing key's series once it is known.
	method, route string
	active        prometheus.Gauge
}

func state(ctx context.Context) *reqState {
	if st, ok := ctx.Value(ctxKey{}).(*reqState); ok {
		return st
	}
	return &reqState{}
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value, compared as net/http does
					panic(v)
				}
				s.d.Log.Error("handler panic", "request_id", state(r.Context()).requestID, "panic", v)
				openai.WriteError(w, openai.Internal("internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// observe assigns the request id and records the HTTP metrics.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.d.Clock.Now()
		route := routeOf(r.URL.Path)
		st := &reqState{method: r.Method, route: route}
		if id, err := headers.ParseRequestID(headers.First(r.Header, hRequestID)); err == nil {
			st.requestID = id
		} else {
			st.requestID = uuid.NewString()
		}
		setHeader(w.Header(), hRequestID, st.requestID)
		ww := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, st))
		st.active = s.d.Metrics.HTTPActive.WithLabelValues(r.Method, route, "none")
		st.active.Inc()
		defer func() {
			st.active.Dec()
			fn := functionLabel(st.routingKey)
			code := strconv.Itoa(ww.code())
			s.d.Metrics.HTTPRequests.WithLabelValues(r.Method, route, code, fn).Inc()
			s.d.Metrics.HTTPDuration.WithLabelValues(r.Method, route, code, fn).Observe(s.d.Clock.Since(start).Seconds())
		}()
		next.ServeHTTP(ww, r)
	})
}

// setRoutingKey records the request's routing key (function_id) and moves
// its in-flight gauge from function_id="none" to it: the key is only known
// once the body is parsed, after observe counted the request.
func (s *Server) setRoutingKey(st *reqState, rk string) {
	st.routingKey = rk
	if rk == "" || st.active == nil {
		return
	}
	st.active.Dec()
	st.active = s.d.Metrics.HTTPActive.WithLabelValues(st.method, st.route, rk)
	st.active.Inc()
}

// rejectClientPriority answers 400 to a request carrying x-priority, in any
// letter case and even when empty: the header is the hub's trusted
// priority, which only the gateway may set, and a silently dropped value
// would hide that from the client. It runs after auth, as upstream
// Stargate's gateway does (a caller without a valid key always gets 401),
// and before anything reads the body.
func rejectClientPriority(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if len(k) == len(headers.Priority) && strings.EqualFold(k, headers.Priority) {
				openai.WriteError(w, openai.BadRequest("", "reserved_header",
					"X-Priority is a reserved header and cannot be set by the client"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// routeOf maps a path to its bounded route label.
func routeOf(p string) string {
	switch p {
	case "/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/embeddings", "/v1/models":
		return p
	}
	return "unknown"
}

// statusWriter records the status and keeps Flush reachable through
// Unwrap (SSE needs it; style A6).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// auth checks the bearer key in constant time against every configured
// key (hashes first, so the compare does not leak the key length either).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.keys) == 0 {
			state(r.Context()).principal = "anonymous"
			next.ServeHTTP(w, r)
			return
		}
		start := s.d.Clock.Now()
		done := func(result string) {
			s.d.Metrics.AuthRequests.WithLabelValues(result).Inc()
			s.d.Metrics.AuthDuration.WithLabelValues(result).Observe(s.d.Clock.Since(start).Seconds())
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			done("missing")
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Type: openai.TypeAuthentication,
				Code: "missing_api_key", Message: "missing API key: send Authorization: Bearer <key>"})
			return
		}
		sum := sha256.Sum256([]byte(tok))
		principal := ""
		for _, k := range s.keys {
			if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 {
				principal = k.principal
			}
		}
		if principal == "" {
			done("invalid")
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Type: openai.TypeAuthentication,
				Code: "invalid_api_key", Message: "invalid API key"})
			return
		}
		done("ok")
		state(r.Context()).principal = principal
		next.ServeHTTP(w, r)
	})
}
