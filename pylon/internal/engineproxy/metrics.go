package engineproxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the data plane's series: per-request latency, size and final
// state, retry signals, admission decisions and the engine pool (every name
// is listed in docs/metrics.md). A nil *Metrics records nothing.
type Metrics struct {
	requests         *prometheus.CounterVec
	toHeaders        *prometheus.HistogramVec
	toFirstOutput    *prometheus.HistogramVec
	duration         *prometheus.HistogramVec
	inputTokens      *prometheus.CounterVec
	inputTokensHist  *prometheus.HistogramVec
	retryableResp    *prometheus.CounterVec
	nonretryableResp *prometheus.CounterVec
	admissionResults *prometheus.CounterVec
	admissionExpMs   prometheus.Histogram
	admissionActMs   prometheus.Histogram
	engineUpG        *prometheus.GaugeVec
	engineReqs       *prometheus.CounterVec
	deadlines        *prometheus.CounterVec
	// enginePicks holds the pylon_engine_affinity_picks_total child of
	// each pickOutcome (none has no series).
	enginePicks [pickOutcomes]prometheus.Counter
}

// pickOutcome is how the engine pool chose an engine, the outcome label
// of pylon_engine_affinity_picks_total.
type pickOutcome uint8

const (
	pickNone      pickOutcome = iota // not counted: one engine, or affinity off
	pickPreferred                    // the engine the key prefers over all engines
	pickSpilled                      // another one: the preferred engine was down, full, over its bound or had failed
	pickNoKey                        // no affinity key: the least outstanding engine
	pickOutcomes
)

var (
	latencyBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	tokenBuckets    = []float64{1, 10, 100, 1000, 4000, 16000, 32000, 64000, 128000, 256000, 500000}
	queueMsBuckets  = []float64{0, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}
)

// NewMetrics registers the proxy's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	lk := []string{"model", "routing_key"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_requests_total",
			Help: "Requests served over the tunnel, by final state (complete, failed, cancelled)."}, []string{"model", "routing_key", "status"}),
		toHeaders: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pylon_request_time_to_response_headers_seconds",
			Help: "Acceptance to upstream response headers.", Buckets: latencyBuckets}, lk),
		toFirstOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pylon_request_time_to_first_output_seconds",
			Help: "Acceptance to the first output event (the chat role chunk counts).", Buckets: latencyBuckets}, lk),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pylon_request_duration_seconds",
			Help: "Acceptance to the end of the response, by final state.", Buckets: durationBuckets}, []string{"model", "routing_key", "status"}),
		inputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_request_input_tokens_total",
			Help: "x-input-tokens of requests accepted."}, lk),
		inputTokensHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pylon_request_input_tokens",
			Help: "x-input-tokens per request.", Buckets: tokenBuckets}, lk),
		retryableResp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_retryable_responses_total",
			Help: "Responses marked retryable for the hub, by reason and status."}, []string{"inference_server_id", "reason", "status"}),
		nonretryableResp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_nonretryable_failures_total",
			Help: "Failures the hub must not retry, by reason."}, []string{"inference_server_id", "reason"}),
		admissionResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_queue_admission_decisions_total",
			Help: "Queue admission decisions (accepted, rejected, missing_estimate, unknown_local_estimate, disabled)."}, []string{"inference_server_id", "model_id", "result"}),
		admissionExpMs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pylon_queue_admission_expected_ms",
			Help: "The hub's x-stargate-expected-queue-ms on checked requests.", Buckets: queueMsBuckets}),
		admissionActMs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pylon_queue_admission_actual_ms",
			Help: "The local queue estimate on checked requests.", Buckets: queueMsBuckets}),
		engineUpG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_upstream_engine_up",
			Help: "1 while the engine takes requests, 0 from a connection failure until it answers again."}, []string{"engine"}),
		engineReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_upstream_engine_requests_total",
			Help: "Request attempts sent to each engine, by outcome: the status class of its answer (2xx, 3xx, 4xx, 5xx), error, retried or cancelled."},
			[]string{"engine", "status"}),
		deadlines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_deadline_exceeded_total",
			Help: "Requests ended by their x-stargate-deadline-ms, by stage: received (the engine not called), engine (before its head) or streaming."},
			[]string{"model", "routing_key", "stage"}),
	}
	picks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pylon_engine_affinity_picks_total",
		Help: "Engines chosen for request attempts by --engine-affinity with several engines: the key's first choice (preferred), another one (spilled), or the least outstanding for a request without a key (no_key)."},
		[]string{"outcome"})
	for o, name := range map[pickOutcome]string{pickPreferred: "preferred", pickSpilled: "spilled", pickNoKey: "no_key"} {
		m.enginePicks[o] = picks.WithLabelValues(name)
	}
	reg.MustRegister(m.requests, m.toHeaders, m.toFirstOutput, m.duration, m.inputTokens, m.inputTokensHist,
		m.retryableResp, m.nonretryableResp, m.admissionResults, m.admissionExpMs, m.admissionActMs, m.engineUpG, m.engineReqs, m.deadlines,
		picks)
	return m
}

func (m *Metrics) enginePick(o pickOutcome) {
	if m != nil && m.enginePicks[o] != nil {
		m.enginePicks[o].Inc()
	}
}

func (m *Metrics) finished(info RequestInfo, out outcome, d time.Duration) {
	if m == nil {
		return
	}
	status := out.String()
	m.requests.WithLabelValues(info.Model, info.RoutingKey, status).Inc()
	m.duration.WithLabelValues(info.Model, info.RoutingKey, status).Observe(d.Seconds())
	m.inputTokens.WithLabelValues(info.Model, info.RoutingKey).Add(float64(info.InputTokens))
	m.inputTokensHist.WithLabelValues(info.Model, info.RoutingKey).Observe(float64(info.InputTokens))
}

func (m *Metrics) headers(info RequestInfo, d time.Duration) {
	if m != nil {
		m.toHeaders.WithLabelValues(info.Model, info.RoutingKey).Observe(d.Seconds())
	}
}

func (m *Metrics) firstOutput(info RequestInfo, d time.Duration) {
	if m != nil {
		m.toFirstOutput.WithLabelValues(info.Model, info.RoutingKey).Observe(d.Seconds())
	}
}

func (m *Metrics) admission(isid, model string, result admissionResult) {
	if m != nil {
		m.admissionResults.WithLabelValues(isid, model, string(result)).Inc()
	}
}

func (m *Metrics) admissionMs(expected, actual float64) {
	if m != nil {
		m.admissionExpMs.Observe(expected)
		m.admissionActMs.Observe(actual)
	}
}

func (m *Metrics) retryable(isid, reason string, status int) {
	if m != nil {
		m.retryableResp.WithLabelValues(isid, reason, strconv.Itoa(status)).Inc()
	}
}

func (m *Metrics) nonretryable(isid, reason string) {
	if m != nil {
		m.nonretryableResp.WithLabelValues(isid, reason).Inc()
	}
}

func (m *Metrics) engineUp(engine string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.engineUpG.WithLabelValues(engine).Set(v)
}

func (m *Metrics) deadlineExceeded(info RequestInfo, stage string) {
	if m != nil {
		m.deadlines.WithLabelValues(info.Model, info.RoutingKey, stage).Inc()
	}
}

func (m *Metrics) engineRequest(engine, status string) {
	if m != nil {
		m.engineReqs.WithLabelValues(engine, status).Inc()
	}
}
