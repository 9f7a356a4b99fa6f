package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pylon/internal/engineproxy"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// Config is every pylon setting: one field per flag (names, environment
// variables and defaults are in docs/pylon.md#flags), then the lists
// Validate derives from them.
type Config struct {
	StargateAddress      string
	UpstreamBaseURL      string
	ModelNames           string
	InferenceServerID    string
	ClusterID            string
	Region               string
	Listen               string
	MetricsListen        string
	MinUpdateInterval    time.Duration
	AuthToken            string
	AuthTokenFile        string
	InsecureNoAuth       bool
	InsecurePlaintext    bool
	InitialInputTPS      float64
	PinInputTPS          bool
	MaxEngineConcurrency uint64
	DoCalibration        bool
	CalibRequests        int
	CalibPromptUnits     int
	CalibConcurrency     int
	CalibStepTimeout     time.Duration
	HealthProbeTimeout   time.Duration
	HealthPaths          string
	HealthWait           time.Duration
	KVCachePath          string
	StreamMode           string
	StreamPath           string
	Drain                time.Duration
	// Limits bound slow clients on the probe and metrics listeners.
	Limits serve.Limits

	RetryableCodes                string
	RequireUpstreamRetryHeader    bool
	UpstreamRetryHeader           string
	PropagateRetryAfter           bool
	LocalConnectFailuresRetryable bool
	QueueMismatchEnabled          bool
	QueueMismatchMinDelta         time.Duration
	QueueMismatchTolerance        float64
	QueueMismatchRetryAfter       time.Duration
	UpstreamBackend               string
	PriorityCeiling               uint64
	TLS                           bool
	TLSCertPath                   string
	TLSInsecure                   bool
	Pprof                         bool

	// EngineAffinity (on or off) and EngineAffinityLoadFactor choose the
	// engine among several (engineproxy.Config.EngineAffinity).
	EngineAffinity           string
	EngineAffinityLoadFactor float64
	// EngineAffinityWhenFull (spill or queue) is what a keyed request does
	// when its engine is at its share of MaxEngineConcurrency
	// (engineproxy.Config.EngineAffinityQueueWhenFull).
	EngineAffinityWhenFull string

	// Set by Validate.

	// Models is --model-name split, trimmed and de-duplicated, in order.
	Models []string
	// RetryableStatusCodes is --pylon-retryable-upstream-status-codes
	// parsed.
	RetryableStatusCodes []int
	// Engines is --upstream-http-base-url split and normalised (no
	// trailing slash); UpstreamBaseURL becomes the same list joined by
	// commas.
	Engines []string
	// HealthPathList is --upstream-health-path split.
	HealthPathList []string
	// HubAddresses is --stargate-address split.
	HubAddresses []string
}

// Default returns the configuration before any flag is parsed.
func Default() Config {
	d := engineproxy.Defaults()
	return Config{
		StargateAddress: "127.0.0.1:50071", InferenceServerID: "pylon",
		Listen: "127.0.0.1:9088", MetricsListen: "127.0.0.1:9089",
		MinUpdateInterval: time.Second, CalibRequests: 5, CalibPromptUnits: 4096, CalibConcurrency: 4,
		CalibStepTimeout: 30 * time.Second, HealthProbeTimeout: 5 * time.Second, HealthWait: 60 * time.Second,
		StreamMode: "auto", StreamPath: "/pylon/v1/stats/stream", Drain: 30 * time.Second, Limits: serve.DefaultLimits(),
		RetryableCodes: "429,503", RequireUpstreamRetryHeader: true, UpstreamRetryHeader: headers.StargateUpstreamRetryable,
		PropagateRetryAfter: true, QueueMismatchEnabled: true, QueueMismatchMinDelta: d.QueueMismatchMinDelta,
		QueueMismatchTolerance: d.QueueMismatchToleranceFactor, UpstreamBackend: "dynamo", PriorityCeiling: 3600,
		EngineAffinity: "on", EngineAffinityLoadFactor: d.EngineAffinityLoadFactor, EngineAffinityWhenFull: "spill",
	}
}

// Register binds every field to its flag and environment variable on fs.
func (c *Config) Register(fs *cli.FlagSet) {
	d := Default()
	fs.String(&c.StargateAddress, "stargate-address", "PYLON_STARGATE_ADDRESS", d.StargateAddress, "hub backend listeners, comma separated host:port; a name resolving to several addresses (headless Service) gets one tunnel per address")
	fs.String(&c.UpstreamBaseURL, "upstream-http-base-url", "PYLON_UPSTREAM_HTTP_BASE_URL", "", "the engines' base URLs, comma separated (required); several engines serving the same models share the pylon's requests")
	fs.String(&c.ModelNames, "model-name", "PYLON_MODEL_NAME", "", "models served by the engine, comma separated (required; discovery is not implemented)")
	fs.String(&c.InferenceServerID, "inference-server-id", "PYLON_INFERENCE_SERVER_ID", d.InferenceServerID, "this backend's id, unique among the hub's pylons")
	fs.String(&c.ClusterID, "cluster-id", "PYLON_CLUSTER_ID", "", "capacity domain shared by pylons of one cluster (default: --inference-server-id)")
	fs.String(&c.Region, "region", "PYLON_REGION", "", "region label the hub's routing page groups this cluster under (display only; routing measures RTT)")
	fs.String(&c.Listen, "listen", "PYLON_LISTEN", d.Listen, "HTTP listen address of /healthz and /readyz")
	fs.String(&c.MetricsListen, "metrics-listen", "PYLON_METRICS_LISTEN", d.MetricsListen, "Prometheus /metrics listen address")
	fs.Millis(&c.MinUpdateInterval, "min-update-interval-ms", "PYLON_MIN_UPDATE_INTERVAL_MS", d.MinUpdateInterval, "registration heartbeat period; changes are also sent at once")
	fs.String(&c.AuthToken, "auth-token", "STARGATE_AUTH_TOKEN", "", "shared registration token (wins over --auth-token-file)")
	fs.String(&c.AuthTokenFile, "auth-token-file", "STARGATE_AUTH_TOKEN_FILE", "", "file holding the registration token, re-read on every dial")
	fs.Bool(&c.InsecureNoAuth, "insecure-no-auth", "PYLON_INSECURE_NO_AUTH", false, "dial the hubs without a registration token (development only; the hub must accept unauthenticated pylons)")
	fs.Bool(&c.InsecurePlaintext, "insecure-plaintext", "PYLON_INSECURE_PLAINTEXT", false, "allow sending the registration token over tunnels without TLS, where anyone on the path can read it (loopback, trusted networks and tests only)")
	fs.Float64(&c.InitialInputTPS, "initial-input-tps", "PYLON_INITIAL_INPUT_TPS", 0, "seed last_mean_input_tps (counts as 5 samples); > 0 and at most 1e9")
	fs.Bool(&c.PinInputTPS, "benchmark-pin-input-tps", "PYLON_BENCHMARK_PIN_INPUT_TPS", false, "publish --initial-input-tps unchanged (benchmarks)")
	fs.Uint64(&c.MaxEngineConcurrency, "max-engine-concurrency", "PYLON_MAX_ENGINE_CONCURRENCY", 0, "requests the engines behind this pylon run at once (all engines together), published as max_engine_concurrency; 0 = unknown, the hub then never filters on capacity")
	fs.Bool(&c.DoCalibration, "do-calibration", "PYLON_DO_CALIBRATION", false, "measure input TPS with a startup ramp (only for a cluster's sole pylon)")
	fs.Int(&c.CalibRequests, "calibration-requests", "PYLON_CALIBRATION_REQUESTS", d.CalibRequests, "requests in the first calibration step (doubling)")
	fs.Int(&c.CalibPromptUnits, "calibration-prompt-units", "PYLON_CALIBRATION_PROMPT_UNITS", d.CalibPromptUnits, "largest calibration prompt (floor 256)")
	fs.Int(&c.CalibConcurrency, "calibration-max-concurrency", "PYLON_CALIBRATION_MAX_CONCURRENCY", d.CalibConcurrency, "largest calibration concurrency (floor 1)")
	fs.Millis(&c.CalibStepTimeout, "bringup-calibration-timeout-ms", "PYLON_BRINGUP_CALIBRATION_TIMEOUT_MS", d.CalibStepTimeout, "a calibration step slower than this ends the ramp")
	fs.Millis(&c.HealthProbeTimeout, "bringup-canary-timeout-ms", "PYLON_BRINGUP_CANARY_TIMEOUT_MS", d.HealthProbeTimeout, "timeout of each startup health probe")
	fs.String(&c.HealthPaths, "upstream-health-path", "PYLON_UPSTREAM_HEALTH_PATH", "", "engine health paths tried before /health and /v1/health/ready, comma separated")
	fs.Millis(&c.HealthWait, "upstream-health-wait-ms", "PYLON_UPSTREAM_HEALTH_WAIT_MS", d.HealthWait, "how long startup waits for the engine to be healthy; 0 probes once")
	fs.String(&c.KVCachePath, "kv-cache-stats-path", "PYLON_KV_CACHE_STATS_PATH", "", "engine KV stats path polled every second (e.g. /kv-cache/stats); empty disables")
	fs.String(&c.StreamMode, "engine-stats-stream", "PYLON_ENGINE_STATS_STREAM", d.StreamMode, "engine stats stream: auto (fall back on 404/405/501), required or off")
	fs.String(&c.StreamPath, "engine-stats-stream-path", "PYLON_ENGINE_STATS_STREAM_PATH", d.StreamPath, "engine stats stream path")
	fs.Duration(&c.Drain, "drain-timeout", "PYLON_DRAIN_TIMEOUT", d.Drain, "on SIGTERM, how long in-flight streams may finish")
	c.Limits.Flags(fs, "PYLON")
	fs.String(&c.RetryableCodes, "pylon-retryable-upstream-status-codes", "PYLON_RETRYABLE_UPSTREAM_STATUS_CODES", d.RetryableCodes, "engine statuses that may be retried, comma separated; empty disables")
	fs.Bool(&c.RequireUpstreamRetryHeader, "pylon-require-upstream-retry-header", "PYLON_REQUIRE_UPSTREAM_RETRY_HEADER", d.RequireUpstreamRetryHeader, "retry only when the engine also sent --pylon-upstream-retry-header: true")
	fs.String(&c.UpstreamRetryHeader, "pylon-upstream-retry-header", "PYLON_UPSTREAM_RETRY_HEADER", d.UpstreamRetryHeader, "engine header that marks a 429/503 retryable")
	fs.Bool(&c.PropagateRetryAfter, "pylon-propagate-retry-after", "PYLON_PROPAGATE_RETRY_AFTER", d.PropagateRetryAfter, "turn an engine Retry-After into x-stargate-retry-after-ms")
	fs.Bool(&c.LocalConnectFailuresRetryable, "pylon-local-connect-failures-retryable", "PYLON_LOCAL_CONNECT_FAILURES_RETRYABLE", false, "mark engine connect failures retryable")
	fs.Bool(&c.QueueMismatchEnabled, "pylon-queue-mismatch-retry-enabled", "PYLON_QUEUE_MISMATCH_RETRY_ENABLED", d.QueueMismatchEnabled, "refuse with 429 queue_estimate_mismatch when the local queue exceeds the hub's estimate")
	fs.Millis(&c.QueueMismatchMinDelta, "pylon-queue-mismatch-min-delta-ms", "PYLON_QUEUE_MISMATCH_MIN_DELTA_MS", d.QueueMismatchMinDelta, "admission threshold: at least expected + this")
	fs.Float64(&c.QueueMismatchTolerance, "pylon-queue-mismatch-tolerance-factor", "PYLON_QUEUE_MISMATCH_TOLERANCE_FACTOR", d.QueueMismatchTolerance, "admission threshold: at least ceil(expected x this); finite, > 0")
	fs.Millis(&c.QueueMismatchRetryAfter, "pylon-queue-mismatch-retry-after-ms", "PYLON_QUEUE_MISMATCH_RETRY_AFTER_MS", 0, "hint sent with a queue-mismatch 429; 0 sends none")
	fs.String(&c.UpstreamBackend, "pylon-upstream-backend", "PYLON_UPSTREAM_BACKEND", d.UpstreamBackend, "dynamo (set x-dynamo-request-priority) or passthrough")
	fs.Bool(&c.TLS, "tls", "PYLON_TLS", false, "speak TLS to the hubs, trusting the system roots (implied by --tls-cert-path and --tls-insecure)")
	fs.String(&c.TLSCertPath, "tls-cert-path", "STARGATE_TLS_CERT_PATH", "", "CA certificate (PEM) that signs the hubs' certificates; enables TLS")
	fs.Bool(&c.TLSInsecure, "tls-insecure", "PYLON_TLS_INSECURE", false, "TLS without verifying the hub's certificate (tests and trusted networks only)")
	fs.Alias("quic-insecure", "tls-insecure")
	fs.Bool(&c.Pprof, "pprof", "PYLON_PPROF", false, "serve the Go profiler under /debug/pprof/ on --metrics-listen")
	fs.String(&c.EngineAffinity, "engine-affinity", "PYLON_ENGINE_AFFINITY", d.EngineAffinity, "with several engines, on: a request goes to the engine its x-cache-affinity-key prefers (rendezvous hash) unless that one is down, at its share of --max-engine-concurrency or over the load bound, and a request without a key to the least loaded engine; off: the least loaded engine for every request")
	fs.String(&c.EngineAffinityWhenFull, "engine-affinity-when-full", "PYLON_ENGINE_AFFINITY_WHEN_FULL", d.EngineAffinityWhenFull, "with --engine-affinity on, what a request with a key does when its engine is at its share of --max-engine-concurrency: spill (go to the least loaded other engine, where its prefix is not cached) or queue (wait on its own engine; only a down engine or the load bound moves it)")
	fs.Float64(&c.EngineAffinityLoadFactor, "engine-affinity-load-factor", "PYLON_ENGINE_AFFINITY_LOAD_FACTOR", d.EngineAffinityLoadFactor, "with --engine-affinity on, an engine keeps its keys while it carries at most this times the engines' mean requests in flight (plus one); >= 1, or 0 for no bound (only a down or full engine moves a key)")
	fs.Uint64(&c.PriorityCeiling, "pylon-priority-ceiling", "PYLON_PRIORITY_CEILING", d.PriorityCeiling, "x-dynamo-request-priority = max(0, ceiling - x-priority)")
}

// Validate checks every field and the combinations that make no sense
// (two bootstrap sources for the input TPS, a pinned TPS without a seed,
// two token sources), naming the flags, and fills in the derived lists.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	// One engine or several, comma separated: each validated, duplicates
	// refused; UpstreamBaseURL becomes the normalised list.
	engines, err := engineproxy.ParseUpstreamURLs(c.UpstreamBaseURL)
	if err != nil {
		errs = append(errs, err)
	}
	c.Engines = engines
	if len(engines) > 0 {
		c.UpstreamBaseURL = strings.Join(engines, ",")
	}
	c.Models = nil
	for _, m := range strings.Split(c.ModelNames, ",") {
		m = strings.TrimSpace(m)
		if m != "" && !slices.Contains(c.Models, m) {
			c.Models = append(c.Models, m)
		}
	}
	if len(c.Models) == 0 {
		bad("--model-name: at least one model is required (model discovery is not implemented)")
	}
	if strings.TrimSpace(c.StargateAddress) == "" {
		bad("--stargate-address: required")
	}
	if c.InferenceServerID == "" {
		bad("--inference-server-id: must not be empty")
	}
	if len(c.Region) > protocol.MaxRegionBytes || strings.TrimSpace(c.Region) != c.Region {
		bad("--region: at most %d bytes, without leading or trailing spaces", protocol.MaxRegionBytes)
	}
	if c.DoCalibration && c.InitialInputTPS != 0 {
		bad("--do-calibration and --initial-input-tps: choose one bootstrap source")
	}
	if c.InitialInputTPS < 0 || math.IsNaN(c.InitialInputTPS) || c.InitialInputTPS > stats.MaxTPS {
		bad("--initial-input-tps: must be > 0 and at most %g", float64(stats.MaxTPS))
	}
	if c.PinInputTPS && c.InitialInputTPS == 0 {
		bad("--benchmark-pin-input-tps: requires --initial-input-tps")
	}
	if c.DoCalibration && c.CalibRequests <= 0 {
		bad("--calibration-requests: must be > 0 when calibrating")
	}
	if c.MinUpdateInterval <= 0 {
		bad("--min-update-interval-ms: must be > 0")
	}
	if c.AuthToken != "" && c.AuthTokenFile != "" {
		bad("--auth-token and --auth-token-file: set one, not both")
	}
	if err := c.validateTrust(); err != nil {
		errs = append(errs, err)
	}
	if c.AuthTokenFile != "" {
		if _, err := cli.ReadSecretFile(c.AuthTokenFile); err != nil {
			bad("--auth-token-file: %v", err)
		}
	}
	c.RetryableStatusCodes = nil
	for _, s := range strings.Split(c.RetryableCodes, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			bad("--pylon-retryable-upstream-status-codes: %q is not an HTTP status", s)
			continue
		}
		c.RetryableStatusCodes = append(c.RetryableStatusCodes, n)
	}
	if c.EngineAffinity != "on" && c.EngineAffinity != "off" {
		bad("--engine-affinity %q: want on or off", c.EngineAffinity)
	}
	if c.EngineAffinityWhenFull != "spill" && c.EngineAffinityWhenFull != "queue" {
		bad("--engine-affinity-when-full %q: want spill or queue", c.EngineAffinityWhenFull)
	}
	if err := engineproxy.CheckLoadFactor(c.EngineAffinityLoadFactor); err != nil {
		bad("--engine-affinity-load-factor %v", err)
	}
	if c.PriorityCeiling > math.MaxUint32 {
		bad("--pylon-priority-ceiling: must fit in 32 bits")
	}
	c.HealthPathList = splitList(c.HealthPaths)
	c.HubAddresses = splitList(c.StargateAddress)
	return errors.Join(errs...)
}

// TLSEnabled reports whether the tunnels speak TLS: --tls, or implied by
// --tls-cert-path or --tls-insecure.
func (c *Config) TLSEnabled() bool { return c.TLS || c.TLSCertPath != "" || c.TLSInsecure }

// validateTrust enforces what the registration token protects. Whoever
// holds it can register clusters with every hub that trusts it and so
// receive users' prompts, so the pylon never dials without one unless told
// to (--insecure-no-auth), and never writes it on a connection without TLS
// unless told to (--insecure-plaintext): the pylon speaks first, so a
// plaintext pylon pointed at a TLS hub, or at anything listening on the
// hub's address, would hand the token to whoever reads the wire.
func (c *Config) validateTrust() error {
	token := c.AuthToken != "" || c.AuthTokenFile != ""
	switch {
	case !token && !c.InsecureNoAuth:
		return errors.New("no registration token: set --auth-token-file (STARGATE_AUTH_TOKEN_FILE) or --auth-token (STARGATE_AUTH_TOKEN), " +
			"or --insecure-no-auth (PYLON_INSECURE_NO_AUTH) to dial the hubs without one (development only)")
	case token && c.InsecureNoAuth:
		return errors.New("--insecure-no-auth with --auth-token or --auth-token-file: choose one")
	case token && !c.TLSEnabled() && !c.InsecurePlaintext:
		return errors.New("the registration token would cross the network in plaintext: enable TLS (--tls-cert-path or --tls), " +
			"or set --insecure-plaintext (PYLON_INSECURE_PLAINTEXT) when the path to the hubs is trusted (loopback, tests)")
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
