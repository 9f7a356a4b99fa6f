package mockengine

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are named as vLLM names them, so dashboards and scrapers written
// for vLLM read the mock unchanged. Every series carries model_name.
type metrics struct {
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	prefixQueries    prometheus.Counter
	prefixHits       prometheus.Counter
	success          *prometheus.CounterVec
	rejected         *prometheus.CounterVec
	ttft             prometheus.Histogram
	e2e              prometheus.Histogram
	queueTime        prometheus.Histogram
	prefillTime      prometheus.Histogram
}

// vLLM's TTFT buckets, so histograms from the mock and a real engine
// aggregate together.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}

var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}

func newMetrics(reg prometheus.Registerer, e *Engine) *metrics {
	labels := prometheus.Labels{"model_name": e.cfg.ModelName}
	m := &metrics{
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", ConstLabels: labels,
			Help: "Prompt tokens processed (estimated by the mock's tokeniser)."}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", ConstLabels: labels,
			Help: "Output tokens generated."}),
		prefixQueries: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total", ConstLabels: labels,
			Help: "Prompt tokens looked up in the prefix cache."}),
		prefixHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total", ConstLabels: labels,
			Help: "Prompt tokens found in the prefix cache."}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", ConstLabels: labels,
			Help: "Requests finished, by finish reason (stop, length, abort)."}, []string{"finished_reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mock_engine_rejected_requests_total", ConstLabels: labels,
			Help: "Requests refused before running, by reason (queue_full, chat_failure, bad_request, too_large)."}, []string{"reason"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds", ConstLabels: labels,
			Help: "Time from arrival to the first output token.", Buckets: ttftBuckets}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", ConstLabels: labels,
			Help: "Time from arrival to the last output token.", Buckets: latencyBuckets}),
		queueTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:request_queue_time_seconds", ConstLabels: labels,
			Help: "Time spent waiting for a running slot.", Buckets: latencyBuckets}),
		prefillTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:request_prefill_time_seconds", ConstLabels: labels,
			Help: "Time spent in the shared prefill, including contention.", Buckets: latencyBuckets}),
	}
	for _, r := range []string{"stop", "length", "abort"} {
		m.success.WithLabelValues(r)
	}
	for _, r := range []string{"queue_full", "chat_failure", "bad_request", "too_large"} {
		m.rejected.WithLabelValues(r)
	}
	reg.MustRegister(m.promptTokens, m.generationTokens, m.prefixQueries, m.prefixHits, m.success, m.rejected,
		m.ttft, m.e2e, m.queueTime, m.prefillTime,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running", ConstLabels: labels,
			Help: "Requests holding a running slot (prefill or decode)."}, func() float64 {
			r, _ := e.slots.counts()
			return float64(r)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting", ConstLabels: labels,
			Help: "Requests waiting for a running slot."}, func() float64 {
			_, w := e.slots.counts()
			return float64(w)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc", ConstLabels: labels,
			Help: "Fraction of the KV cache capacity in use (0 to 1)."}, func() float64 {
			st := e.kv.Stats()
			if st.CapacityTokens == 0 {
				return 0
			}
			return float64(st.UsedTokens) / float64(st.CapacityTokens)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mock_engine_prefill_active", ConstLabels: labels,
			Help: "Requests sharing the prefill capacity right now."}, func() float64 {
			return float64(e.prefill.Active())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mock_engine_kv_cache_blocks", ConstLabels: labels,
			Help: "Blocks held in the prefix cache."}, func() float64 {
			return float64(e.kv.Stats().Blocks)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mock_engine_kv_cache_evicted_blocks_total", ConstLabels: labels,
			Help: "Blocks evicted from the prefix cache."}, func() float64 {
			return float64(e.kv.Stats().EvictedBlocks)
		}),
	)
	return m
}
