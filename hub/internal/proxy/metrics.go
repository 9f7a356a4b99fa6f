package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Metrics are the hub's request-path series (docs/metrics.md#hub), all
// with the stargate_ prefix by default. A nil *Metrics records nothing.
type Metrics struct {
	requests        *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	retries         *prometheus.CounterVec
	selections      *prometheus.CounterVec
	exhaustedTotal  *prometheus.CounterVec
	replayBuffer    *prometheus.HistogramVec
	proxyDur        *prometheus.HistogramVec
	routingDur      *prometheus.HistogramVec
	activeInference *prometheus.GaugeVec
	kvFallbacks     *prometheus.CounterVec
	admissions      *prometheus.CounterVec
	sessions        *prometheus.CounterVec
	escapes         *prometheus.CounterVec
	sessionTargets  sync.Map // sessionTarget → struct{}: targets whose six pairs exist
	unauthorizedN   prometheus.Counter
	backendWaits    *prometheus.CounterVec
	backendWaiting  *prometheus.GaugeVec
	deadlines       *prometheus.CounterVec
	prefixSummaries *prometheus.CounterVec
	prefixTiers     *prometheus.CounterVec
}

// sessionTarget is one label set of routing_session_selections_total before
// its state and selection.
type sessionTarget struct {
	target    routing.Target
	algorithm string
}

// NewMetrics registers the metrics on reg under prefix (default stargate_).
func NewMetrics(reg prometheus.Registerer, prefix string) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "requests_total",
			Help: "Final outcome of every proxied request; inference_server_id is empty when no backend answered."},
			[]string{"routing_key", "model", "inference_server_id", "status"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "proxy_attempts_total",
			Help: "Upstream attempts by result: upstream_<status> or proxy_<status> for transport failures."},
			[]string{"routing_key", "model", "inference_server_id", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "proxy_retries_total",
			Help: "Retries by reason: connect_failover, queue_estimate_mismatch, a pylon reason, retryable_upstream_response."},
			[]string{"routing_key", "model", "reason"}),
		selections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_selections_total",
			Help: "Cluster selections by algorithm; selection is primary (rank 1) or fallback."},
			[]string{"routing_key", "model", "algorithm", "selection"}),
		exhaustedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "proxy_retry_exhausted_total",
			Help: "Requests that ran out of retries: retry_budget_exhausted, connect_retries_exhausted, no_eligible_backend, or a pylon reason."},
			[]string{"routing_key", "model", "reason"}),
		replayBuffer: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "proxy_replay_buffer_bytes",
			Help:    "Request body bytes held for replay.",
			Buckets: []float64{0, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}},
			[]string{"model"}),
		proxyDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "proxy_duration_seconds",
			Help:    "Request start to upstream response head.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}},
			[]string{"routing_key", "model", "inference_server_id"}),
		routingDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "routing_duration_seconds",
			Help:    "Start of the routing loop to the first backend pick.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1}},
			[]string{"routing_key", "model"}),
		activeInference: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "active_inference_servers",
			Help: "Active backends per routing target."}, []string{"routing_key", "model"}),
	}
	m.kvFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_kv_free_token_fallback_selections_total",
		Help: "Selections that skipped a higher-ranked cluster for lack of free KV cache (consider_kv_free_tokens)."},
		[]string{"routing_key", "model", "algorithm"})
	m.admissions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "admission_rejections_total",
		Help: "Requests rejected before routing: input_work_limit_exceeded or input_work_capacity_unavailable."},
		[]string{"routing_key", "model", "reason"})
	m.sessions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_session_selections_total",
		Help: "Selections of requests classified by last_cluster_affinity: session_state new|returning|stale, selection primary|fallback."},
		[]string{"routing_key", "model", "algorithm", "session_state", "selection"})
	m.unauthorizedN = prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "unauthorized_requests_total",
		Help: "Requests refused with 401 for lacking the gateway token (--gateway-token-file)."})
	m.backendWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "model_unavailable_waits_total",
		Help: "Requests for a known model that had no backend and waited for one: outcome appeared, timed_out or client_gone."},
		[]string{"routing_key", "model", "outcome"})
	m.backendWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "model_unavailable_waiting",
		Help: "Requests waiting now for a backend of a known model that has none."}, []string{"routing_key", "model"})
	reg.MustRegister(m.requests, m.attempts, m.retries, m.selections, m.exhaustedTotal, m.replayBuffer, m.proxyDur, m.routingDur,
		m.activeInference, m.kvFallbacks, m.admissions, m.sessions, m.unauthorizedN, m.backendWaits, m.backendWaiting)
	m.escapes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "session_escapes_total",
		Help: "Classified requests answered (2xx) by a cluster other than their session's own, by reason: new_not_waiting, group_saturated, cluster_lost, retry."},
		[]string{"routing_key", "model", "reason"})
	m.deadlines = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "deadline_exceeded_total",
		Help: "Requests ended by their x-stargate-deadline-ms, by stage: received, routing, upstream or streaming."},
		[]string{"routing_key", "model", "stage"})
	m.prefixSummaries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "prefix_summaries_total",
		Help: "Requests of prefix-aware routes by their x-stargate-prompt-prefix: ok, absent, invalid or unknown_version (the last two route as absent)."},
		[]string{"routing_key", "model", "result"})
	m.prefixTiers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "prefix_routed_total",
		Help: "Requests with a prompt summary answered 2xx, by the prefix tier of the decision that served them: cache, split, overflow or load."},
		[]string{"routing_key", "model", "tier"})
	reg.MustRegister(m.deadlines, m.escapes, m.prefixSummaries, m.prefixTiers)
	return m
}

func (m *Metrics) deadlineExceeded(t routing.Target, stage string) {
	if m != nil {
		m.deadlines.WithLabelValues(t.RoutingKey, t.Model, stage).Inc()
	}
}

func (m *Metrics) unauthorized() {
	if m != nil {
		m.unauthorizedN.Inc()
	}
}

func (m *Metrics) waitingForBackend(t routing.Target, delta float64) {
	if m != nil {
		m.backendWaiting.WithLabelValues(t.RoutingKey, t.Model).Add(delta)
	}
}

func (m *Metrics) backendWait(t routing.Target, outcome string) {
	if m != nil {
		m.backendWaits.WithLabelValues(t.RoutingKey, t.Model, outcome).Inc()
	}
}

// ActiveServers publishes a target's active backend count; the state
// store calls it on every change.
func (m *Metrics) ActiveServers(t routing.Target, n int) {
	if m != nil {
		m.activeInference.WithLabelValues(t.RoutingKey, t.Model).Set(float64(n))
	}
}

func (m *Metrics) request(t routing.Target, backend string, status int) {
	if m != nil {
		m.requests.WithLabelValues(t.RoutingKey, t.Model, backend, statusLabel(status)).Inc()
	}
}

func (m *Metrics) attempt(t routing.Target, backend, result string) {
	if m != nil {
		m.attempts.WithLabelValues(t.RoutingKey, t.Model, backend, result).Inc()
	}
}

func (m *Metrics) retry(t routing.Target, reason string) {
	if m != nil {
		m.retries.WithLabelValues(t.RoutingKey, t.Model, reason).Inc()
	}
}

func (m *Metrics) selection(t routing.Target, algorithm, selection string) {
	if m != nil {
		m.selections.WithLabelValues(t.RoutingKey, t.Model, algorithm, selection).Inc()
	}
}

func (m *Metrics) exhausted(t routing.Target, reason string) {
	if m != nil {
		m.exhaustedTotal.WithLabelValues(t.RoutingKey, t.Model, reason).Inc()
	}
}

func (m *Metrics) replayBytes(model string, n int) {
	if m != nil {
		m.replayBuffer.WithLabelValues(model).Observe(float64(n))
	}
}

func (m *Metrics) proxyDuration(t routing.Target, backend string, d time.Duration) {
	if m != nil {
		m.proxyDur.WithLabelValues(t.RoutingKey, t.Model, backend).Observe(d.Seconds())
	}
}

func (m *Metrics) routingDuration(t routing.Target, d time.Duration) {
	if m != nil {
		m.routingDur.WithLabelValues(t.RoutingKey, t.Model).Observe(d.Seconds())
	}
}

func (m *Metrics) kvFallback(t routing.Target, algorithm string) {
	if m != nil {
		m.kvFallbacks.WithLabelValues(t.RoutingKey, t.Model, algorithm).Inc()
	}
}

func (m *Metrics) admissionRejected(t routing.Target, reason string) {
	if m != nil {
		m.admissions.WithLabelValues(t.RoutingKey, t.Model, reason).Inc()
	}
}

// session counts one classified selection. The first time a (target,
// algorithm) records one, all six state × selection pairs and the
// target's four escape reasons are created at zero, so a dashboard's
// rate() of a series that has not happened yet is 0, not absent.
func (m *Metrics) session(t routing.Target, algorithm, state, selection string) {
	if m == nil {
		return
	}
	key := sessionTarget{target: t, algorithm: algorithm}
	if _, seen := m.sessionTargets.Load(key); !seen {
		for _, st := range [...]string{"new", "returning", "stale"} {
			for _, sel := range [...]string{dispatch.SelectionPrimary, dispatch.SelectionFallback} {
				m.sessions.WithLabelValues(t.RoutingKey, t.Model, algorithm, st, sel).Add(0)
			}
		}
		for _, reason := range dispatch.EscapeReasons {
			m.escapes.WithLabelValues(t.RoutingKey, t.Model, reason).Add(0)
		}
		m.sessionTargets.Store(key, struct{}{})
	}
	m.sessions.WithLabelValues(t.RoutingKey, t.Model, algorithm, state, selection).Inc()
}

// escape counts one session escape (Proxy.countEscape).
func (m *Metrics) escape(t routing.Target, reason string) {
	if m != nil {
		m.escapes.WithLabelValues(t.RoutingKey, t.Model, reason).Inc()
	}
}

// statusLabels are the decimal HTTP statuses, so that labelling a request
// by its status allocates nothing: strconv.Itoa allocates above 99.
var statusLabels = func() (l [600]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

// upstreamLabels are the result labels of an upstream answer by status.
var upstreamLabels = func() (l [600]string) {
	for i := range l {
		l[i] = "upstream_" + strconv.Itoa(i)
	}
	return l
}()

// statusLabel is strconv.Itoa(status), from statusLabels when it is there.
func statusLabel(status int) string {
	if status >= 0 && status < len(statusLabels) {
		return statusLabels[status]
	}
	return strconv.Itoa(status)
}

// upstreamLabel is the attempt result of an upstream answer of status.
func upstreamLabel(status int) string {
	if status >= 0 && status < len(upstreamLabels) {
		return upstreamLabels[status]
	}
	return "upstream_" + strconv.Itoa(status)
}
