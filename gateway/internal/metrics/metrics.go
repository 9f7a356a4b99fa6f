package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/headers"
)

// Namespace prefixes every gateway series; upstream Stargate's gateway
// uses the same prefix, so its dashboards and alerts apply unchanged.
const Namespace = "llm_api_gateway"

// durationBuckets are the duration buckets of upstream Stargate's
// gateway: 5 ms to 75 s, wide enough for a whole stream.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 25, 50, 75}

// LookupBuckets span 1 ms to 50 ms: a last-cluster lookup is cut at its
// deadline (20 ms by default), so the default buckets would put almost
// every lookup in their first one.
var LookupBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05}

// SyncBuckets span 1 ms to 1 s: a sync round is one store add per active
// key, a few milliseconds on a healthy cluster, and should stay well
// under its interval.
var SyncBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// LookupResults and WriteResults are the result labels of the last-cluster
// lookup and write counters; New exports each at 0 from the start, so a
// dashboard can tell "never happened" from "not exported".
var (
	LookupResults = []string{"hit", "miss", "timeout", "error", "skipped"}
	WriteResults  = []string{"success", "error", "timeout", "skipped"}
	// Endpoints are the endpoint label values (request.Endpoint.String()).
	Endpoints = []string{"chat_completions", "responses", "completions", "embeddings"}
	// AuthResults are the client key check outcomes.
	AuthResults = []string{"ok", "missing", "invalid"}
	// SessionStates are the session_state label values: the hub's classes
	// of x-stargate-session-state, then SessionNone.
	SessionStates = []string{headers.SessionStateNew, headers.SessionStateReturning, headers.SessionStateStale, SessionNone}
	// CacheResults are the cache label values of the session prompt-token
	// counter.
	CacheResults = []string{CacheHit, CacheMiss}
	// HintResults are the result label values of the last-cluster hint
	// counter: the hinted session was served on its hinted cluster, or
	// elsewhere.
	HintResults = []string{HintFollowed, HintMoved}
)

// SessionNone is the session_state of an answer without a known class:
// the hub did not classify the request (no affinity key, or a route without
// last_cluster_affinity), or sent a value that is not a class.
const SessionNone = "none"

// The cache label values of the session prompt-token counter: the usage's
// cached prompt tokens, and the rest.
const (
	CacheHit  = "hit"
	CacheMiss = "miss"
)

// The result label values of the last-cluster hint counter.
const (
	HintFollowed = "followed"
	HintMoved    = "moved"
)

// SessionState is the session_state label of an x-stargate-session-state
// value: the class when the value is exactly one of the hub's three (the
// HTTP client has already trimmed the spaces around it), SessionNone
// otherwise. It returns a constant, never v, so the label stays bounded
// whatever the hub sends.
func SessionState(v string) string {
	switch v {
	case headers.SessionStateNew:
		return headers.SessionStateNew
	case headers.SessionStateReturning:
		return headers.SessionStateReturning
	case headers.SessionStateStale:
		return headers.SessionStateStale
	}
	return SessionNone
}

// Metrics holds the gateway's instruments.
type Metrics struct {
	HTTPRequests      *prometheus.CounterVec
	HTTPDuration      *prometheus.HistogramVec
	HTTPActive        *prometheus.GaugeVec
	UpstreamRequests  *prometheus.CounterVec
	UpstreamDuration  *prometheus.HistogramVec
	Tokens            *prometheus.CounterVec
	ProviderTime      *prometheus.HistogramVec
	FirstToken        *prometheus.HistogramVec
	StreamDuration    *prometheus.HistogramVec
	AuthRequests      *prometheus.CounterVec
	AuthDuration      *prometheus.HistogramVec
	AllowlistMisses   *prometheus.CounterVec
	LastClusterLookup *prometheus.CounterVec
	LastClusterWrite  *prometheus.CounterVec
	LookupDuration    prometheus.Histogram
	RateLimitDecision *prometheus.CounterVec
	RateLimitErrors   *prometheus.CounterVec
	OlricMembers      prometheus.Gauge

	// The local modes' series, ours: how admissions were answered and
	// what the background reconciliation with Olric costs
	// (docs/metrics.md, section "Gateway"), and how the last-cluster
	// cache in front of Olric answers.
	RateLimitChecks       *prometheus.CounterVec
	RateLimitSyncDuration prometheus.Histogram
	LastClusterCache      *prometheus.CounterVec

	// The session series (docs/metrics.md, section "Gateway"): requests,
	// prompt tokens and first-token times per session class, and whether
	// a hinted session stayed on its hinted cluster. They are ours, not
	// upstream's: upstream's gateway sees no session class.
	SessionRequests     *prometheus.CounterVec
	SessionPromptTokens *prometheus.CounterVec
	SessionFirstToken   *prometheus.HistogramVec
	HintResults         *prometheus.CounterVec

	// The hub pool's series (docs/gateway.md#several-hubs), ours: every
	// retry of a request on another hub by the reason the attempt failed,
	// and each hub's passive health.
	HubRetries *prometheus.CounterVec
	HubUp      *prometheus.GaugeVec
}

// RateLimitStoreOps are the op label values of the rate-limit store
// error counter: reserve and settle on the request path, sync in the local
// mode's background rounds.
var RateLimitStoreOps = []string{"reserve", "settle", "sync"}

// RateLimitPaths are the path label values of the local mode's check
// counter.
var RateLimitPaths = []string{"local", "store"}

// RetryReasons are the reason label values of the hub retry counter
// (hubclient.FailureReasons): connect, no connection could be made;
// exchange, the connection broke before the response head.
var RetryReasons = []string{"connect", "exchange"}

// New registers every gateway series on reg, with the last-cluster and
// auth series pre-initialised to 0 so dashboards see them before traffic.
func New(reg prometheus.Registerer) *Metrics {
	n := func(s string) string { return Namespace + "_" + s }
	m := &Metrics{
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("http_requests_total"),
			Help: "Requests served, by method, route pattern, status and function_id (routing key, \"none\" when absent)."},
			[]string{"method", "route", "status", "function_id"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("http_request_duration_seconds"),
			Help: "Time from request start to handler return (streams: to the end of the stream).", Buckets: durationBuckets},
			[]string{"method", "route", "status", "function_id"}),
		HTTPActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n("http_active_requests"),
			Help: "Requests in flight."}, []string{"method", "route", "function_id"}),
		UpstreamRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("upstream_requests_total"),
			Help: "Requests sent to the hub, by result (success|error: transport error or status >= 400) and status (code or \"error\")."},
			[]string{"upstream", "result", "status", "function_id"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("upstream_request_duration_seconds"),
			Help: "Time until the hub's response headers arrived.", Buckets: durationBuckets},
			[]string{"upstream", "result", "status", "function_id"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("llm_tokens_total"),
			Help: "Tokens reported in backend usage, by endpoint, token_type (prompt|completion|total|cached) and stream."},
			[]string{"endpoint", "token_type", "stream", "function_id"}),
		ProviderTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("provider_time_seconds"),
			Help: "Provider time by phase: queue, prompt and completion from the usage's queue_time, prompt_time and completion_time when the backend reports them; total is the gateway's wall time of the upstream exchange.", Buckets: durationBuckets},
			[]string{"endpoint", "phase", "stream", "function_id"}),
		FirstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("stream_first_token_seconds"),
			Help: "Time from request start to the first streamed event carrying output.", Buckets: durationBuckets},
			[]string{"endpoint", "function_id"}),
		StreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("stream_duration_seconds"),
			Help: "Duration of relayed streams by status (completed|canceled|error).", Buckets: durationBuckets},
			[]string{"endpoint", "status", "function_id"}),
		AuthRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("auth_requests_total"),
			Help: "Client API-key checks by result (ok|missing|invalid)."}, []string{"result"}),
		AuthDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("auth_request_duration_seconds"),
			Help: "Duration of client API-key checks by result (ok|missing|invalid).", Buckets: durationBuckets}, []string{"result"}),
		AllowlistMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("model_uri_allowlist_rejections_total"),
			Help: "Calls to a model on a path its uris do not list, by endpoint: refused with 400 (Responses, or with MODEL_URI_ALLOWLIST_ENABLED) or only logged."},
			[]string{"endpoint"}),
		LastClusterLookup: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("last_cluster_lookups_total"),
			Help: "Last-cluster lookups by result (hit|miss|timeout|error|skipped)."}, []string{"result"}),
		LastClusterWrite: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("last_cluster_writes_total"),
			Help: "Last-cluster writes after 2xx headers by result (success|error|timeout|skipped)."}, []string{"result"}),
		LookupDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: n("last_cluster_lookup_duration_seconds"),
			Help: "Duration of every attempted last-cluster lookup, whatever its result.", Buckets: LookupBuckets}),
		RateLimitDecision: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("rate_limit_decisions_total"),
			Help: "Admission decisions by result (allowed|limited|fail_open|fail_closed) and dimension (requests|tokens|none)."},
			[]string{"result", "dimension"}),
		RateLimitErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("rate_limit_store_errors_total"),
			Help: "Rate-limit store failures by operation (reserve|settle) and kind (error|timeout)."}, []string{"op", "kind"}),
		OlricMembers: prometheus.NewGauge(prometheus.GaugeOpts{Name: n("olric_cluster_members"),
			Help: "Members of the embedded Olric cluster this replica sees (0 when Olric is off)."}),
		RateLimitChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("rate_limit_checks_total"),
			Help: "Rate-limit counter checks in the local mode by path: local (answered from this replica's state) or store (a round trip to Olric: a key not synced in the last round, or close to its limit or to this replica's share)."},
			[]string{"path"}),
		RateLimitSyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: n("rate_limit_sync_duration_seconds"),
			Help: "Duration of one round of the local mode's reconciliation with Olric (one add per key used since the previous round).", Buckets: SyncBuckets}),
		LastClusterCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("last_cluster_cache_total"),
			Help: "The last-cluster cache in front of Olric, by op and result: lookup hit (answered locally) or miss (asked Olric); write stored (sent to Olric) or suppressed (the same cluster was stored less than the cache TTL ago)."},
			[]string{"op", "result"}),
		SessionRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("session_requests_total"),
			Help: "2xx hub answers by endpoint and session_state (the hub's x-stargate-session-state: new|returning|stale, or none)."},
			[]string{"endpoint", "session_state", "function_id"}),
		SessionPromptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("session_prompt_tokens_total"),
			Help: "Prompt tokens of 2xx answers' usage by session_state, split into cache=hit (the usage's cached tokens) and cache=miss (the rest)."},
			[]string{"session_state", "cache", "function_id"}),
		SessionFirstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n("session_first_token_seconds"),
			Help: "Time from request start to the first hub event carrying output, streamed or aggregated, by session_state.", Buckets: durationBuckets},
			[]string{"endpoint", "session_state", "function_id"}),
		HintResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("last_cluster_hint_results_total"),
			Help: "2xx answers to requests that carried a last-cluster hint, by result: followed (served on the hinted cluster) or moved."},
			[]string{"result"}),
		HubRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: n("hub_retries_total"),
			Help: "Requests sent again to another hub because the attempt failed before the response head, by reason: connect (no connection) or exchange (the connection broke)."},
			[]string{"reason"}),
		HubUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n("hub_up"),
			Help: "Passive health of each hub by dial address: 1 while its last exchange got a response head (or it has had none yet), 0 after one failed before its head; the series goes when the address stops resolving."},
			[]string{"hub"}),
	}
	reg.MustRegister(m.HTTPRequests, m.HTTPDuration, m.HTTPActive, m.UpstreamRequests, m.UpstreamDuration,
		m.Tokens, m.ProviderTime, m.FirstToken, m.StreamDuration, m.AuthRequests, m.AuthDuration, m.AllowlistMisses,
		m.LastClusterLookup, m.LastClusterWrite, m.LookupDuration, m.RateLimitDecision, m.RateLimitErrors, m.OlricMembers,
		m.RateLimitChecks, m.RateLimitSyncDuration, m.LastClusterCache,
		m.SessionRequests, m.SessionPromptTokens, m.SessionFirstToken, m.HintResults,
		m.HubRetries, m.HubUp)
	for _, r := range RetryReasons {
		m.HubRetries.WithLabelValues(r)
	}
	for _, r := range HintResults {
		m.HintResults.WithLabelValues(r)
	}
	for _, r := range LookupResults {
		m.LastClusterLookup.WithLabelValues(r)
	}
	for _, r := range WriteResults {
		m.LastClusterWrite.WithLabelValues(r)
	}
	for _, e := range Endpoints {
		m.AllowlistMisses.WithLabelValues(e)
	}
	for _, r := range AuthResults {
		m.AuthRequests.WithLabelValues(r)
		m.AuthDuration.WithLabelValues(r)
	}
	for _, op := range RateLimitStoreOps {
		for _, k := range []string{"error", "timeout"} {
			m.RateLimitErrors.WithLabelValues(op, k)
		}
	}
	for _, p := range RateLimitPaths {
		m.RateLimitChecks.WithLabelValues(p)
	}
	for _, r := range []string{"hit", "miss"} {
		m.LastClusterCache.WithLabelValues("lookup", r)
	}
	for _, r := range []string{"stored", "suppressed"} {
		m.LastClusterCache.WithLabelValues("write", r)
	}
	return m
}
