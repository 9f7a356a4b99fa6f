package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/hub/internal/filewatch"
	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/proxy"
	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/serve"
)

// Config is every hub setting. Flag names are upstream Stargate's where it
// has the same setting, so a deployment's flags carry over.
type Config struct {
	Listen, BackendListen, MetricsListen string
	HubID                                string
	RegistrationToken                    string
	RegistrationTokenFile                string
	MetricsPrefix                        string
	Drain                                time.Duration
	// Limits bound slow clients on the API and admin listeners.
	Limits serve.Limits

	MaxReplayBodyBytes      int64
	RetryBudgetHeader       string
	MaxRequestRetries       int
	MaxQueueMismatchRetries int
	MaxConnectRetries       int
	RequirePylonRetrySignal bool
	RequestTimeout          time.Duration
	IdleTimeoutMin          time.Duration
	IdleTimeoutMax          time.Duration
	HealthInterval          time.Duration
	LBConfigPath            string
	GatewayTokenFile        string
	OTelEndpoint            string
	OTelSampleRatio         float64
	TLSCertPath             string
	TLSKeyPath              string
	Pprof                   bool

	// LBConfigWatch reloads LBConfigPath when its directory changes,
	// LBConfigReloadDebounce after the last change; SIGHUP reloads it
	// regardless (docs/load-balancing.md#changing-routing-live).
	LBConfigWatch          bool
	LBConfigReloadDebounce time.Duration

	// ModelUnavailableWait bounds how long a request for a known model
	// with no backend waits for one to register; StartupGrace is how long
	// after start every model counts as known.
	ModelUnavailableWait time.Duration
	StartupGrace         time.Duration
	// The per-backend error breaker: on, it opens after BreakerFailures
	// failures among a backend's last BreakerWindow outcomes and refuses
	// the backend for BreakerCoolDown (doubling while probes fail).
	BreakerEnabled  bool
	BreakerFailures int
	BreakerWindow   int
	BreakerCoolDown time.Duration
	// MaxWaitingRequests bounds each target's waiting room (0 = no bound);
	// ReturningSessionPriority gives returning sessions the capacity and
	// the places of a full room first (docs/reliability.md#overload-and-shedding).
	MaxWaitingRequests       int
	ReturningSessionPriority bool
	// BackendAffinity (on or off) and BackendAffinityLoadFactor choose
	// the backend inside a cluster (state.BackendAffinity): by the
	// request's affinity key under a load bound, or round robin.
	BackendAffinity           string
	BackendAffinityLoadFactor float64
	// PrefixIndexMaxNodes, PrefixIndexMaxHolders and PrefixIndexTTL bound
	// the prefix index that prefix-aware routes read (prefixindex.Config).
	PrefixIndexMaxNodes   int
	PrefixIndexMaxHolders int
	PrefixIndexTTL        time.Duration
	// RoutingPageRecords is the routing page's record ring
	// (--routing-page-records); 0 turns the page off.
	RoutingPageRecords int

	// Who may call each listener. Every listener that serves callers
	// authenticates them unless an insecure flag says otherwise: a
	// forgotten token must stop the hub, not open it.
	AllowAnonymousClients      bool
	InsecureNoClientAuth       bool
	InsecureNoRegistrationAuth bool
	APITLSCertPath             string
	APITLSKeyPath              string
	AdminTokenFile             string
	MetricsRequireAdminToken   bool
}

// DefaultConfig is every setting at its default; the hub id is the host
// name.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Listen: "127.0.0.1:8000", BackendListen: "127.0.0.1:50071", MetricsListen: "127.0.0.1:9090",
		HubID: host, MetricsPrefix: "stargate_", Drain: 30 * time.Second, Limits: serve.DefaultLimits(),
		MaxReplayBodyBytes: 64 << 20, RetryBudgetHeader: headers.StargateMaxWaitMs,
		MaxRequestRetries: 2, MaxConnectRetries: 2, RequirePylonRetrySignal: true, MaxQueueMismatchRetries: proxy.DefaultMaxQueueMismatchRetries,
		RequestTimeout: 30 * time.Second, IdleTimeoutMin: 60 * time.Second, IdleTimeoutMax: 300 * time.Second,
		HealthInterval: time.Second, ModelUnavailableWait: proxy.DefaultModelUnavailableWait,
		StartupGrace:   proxy.DefaultStartupGrace,
		BreakerEnabled: true, BreakerFailures: breaker.DefaultConfig().Failures, BreakerWindow: breaker.DefaultConfig().Window,
		BreakerCoolDown:    breaker.DefaultConfig().CoolDown,
		MaxWaitingRequests: proxy.DefaultMaxWaitingRequests, ReturningSessionPriority: true,
		LBConfigWatch: true, LBConfigReloadDebounce: filewatch.DefaultDebounce,
		BackendAffinity: "on", BackendAffinityLoadFactor: state.DefaultBackendAffinityLoadFactor,
		PrefixIndexMaxNodes: prefixindex.DefaultMaxNodes, PrefixIndexMaxHolders: prefixindex.DefaultMaxHoldersPerNode,
		PrefixIndexTTL: prefixindex.DefaultTTL, RoutingPageRecords: routelog.DefaultRecords,
	}
}

// Register declares every setting as a flag of fs, with its environment
// variable and default.
func (c *Config) Register(fs *cli.FlagSet) {
	d := DefaultConfig()
	fs.String(&c.Listen, "listen", "HUB_LISTEN", d.Listen, "listen address for the OpenAI proxy, /v1/models and the probes; only the gateway should reach it")
	fs.String(&c.BackendListen, "backend-listen", "HUB_BACKEND_LISTEN", d.BackendListen, "listen address pylons dial for their reverse tunnels")
	fs.String(&c.MetricsListen, "metrics-listen", "HUB_METRICS_LISTEN", d.MetricsListen, "admin listen address: /metrics, /debug/state and, with --pprof, /debug/pprof/; keep it off the public network")
	fs.String(&c.HubID, "hub-id", "HUB_ID", d.HubID, "this replica's identity in handshake acks and logs")
	fs.String(&c.RegistrationToken, "registration-token", "HUB_REGISTRATION_TOKEN", "", "shared token pylons must present (prefer --registration-token-file)")
	fs.String(&c.RegistrationTokenFile, "registration-token-file", "HUB_REGISTRATION_TOKEN_FILE", "", "file holding the shared pylon token; re-read on every handshake")
	fs.String(&c.MetricsPrefix, "metrics-prefix", "HUB_METRICS_PREFIX", d.MetricsPrefix, "prefix of the hub's routing metrics")
	fs.Duration(&c.Drain, "drain-timeout", "HUB_DRAIN_TIMEOUT", d.Drain, "on SIGTERM, how long in-flight requests and streams may finish")
	c.Limits.Flags(fs, "HUB")
	fs.Int64(&c.MaxReplayBodyBytes, "proxy-max-replay-body-bytes", "HUB_PROXY_MAX_REPLAY_BODY_BYTES", d.MaxReplayBodyBytes, "largest request body (kept for retries); larger gets 413")
	fs.String(&c.RetryBudgetHeader, "proxy-retry-budget-header", "HUB_PROXY_RETRY_BUDGET_HEADER", d.RetryBudgetHeader, "request header carrying the retry budget in ms; empty disables it")
	fs.Int(&c.MaxRequestRetries, "proxy-max-request-retries", "HUB_PROXY_MAX_REQUEST_RETRIES", d.MaxRequestRetries, "retries after retryable upstream answers")
	fs.Int(&c.MaxQueueMismatchRetries, "proxy-max-queue-mismatch-retries", "HUB_PROXY_MAX_QUEUE_MISMATCH_RETRIES", d.MaxQueueMismatchRetries, "routing passes again after a pylon refused for queue_estimate_mismatch (the backend is marked full until its next registration); also bounded by the retry budget and deadline")
	fs.Int(&c.MaxConnectRetries, "proxy-max-connect-retries", "HUB_PROXY_MAX_CONNECT_RETRIES", d.MaxConnectRetries, "retries after tunnel failures")
	fs.Bool(&c.RequirePylonRetrySignal, "proxy-require-pylon-retry-signal", "HUB_PROXY_REQUIRE_PYLON_RETRY_SIGNAL", d.RequirePylonRetrySignal, "retry 429/503 only when the pylon says x-stargate-retryable: true")
	fs.Millis(&c.RequestTimeout, "tunnel-request-timeout-ms", "HUB_TUNNEL_REQUEST_TIMEOUT_MS", d.RequestTimeout, "time to the response head of one attempt")
	fs.Millis(&c.IdleTimeoutMin, "registration-update-idle-timeout-ms", "HUB_REGISTRATION_UPDATE_IDLE_TIMEOUT_MS", d.IdleTimeoutMin, "lower bound of the registration idle timeout (3 x heartbeat)")
	fs.Millis(&c.IdleTimeoutMax, "registration-update-max-idle-timeout-ms", "HUB_REGISTRATION_UPDATE_MAX_IDLE_TIMEOUT_MS", d.IdleTimeoutMax, "upper bound of the registration idle timeout")
	fs.Millis(&c.HealthInterval, "health-check-interval-ms", "HUB_HEALTH_CHECK_INTERVAL_MS", d.HealthInterval, "period of the /health RTT probe over each tunnel")
	fs.String(&c.TLSCertPath, "tls-cert-path", "HUB_TLS_CERT_PATH", "", "certificate (PEM) pylons verify on --backend-listen; with --tls-key-path enables TLS; re-read on every handshake")
	fs.String(&c.TLSKeyPath, "tls-key-path", "HUB_TLS_KEY_PATH", "", "private key (PEM) of --tls-cert-path")
	fs.Bool(&c.Pprof, "pprof", "HUB_PPROF", false, "serve the Go profiler under /debug/pprof/ on --metrics-listen")
	fs.String(&c.APITLSCertPath, "api-tls-cert-path", "HUB_API_TLS_CERT_PATH", "", "certificate (PEM) the gateway verifies on --listen; with --api-tls-key-path enables TLS (h2 and HTTP/1.1); re-read on every handshake")
	fs.String(&c.APITLSKeyPath, "api-tls-key-path", "HUB_API_TLS_KEY_PATH", "", "private key (PEM) of --api-tls-cert-path")
	fs.String(&c.AdminTokenFile, "admin-token-file", "HUB_ADMIN_TOKEN_FILE", "", "file holding a bearer token /debug/ on --metrics-listen requires (and /metrics with --metrics-require-admin-token); re-read on every request; unset: open")
	fs.Bool(&c.MetricsRequireAdminToken, "metrics-require-admin-token", "HUB_METRICS_REQUIRE_ADMIN_TOKEN", false, "require --admin-token-file's token on /metrics too (Prometheus: authorization.credentials_file)")
	fs.Millis(&c.ModelUnavailableWait, "proxy-model-unavailable-wait-ms", "HUB_PROXY_MODEL_UNAVAILABLE_WAIT_MS", d.ModelUnavailableWait, "how long a request for a known model with no backend waits for one (within its x-max-wait-ms and 60 s) before 503 model_temporarily_unavailable")
	fs.Bool(&c.BreakerEnabled, "proxy-breaker-enabled", "HUB_PROXY_BREAKER_ENABLED", d.BreakerEnabled, "per-backend error breaker: a backend whose answers keep failing (5xx, broken streams, tunnel errors) gets no requests until a probe succeeds")
	fs.Int(&c.BreakerFailures, "proxy-breaker-failures", "HUB_PROXY_BREAKER_FAILURES", d.BreakerFailures, "failures among a backend's last --proxy-breaker-window outcomes (within 60 s) that open its breaker")
	fs.Int(&c.BreakerWindow, "proxy-breaker-window", "HUB_PROXY_BREAKER_WINDOW", d.BreakerWindow, "outcomes per backend the breaker remembers")
	fs.Int(&c.MaxWaitingRequests, "proxy-max-waiting-requests", "HUB_PROXY_MAX_WAITING_REQUESTS", d.MaxWaitingRequests, "requests per model and routing key that may wait for a cluster with room at once; past it a request is refused at once with 503 waiting_room_full (0 = no bound)")
	fs.Bool(&c.ReturningSessionPriority, "proxy-returning-session-priority", "HUB_PROXY_RETURNING_SESSION_PRIORITY", d.ReturningSessionPriority, "when requests wait for capacity, returning sessions (last_cluster_affinity) get a freed cluster first and a full waiting room sheds new requests before them")
	fs.Millis(&c.BreakerCoolDown, "proxy-breaker-cool-down-ms", "HUB_PROXY_BREAKER_COOL_DOWN_MS", d.BreakerCoolDown, "how long an open breaker refuses before it lets one probe through; doubles while probes fail, up to 60 s")
	fs.String(&c.BackendAffinity, "backend-affinity", "HUB_BACKEND_AFFINITY", d.BackendAffinity, "on: inside the chosen cluster, a request goes to the backend its x-cache-affinity-key prefers (rendezvous hash) unless that one is full or over the load bound, and a request without a key to the least loaded backend; off: round robin, as upstream Stargate")
	fs.Float64(&c.BackendAffinityLoadFactor, "backend-affinity-load-factor", "HUB_BACKEND_AFFINITY_LOAD_FACTOR", d.BackendAffinityLoadFactor, "with --backend-affinity on, a backend keeps its keys while it carries at most this times the cluster's mean requests in flight (plus one); >= 1, or 0 for no bound (only a full backend moves a key)")
	fs.Int(&c.PrefixIndexMaxNodes, "prefix-index-max-nodes", "HUB_PREFIX_INDEX_MAX_NODES", d.PrefixIndexMaxNodes, "prompt-prefix checkpoints the hub remembers for prefix-aware routes (about 104 bytes each at 8 holders: the default bounds the index at 104 MiB); the least recently marked go first")
	fs.Int(&c.PrefixIndexMaxHolders, "prefix-index-max-holders", "HUB_PREFIX_INDEX_MAX_HOLDERS", d.PrefixIndexMaxHolders, "clusters one prompt-prefix checkpoint remembers as holders; a newer holder replaces the one marked longest ago")
	fs.Int(&c.RoutingPageRecords, "routing-page-records", "HUB_ROUTING_PAGE_RECORDS", d.RoutingPageRecords,
		"requests the live routing page (/ui on --metrics-listen) remembers, 56 bytes each, rounded up to a power of two in [1024, 1048576]; 0 turns the page and its records off")
	fs.Duration(&c.PrefixIndexTTL, "prefix-index-ttl", "HUB_PREFIX_INDEX_TTL", d.PrefixIndexTTL, "a cluster stops counting as a holder of a prompt prefix this long after it last served a request with it (engines evict cold prefixes without telling the hub)")
	fs.Millis(&c.StartupGrace, "proxy-startup-grace-ms", "HUB_PROXY_STARTUP_GRACE_MS", d.StartupGrace, "for this long after start every model counts as known (pylons are still reconnecting): a request for one without a backend waits instead of 404; 0 disables")
	fs.String(&c.LBConfigPath, "lb-config-path", "HUB_LB_CONFIG_PATH", "", "lb-config.json: algorithms per model; reloaded on SIGHUP and, with --lb-config-watch, when it changes (an invalid file is rejected and the old config keeps serving); unset allows every algorithm with default settings")
	fs.Bool(&c.LBConfigWatch, "lb-config-watch", "HUB_LB_CONFIG_WATCH", d.LBConfigWatch, "watch --lb-config-path's directory and reload the file when it changes (editor renames and ConfigMap ..data swaps included); SIGHUP reloads either way")
	fs.Millis(&c.LBConfigReloadDebounce, "lb-config-reload-debounce-ms", "HUB_LB_CONFIG_RELOAD_DEBOUNCE_MS", d.LBConfigReloadDebounce, "with --lb-config-watch, how long the directory must stay quiet after a change before the file is reloaded")
	fs.String(&c.OTelEndpoint, "otel-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP collector base URL for request traces (span proxy_openai_request); empty: no export, trace context still propagates")
	fs.Float64(&c.OTelSampleRatio, "otel-sample-ratio", "HUB_OTEL_SAMPLE_RATIO", 1, "share of new traces sampled (a sampled caller's trace is always continued)")
	fs.String(&c.GatewayTokenFile, "gateway-token-file", "HUB_GATEWAY_TOKEN_FILE", "", "file holding the token the gateway sends as Authorization: Bearer (its --hub-token-file); requests without it get 401; required unless --insecure-no-client-auth")
	fs.Bool(&c.AllowAnonymousClients, "allow-anonymous-clients", "HUB_ALLOW_ANONYMOUS_CLIENTS", false, "with --gateway-token-file, serve requests without the token instead of 401, with their routing headers removed (dev only: they bypass the gateway's keys and limits)")
	fs.Bool(&c.InsecureNoClientAuth, "insecure-no-client-auth", "HUB_INSECURE_NO_CLIENT_AUTH", false, "start without --gateway-token-file: every caller that reaches --listen is served and may steer routing (dev and tests only)")
	fs.Bool(&c.InsecureNoRegistrationAuth, "insecure-no-registration-auth", "HUB_INSECURE_NO_REGISTRATION_AUTH", false, "start without a registration token: any process that reaches --backend-listen may register as a pylon and receive prompts (dev and tests only)")
}

// Validate reports every invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.RegistrationToken != "" && c.RegistrationTokenFile != "" {
		errs = append(errs, errors.New("--registration-token and --registration-token-file: set one, not both"))
	}
	if c.RegistrationTokenFile != "" {
		if _, err := cli.ReadSecretFile(c.RegistrationTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--registration-token-file: %w", err))
		}
	}
	if c.MaxReplayBodyBytes < 1 {
		errs = append(errs, errors.New("--proxy-max-replay-body-bytes: must be >= 1"))
	}
	if c.MaxQueueMismatchRetries < 0 {
		errs = append(errs, errors.New("--proxy-max-queue-mismatch-retries (HUB_PROXY_MAX_QUEUE_MISMATCH_RETRIES): must be >= 0"))
	}
	if c.MaxRequestRetries < 0 || c.MaxConnectRetries < 0 {
		errs = append(errs, errors.New("--proxy-max-request-retries and --proxy-max-connect-retries: must be >= 0"))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("--tunnel-request-timeout-ms: must be > 0"))
	}
	if c.HealthInterval <= 0 {
		errs = append(errs, errors.New("--health-check-interval-ms: must be > 0"))
	}
	if c.IdleTimeoutMin < 0 || c.IdleTimeoutMax < 0 {
		errs = append(errs, errors.New("--registration-update-idle-timeout-ms and --registration-update-max-idle-timeout-ms: must be >= 0 (0 disables)"))
	}
	errs = append(errs, c.validateAuth()...)
	if c.ModelUnavailableWait < 0 {
		errs = append(errs, errors.New("--proxy-model-unavailable-wait-ms: must be >= 0"))
	}
	if c.BreakerEnabled && (c.BreakerFailures < 1 || c.BreakerWindow < c.BreakerFailures) {
		errs = append(errs, errors.New("--proxy-breaker-failures and --proxy-breaker-window: need 1 <= failures <= window"))
	}
	if c.MaxWaitingRequests < 0 {
		errs = append(errs, fmt.Errorf("--proxy-max-waiting-requests %d: must be >= 0", c.MaxWaitingRequests))
	}
	if c.BreakerEnabled && c.BreakerCoolDown <= 0 {
		errs = append(errs, errors.New("--proxy-breaker-cool-down-ms: must be > 0"))
	}
	if c.LBConfigReloadDebounce <= 0 {
		errs = append(errs, errors.New("--lb-config-reload-debounce-ms: must be > 0"))
	}
	if c.BackendAffinity != "on" && c.BackendAffinity != "off" {
		errs = append(errs, fmt.Errorf("--backend-affinity %q: want on or off", c.BackendAffinity))
	}
	if err := state.CheckBackendAffinityLoadFactor(c.BackendAffinityLoadFactor); err != nil {
		errs = append(errs, fmt.Errorf("--backend-affinity-load-factor %w", err))
	}
	if c.PrefixIndexMaxNodes < prefixindex.MinNodes || c.PrefixIndexMaxNodes > prefixindex.MaxNodesLimit {
		errs = append(errs, fmt.Errorf("--prefix-index-max-nodes (HUB_PREFIX_INDEX_MAX_NODES): must be %d to %d, got %d",
			prefixindex.MinNodes, prefixindex.MaxNodesLimit, c.PrefixIndexMaxNodes))
	}
	if c.PrefixIndexMaxHolders < 1 || c.PrefixIndexMaxHolders > prefixindex.MaxHoldersLimit {
		errs = append(errs, fmt.Errorf("--prefix-index-max-holders (HUB_PREFIX_INDEX_MAX_HOLDERS): must be 1 to %d, got %d",
			prefixindex.MaxHoldersLimit, c.PrefixIndexMaxHolders))
	}
	if c.RoutingPageRecords < 0 || c.RoutingPageRecords > routelog.MaxRecords {
		errs = append(errs, fmt.Errorf("--routing-page-records (HUB_ROUTING_PAGE_RECORDS): must be 0 (off) or at most %d, got %d",
			routelog.MaxRecords, c.RoutingPageRecords))
	}
	if c.PrefixIndexTTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("--prefix-index-ttl (HUB_PREFIX_INDEX_TTL): must be at least 1ms, got %v", c.PrefixIndexTTL))
	}
	if c.StartupGrace < 0 {
		errs = append(errs, errors.New("--proxy-startup-grace-ms: must be >= 0"))
	}
	if err := c.Tracing("").Validate(); err != nil {
		errs = append(errs, err)
	}
	if (c.TLSCertPath == "") != (c.TLSKeyPath == "") {
		errs = append(errs, errors.New("--tls-cert-path and --tls-key-path: set both or neither"))
	}
	if (c.APITLSCertPath == "") != (c.APITLSKeyPath == "") {
		errs = append(errs, errors.New("--api-tls-cert-path and --api-tls-key-path: set both or neither"))
	} else if c.APITLSCertPath != "" {
		if _, err := tls.LoadX509KeyPair(c.APITLSCertPath, c.APITLSKeyPath); err != nil {
			errs = append(errs, fmt.Errorf("--api-tls-cert-path/--api-tls-key-path: %w", err))
		}
	}
	if strings.TrimSpace(c.HubID) == "" {
		errs = append(errs, errors.New("--hub-id: must not be empty"))
	}
	return errors.Join(errs...)
}

// validateAuth checks who may call each listener: a token for the
// gateway and one for pylons, unless the matching insecure flag is given,
// and never both; the admin token file when set.
func (c *Config) validateAuth() []error {
	var errs []error
	switch {
	case c.GatewayTokenFile != "" && c.InsecureNoClientAuth:
		errs = append(errs, errors.New("--gateway-token-file and --insecure-no-client-auth: set one, not both"))
	case c.GatewayTokenFile == "" && !c.InsecureNoClientAuth:
		errs = append(errs, errors.New("--gateway-token-file: required (the token the gateway sends, its --hub-token-file); "+
			"pass --insecure-no-client-auth to serve every caller that reaches --listen instead"))
	case c.GatewayTokenFile != "":
		if _, err := cli.ReadSecretFile(c.GatewayTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--gateway-token-file: %w", err))
		}
	}
	if c.AllowAnonymousClients && c.GatewayTokenFile == "" {
		errs = append(errs, errors.New("--allow-anonymous-clients: needs --gateway-token-file (it tells anonymous callers from the gateway)"))
	}
	hasRegistrationToken := c.RegistrationToken != "" || c.RegistrationTokenFile != ""
	switch {
	case hasRegistrationToken && c.InsecureNoRegistrationAuth:
		errs = append(errs, errors.New("--registration-token(-file) and --insecure-no-registration-auth: set one, not both"))
	case !hasRegistrationToken && !c.InsecureNoRegistrationAuth:
		errs = append(errs, errors.New("--registration-token-file (or --registration-token): required, the token pylons present; "+
			"pass --insecure-no-registration-auth to accept any pylon that reaches --backend-listen instead"))
	}
	if c.AdminTokenFile != "" {
		if _, err := cli.ReadSecretFile(c.AdminTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--admin-token-file: %w", err))
		}
	} else if c.MetricsRequireAdminToken {
		errs = append(errs, errors.New("--metrics-require-admin-token: needs --admin-token-file"))
	}
	return errs
}

// Tracing is the trace export configuration of the flags.
func (c *Config) Tracing(version string) obs.TracingConfig {
	return obs.TracingConfig{Endpoint: c.OTelEndpoint, Service: ServiceName, Version: version, SampleRatio: c.OTelSampleRatio}
}

// ServiceName is the hub's OpenTelemetry service.name, named like the
// gateway's (stargate-gateway) so a trace reads tier by tier.
const ServiceName = "stargate-hub"

// PrefixIndex is the prefix index's configuration.
func (c *Config) PrefixIndex() prefixindex.Config {
	return prefixindex.Config{MaxNodes: c.PrefixIndexMaxNodes, MaxHoldersPerNode: c.PrefixIndexMaxHolders, TTL: c.PrefixIndexTTL}
}
