package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Metrics are the hub's request-path series of hub.md §8.1, all with the
// stargate_ prefix. A nil *Metrics records nothing.
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
	reg.MustRegister(m.requests, m.attempts, m.retries, m.selections, m.exhaustedTotal, m.replayBuffer, m.proxyDur, m.routingDur, m.activeInference)
	return m
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
		m.requests.WithLabelValues(t.RoutingKey, t.Model, backend, strconv.Itoa(status)).Inc()
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
