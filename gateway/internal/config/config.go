package config

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/serve"
)

// Config is everything bin/gateway reads at startup.
type Config struct {
	// Listen is the API listener (--listen).
	Listen string
	// MetricsListen is the Prometheus listener (--metrics-listen).
	MetricsListen string
	// Pprof serves the Go profiler under /debug/pprof/ on the metrics
	// listener (--pprof), which has no authentication: off by default.
	Pprof bool
	// Drain bounds the graceful drain on SIGTERM (--drain-timeout).
	Drain time.Duration
	// Limits bound slow clients on the API and metrics listeners.
	Limits serve.Limits
	// Log selects the log encoding and level.
	Log obs.LogConfig

	// HubURLs are the hubs' base URLs (--hub-url, a comma list): scheme
	// and host only, one scheme for all. A path is rejected at startup,
	// since every hub request sets its own absolute path and would
	// silently drop it. A host name resolving to several addresses (a
	// headless Service) is one hub per address
	// (docs/gateway.md#several-hubs).
	HubURLs []*url.URL
	// HubResolveInterval is how often the hub host names are resolved
	// again, so hubs joining or leaving are seen without a restart.
	HubResolveInterval time.Duration
	// HubAttempts is how many hubs one request may try when an exchange
	// fails before the response head; 1 never retries.
	HubAttempts int
	// HubTokenFile, when set, holds the bearer token the gateway sends to
	// the hub in place of the client's Authorization header. It is re-read
	// on every request so a rotated Secret applies without a restart.
	HubTokenFile string
	// HubConnectTimeout is the dial timeout to the hub.
	HubConnectTimeout time.Duration
	// HubResponseHeaderTimeout bounds the wait for the hub's response
	// head, streams included, so a hung hub cannot hold its clients
	// forever; 0 means no bound. The default leaves room for the hub's
	// routing wait and a long prefill (docs/gateway.md#hub-timeouts).
	HubResponseHeaderTimeout time.Duration
	// HubRequestTimeout bounds a whole non-streaming exchange; 0 means no
	// bound. Streams are never cut by it: a long generation is not a
	// failure.
	HubRequestTimeout time.Duration
	// RequestDeadline is every request's end-to-end budget, streams
	// included, when the client sends no shorter timeout of its own
	// (X-Stainless-Timeout); 0 means none, so only a client's timeout sets
	// a deadline (docs/gateway.md#request-deadline).
	RequestDeadline time.Duration

	// TLSCertPath and TLSKeyPath, set together, make the API listener
	// (--listen) serve TLS with that pair, re-read on every handshake so a
	// rotated certificate applies without a restart.
	TLSCertPath, TLSKeyPath string

	// MaxBodyBytes caps a request body; larger bodies get 413.
	MaxBodyBytes int64
	// RoutingKeyPrefix, when true, splits the body's model on the first
	// '/' into routing key and model, as upstream Stargate's gateway
	// always does. Off by default because common model ids (meta/llama-3)
	// contain a '/'.
	RoutingKeyPrefix bool
	// PromptPrefix sends the hub a summary of each prompt's block hashes
	// (x-stargate-prompt-prefix, docs/design/prefix-summary.md), so a
	// prefix-aware algorithm can route a request without a session to the
	// cluster already holding its prefix. On by default: it costs about
	// 2 ns of hashing per prompt byte, and a hub without such an algorithm
	// ignores it.
	PromptPrefix bool
	// ModelURIAllowlist enforces the models' uris on chat, completions and
	// embeddings; without it a miss there is only counted and logged.
	// Responses always enforce (docs/gateway.md#model-config).
	ModelURIAllowlist bool

	// APIKeys are the accepted client keys; empty only with InsecureNoAuth.
	APIKeys []APIKey
	// InsecureNoAuth disables client authentication.
	InsecureNoAuth bool

	// Models is the per-model configuration (SLO, wait, rate limits).
	Models Models

	// LastCluster configures last-cluster tracking
	// (docs/design/sessions.md#last-cluster-tracking).
	LastCluster LastCluster
	// Olric configures the embedded Olric node (docs/gateway.md#olric).
	Olric Olric
	// RateLimit configures admission (docs/design/sessions.md#rate-limits).
	RateLimit RateLimit
	// Tracing is the span export (--otel-endpoint, --otel-sample-ratio);
	// main fills in the service name and version.
	Tracing obs.TracingConfig
}

// LastCluster is the last-cluster tracking configuration (the
// STARGATE_LAST_CLUSTER_* variables, named as upstream Stargate's gateway
// names them so existing deployments keep working).
type LastCluster struct {
	Enabled         bool
	TTL             time.Duration
	LookupTimeout   time.Duration
	LocalMaxEntries int
	// WriteTimeout bounds the asynchronous write after 2xx headers, so a
	// slow store cannot pile up writes or hold shutdown.
	WriteTimeout time.Duration
	// LocalTTL is how long the cache in front of Olric answers a session's
	// lookups from this replica and suppresses rewrites of an unchanged
	// cluster; it bounds how stale a hint can be when a session's turns
	// move between gateways. 0 asks Olric on every lookup and writes on
	// every 2xx. Unused without Olric (the in-process store is local
	// already).
	LocalTTL time.Duration
	// Anchor tracks keyless conversations too, under their conversation
	// anchor: the payload key of such a request changes every turn, so
	// without it a keyless turn never carries a hint, and with several
	// hubs it lands on a hub whose prefix index never saw its history.
	Anchor bool
}

// Olric is the embedded node's configuration: whether the node runs, the
// node's own settings, and the DMaps the gateway keeps in it.
type Olric struct {
	Enabled bool
	olricnode.Config
	LastClusterDMap string
	RateLimitDMap   string
	// AuthSecretFile holds the secret shared by every replica; Load reads
	// it once into Config.AuthSecret (olric.go says why not per use).
	AuthSecretFile string
	// InsecureNoAuth lets a node with peers, discovery or an address off
	// loopback run without the secret (development only).
	InsecureNoAuth bool
}

// RateLimit is the admission configuration.
type RateLimit struct {
	Enabled bool
	// FailOpen admits requests when the shared store fails (default true).
	FailOpen bool
	// StoreTimeout bounds each store call on the request path.
	StoreTimeout time.Duration
	// DefaultMaxOutputTokens is reserved when a request names no maximum.
	DefaultMaxOutputTokens int64
	// Mode is RateLimitLocal (the default: admit from this replica's
	// state, reconciled with Olric every SyncInterval, over a limit by a
	// bounded excess, with no round trip per request) or RateLimitExact
	// (an Olric round trip per counter per request: replicas together
	// never pass a limit). Without Olric the counters are in process and
	// exact either way.
	Mode string
	// SyncInterval is the local mode's reconciliation period; with the
	// rounds' own duration it bounds over-admission
	// (docs/gateway.md#rate-limit-modes).
	SyncInterval time.Duration
}

// The rate-limit modes (--rate-limit-mode).
const (
	RateLimitLocal = "local"
	RateLimitExact = "exact"
)

// The bounds of --rate-limit-sync-interval: rounds faster than 10 ms cost
// more than the round trips they save, and past 5 s a twelfth of a window
// could pass on stale totals.
const (
	MinRateLimitSyncInterval = 10 * time.Millisecond
	MaxRateLimitSyncInterval = 5 * time.Second
)

// APIKey is one accepted client key. Key is secret and never logged;
// Principal names the caller in rate-limit keys and logs.
type APIKey struct {
	Key       string
	Principal string
}

// Models maps a model id to its settings; the entry "*" applies to models
// without their own.
type Models map[string]ModelConfig

// ModelConfig is one model's entry in the --model-config file.
type ModelConfig struct {
	// RequestSLOMs is sent as x-request-slo-ms when > 0.
	RequestSLOMs uint64 `json:"request_slo_ms"`
	// MaxWaitMs is sent as x-max-wait-ms when > 0 (the hub caps it at 60 s).
	MaxWaitMs uint64 `json:"max_wait_ms"`
	// RoutingMethod is sent as x-routing-method when non-empty.
	RoutingMethod string `json:"routing_method"`
	// RequestsPerMinute limits requests per API key and model; 0 = none.
	RequestsPerMinute int64 `json:"requests_per_minute"`
	// TokensPerMinute limits input+output tokens per API key and model.
	TokensPerMinute int64 `json:"tokens_per_minute"`
	// URIs, when set, are the API paths the model may be called on
	// (the model URI allowlist, e.g. "/v1/chat/completions";
	// docs/gateway.md#model-config).
	URIs []string `json:"uris"`
}

// AllowsPath reports whether the model may be called on path: true when it
// declares no URIs; otherwise one must match, ignoring case, surrounding
// whitespace, a missing leading '/' and trailing '/', as upstream
// Stargate's gateway matches them.
func (c ModelConfig) AllowsPath(path string) bool {
	if len(c.URIs) == 0 {
		return true
	}
	want := normURI(path)
	for _, u := range c.URIs {
		if strings.EqualFold(normURI(u), want) {
			return true
		}
	}
	return false
}

func normURI(u string) string {
	u = strings.Trim(strings.TrimSpace(u), "/")
	return "/" + u
}

// For returns the settings of model, falling back to "*".
func (m Models) For(model string) ModelConfig {
	if c, ok := m[model]; ok {
		return c
	}
	return m["*"]
}

// Load parses args and the environment into a validated Config. It returns
// cli.ErrHelp (check with cli.IsHelp) after printing --help to stdout.
func Load(args []string, getenv func(string) string, stdout io.Writer) (*Config, error) {
	c := &Config{}
	var hubURL, apiKeysFile, apiKeys, modelConfigFile, modelConfig, peers string
	fs := cli.New("gateway", "gateway: the edge gateway: OpenAI-compatible API, sessions, rate limits, last-cluster hints.", stdout)
	fs.String(&c.Listen, "listen", "GATEWAY_LISTEN", "127.0.0.1:8080", "HTTP listen address host:port")
	fs.String(&c.MetricsListen, "metrics-listen", "GATEWAY_METRICS_LISTEN", "127.0.0.1:9464", "Prometheus /metrics listen address host:port")
	fs.Bool(&c.Pprof, "pprof", "GATEWAY_PPROF", false, "serve the Go profiler under /debug/pprof/ on --metrics-listen (unauthenticated: keep that listener off the public network)")
	fs.Duration(&c.Drain, "drain-timeout", "GATEWAY_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, how long in-flight requests and streams may finish before connections are closed")
	c.Limits.Flags(fs, "GATEWAY")
	c.Log.Register(fs, "GATEWAY_")
	fs.String(&hubURL, "hub-url", "STARGATE_URL", "http://127.0.0.1:8000", "hub base URL, or a comma-separated list sharing one scheme (scheme and host; a path is rejected); a host name resolving to several addresses (a headless Service) is one hub per address")
	fs.Duration(&c.HubResolveInterval, "hub-resolve-interval", "GATEWAY_HUB_RESOLVE_INTERVAL", 10*time.Second, "how often --hub-url host names are resolved again, so hubs joining or leaving are seen without a restart")
	fs.Int(&c.HubAttempts, "hub-attempts", "GATEWAY_HUB_ATTEMPTS", 3, "hubs one request may try when the exchange fails before the hub's response head (refused, reset, closed); 1 = no retry, at most 10")
	fs.String(&c.HubTokenFile, "hub-token-file", "GATEWAY_HUB_TOKEN_FILE", "", "file holding the bearer token sent to the hub as Authorization (re-read per request)")
	fs.Duration(&c.HubConnectTimeout, "hub-connect-timeout", "STARGATE_CONNECT_TIMEOUT", 2*time.Second, "dial timeout to the hub")
	fs.Duration(&c.HubResponseHeaderTimeout, "hub-response-header-timeout", "STARGATE_RESPONSE_HEADER_TIMEOUT", DefaultHubResponseHeaderTimeout, "bound on the wait for the hub's response head, streams included (504 past it); covers the hub's routing wait and a long prefill; 0 = none")
	fs.Duration(&c.HubRequestTimeout, "hub-request-timeout", "STARGATE_REQUEST_TIMEOUT", DefaultHubRequestTimeout, "bound on a whole non-streaming hub exchange (504 past it); 0 = none (streams are never cut)")
	fs.Duration(&c.RequestDeadline, "request-deadline", "GATEWAY_REQUEST_DEADLINE", 0, "end-to-end budget of every request, streams included, sent to the hub as x-stargate-deadline-ms; a client's shorter X-Stainless-Timeout wins; 504 deadline_exceeded past it (a stream is cut); 0 = none, at most 24h")
	fs.String(&c.TLSCertPath, "tls-cert-path", "GATEWAY_TLS_CERT_PATH", "", "certificate chain (PEM) the API listener (--listen) serves; with --tls-key-path enables TLS (HTTP/2 and HTTP/1.1); re-read on every handshake")
	fs.String(&c.TLSKeyPath, "tls-key-path", "GATEWAY_TLS_KEY_PATH", "", "private key (PEM) of --tls-cert-path")
	fs.Int64(&c.MaxBodyBytes, "max-body-bytes", "GATEWAY_MAX_BODY_BYTES", 8<<20, "largest accepted request body; larger bodies get 413")
	fs.Bool(&c.RoutingKeyPrefix, "routing-key-prefix", "GATEWAY_ROUTING_KEY_PREFIX", false, "split the body's model on the first '/' into x-routing-key and x-model")
	fs.Bool(&c.PromptPrefix, "prompt-prefix-enabled", "GATEWAY_PROMPT_PREFIX_ENABLED", true, "send the hub each chat, Responses and completions prompt's prefix summary (x-stargate-prompt-prefix: block hashes at up to 64 checkpoints) for content-prefix affinity; costs about 2 ns of hashing per prompt byte")
	fs.String(&apiKeysFile, "api-keys-file", "GATEWAY_API_KEYS_FILE", "", "file with one client API key per line, optionally followed by a name")
	fs.String(&apiKeys, "api-keys", "GATEWAY_API_KEYS", "", "comma-separated client API keys, each optionally key:name (prefer --api-keys-file)")
	fs.Bool(&c.InsecureNoAuth, "insecure-no-auth", "GATEWAY_INSECURE_NO_AUTH", false, "accept requests without an API key (development only)")
	fs.String(&modelConfigFile, "model-config", "GATEWAY_MODEL_CONFIG", "", "JSON file: {\"<model>|*\": {request_slo_ms, max_wait_ms, routing_method, requests_per_minute, tokens_per_minute, uris}}")
	fs.Bool(&c.ModelURIAllowlist, "model-uri-allowlist-enabled", "MODEL_URI_ALLOWLIST_ENABLED", false, "refuse (400) chat, completions and embeddings calls to a model whose uris do not list the path (Responses always refuse); off: count and log them")
	fs.String(&modelConfig, "model-config-json", "GATEWAY_MODEL_CONFIG_JSON", "", "the --model-config document inline (for env-only deployments)")

	fs.Bool(&c.LastCluster.Enabled, "last-cluster-enabled", "STARGATE_LAST_CLUSTER_ENABLED", false, "remember each eligible session's serving cluster and hint it to the hub")
	fs.Bool(&c.LastCluster.Anchor, "last-cluster-anchor-enabled", "STARGATE_LAST_CLUSTER_ANCHOR_ENABLED", true, "with --last-cluster-enabled, also track keyless chat and Responses conversations, under a hash of their payload up to the first user message (a first turn only records it, one store write); the hub still routes on the payload key")
	fs.Duration(&c.LastCluster.TTL, "last-cluster-ttl", "STARGATE_LAST_CLUSTER_TTL", 10*time.Minute, "how long a remembered cluster lives after the last 2xx")
	fs.Duration(&c.LastCluster.LookupTimeout, "last-cluster-lookup-timeout", "STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT", 20*time.Millisecond, "hard deadline of the lookup on the request path")
	fs.Int(&c.LastCluster.LocalMaxEntries, "last-cluster-local-max-entries", "STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES", 100000, "capacity of the in-process LRU: the store when Olric is off, the cache in front of it otherwise")
	fs.Duration(&c.LastCluster.WriteTimeout, "last-cluster-write-timeout", "STARGATE_LAST_CLUSTER_WRITE_TIMEOUT", time.Second, "bound on the asynchronous write after 2xx headers")
	fs.Duration(&c.LastCluster.LocalTTL, "last-cluster-local-ttl", "STARGATE_LAST_CLUSTER_LOCAL_TTL", 5*time.Second, "with Olric, how long this replica answers a session's lookups from its own cache (of --last-cluster-local-max-entries entries) and skips rewriting an unchanged cluster: the most a hint can lag a turn served on another gateway; 0 = ask Olric every time, below --last-cluster-ttl")

	fs.Bool(&c.Olric.Enabled, "olric-enabled", "OLRIC_ENABLED", false, "start the embedded Olric node shared by the rate limiter and the last-cluster store")
	fs.String(&c.Olric.Env, "olric-env", "OLRIC_ENV", "local", "memberlist timing profile: local, lan or wan")
	fs.String(&c.Olric.BindAddr, "olric-bind-addr", "OLRIC_BIND_ADDR", "127.0.0.1", "Olric data (RESP) bind IP, also the member's name that peers and the gateway's own client dial: 127.0.0.1 alone, this host's or pod's IP with peers (no wildcard)")
	fs.Int(&c.Olric.BindPort, "olric-bind-port", "OLRIC_BIND_PORT", 3320, "Olric data (RESP) port")
	fs.String(&c.Olric.MemberlistBindAddr, "olric-memberlist-bind-addr", "OLRIC_MEMBERLIST_BIND_ADDR", "127.0.0.1", "memberlist (gossip, TCP+UDP) bind IP: 127.0.0.1 alone, this host's or pod's IP with peers (no wildcard)")
	fs.Int(&c.Olric.MemberlistBindPort, "olric-memberlist-bind-port", "OLRIC_MEMBERLIST_BIND_PORT", 3322, "memberlist port, TCP and UDP; also advertised, so uniform across replicas")
	fs.String(&c.Olric.MemberlistAdvertiseAddr, "olric-memberlist-advertise-addr", "OLRIC_MEMBERLIST_ADVERTISE_ADDR", "", "gossip IP advertised to peers; empty: the memberlist bind IP (set it only behind NAT)")
	fs.String(&peers, "olric-peers", "OLRIC_PEERS", "", "comma-separated memberlist addresses host:port of other replicas (wins over --olric-k8s-service)")
	fs.String(&c.Olric.K8sService, "olric-k8s-service", "OLRIC_K8S_SERVICE", "", "headless Service DNS name resolved to pod IPs for discovery when --olric-peers is empty")
	fs.String(&c.Olric.AuthSecretFile, "olric-auth-secret-file", "OLRIC_AUTH_SECRET_FILE", "", "file holding the secret every replica shares (at least 32 bytes, read at startup): the data port then requires AUTH and gossip is encrypted; required once peers, discovery or a non-loopback address are set")
	fs.Bool(&c.Olric.InsecureNoAuth, "olric-insecure-no-auth", "OLRIC_INSECURE_NO_AUTH", false, "run an Olric node with peers, discovery or a non-loopback address without --olric-auth-secret-file: anyone reaching its ports can rewrite rate limits and session hints (development only)")
	fs.Int(&c.Olric.ReplicaCount, "olric-replica-count", "OLRIC_REPLICA_COUNT", 2, "copies of each partition, owner included (1 = no backup: a lost member loses its hints and rate counters); fewer members keep fewer copies")
	fs.Int(&c.Olric.ReadQuorum, "olric-read-quorum", "OLRIC_READ_QUORUM", 1, "copies a read must find the key on (1..replica count); above 1 a key with a single surviving copy reads as an error")
	fs.Int(&c.Olric.WriteQuorum, "olric-write-quorum", "OLRIC_WRITE_QUORUM", 1, "copies a write must reach (1..replica count); every write fails while fewer members run, so above 1 a lone gateway keeps no hint")
	fs.String(&c.Olric.ReplicationMode, "olric-replication-mode", "OLRIC_REPLICATION_MODE", "sync", "sync: a write returns once the backups hold it; async: the owner returns at once and copies in the background (a write that returned can be lost with its owner)")
	fs.Bool(&c.Olric.ReadRepair, "olric-read-repair", "OLRIC_READ_REPAIR", false, "a read that finds copies of different ages writes the newest to the others before answering")
	fs.Uint64(&c.Olric.PartitionCount, "olric-partition-count", "OLRIC_PARTITION_COUNT", 23, "partitions (prime; each touched partition reserves a table, keep small)")
	fs.Uint64(&c.Olric.TableSize, "olric-table-size", "OLRIC_TABLE_SIZE", 1<<16, "initial bytes of each partition's storage table")
	fs.Duration(&c.Olric.StartupTimeout, "olric-startup-timeout", "OLRIC_STARTUP_TIMEOUT", 15*time.Second, "how long start, join and the cluster client's first connection may take, after discovery, before the gateway gives up")
	fs.Duration(&c.Olric.ShutdownTimeout, "olric-shutdown-timeout", "OLRIC_SHUTDOWN_TIMEOUT", 5*time.Second, "bound on the graceful leave")
	fs.Int(&c.Olric.MaxJoinAttempts, "olric-max-join-attempts", "OLRIC_MAX_JOIN_ATTEMPTS", 10, "join attempts before forming a cluster alone")
	fs.Duration(&c.Olric.JoinRetry, "olric-join-retry-interval", "OLRIC_JOIN_RETRY_INTERVAL", time.Second, "pause between join attempts")
	fs.Duration(&c.Olric.RoutingRefresh, "olric-routing-refresh", "OLRIC_ROUTING_REFRESH", time.Second, "how often the cluster client refetches partition owners (after a node loss, errors last this long)")
	fs.Duration(&c.Olric.ClientOpTimeout, "olric-client-timeout", "OLRIC_CLIENT_TIMEOUT", 200*time.Millisecond, "read/write timeout of the cluster client used by the rate limiter")
	fs.String(&c.Olric.LogLevel, "olric-log-level", "OLRIC_LOG_LEVEL", "WARN", "Olric log threshold: DEBUG, INFO, WARN or ERROR (routed to the gateway log)")
	fs.String(&c.Olric.LastClusterDMap, "olric-last-cluster-dmap", "OLRIC_LAST_CLUSTER_DMAP_NAME", "stargate-last-cluster", "DMap holding last-cluster entries")
	fs.String(&c.Olric.RateLimitDMap, "olric-dmap-name", "OLRIC_DMAP_NAME", "rate-limit", "DMap holding rate-limit counters")

	fs.Bool(&c.RateLimit.Enabled, "rate-limit-enabled", "RATE_LIMIT_ENABLED", true, "enforce the per-model limits of --model-config")
	fs.Bool(&c.RateLimit.FailOpen, "rate-limit-fail-open", "RATE_LIMIT_FAIL_OPEN", true, "admit requests when the shared store fails (false: answer 503)")
	fs.Duration(&c.RateLimit.StoreTimeout, "rate-limit-store-timeout", "RATE_LIMIT_STORE_TIMEOUT", 50*time.Millisecond, "bound on each rate-limit store call")
	fs.Int64(&c.RateLimit.DefaultMaxOutputTokens, "rate-limit-default-max-output-tokens", "RATE_LIMIT_DEFAULT_MAX_OUTPUT_TOKENS", 1, "output tokens reserved when a request sets no maximum")
	fs.String(&c.RateLimit.Mode, "rate-limit-mode", "RATE_LIMIT_MODE", RateLimitLocal, "with Olric: local admits from this replica's counts, pushed to and pulled from Olric every --rate-limit-sync-interval (no round trip per request; a bounded excess over a limit); exact sends every count to Olric (replicas together never pass a limit; a round trip per request)")
	fs.Duration(&c.RateLimit.SyncInterval, "rate-limit-sync-interval", "RATE_LIMIT_SYNC_INTERVAL", 100*time.Millisecond, "how often the local mode reconciles its counts with Olric (10ms..5s); over-admission grows with it")

	fs.String(&c.Tracing.Endpoint, "otel-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP collector base URL for spans (POSTs to <url>/v1/traces); empty: no export, trace context still propagates to the hub")
	fs.Float64(&c.Tracing.SampleRatio, "otel-sample-ratio", "GATEWAY_OTEL_SAMPLE_RATIO", 1, "share of new traces sampled, 0..1 (0 means 1; a sampled caller's trace is always continued)")

	if err := fs.Parse(args, getenv); err != nil {
		return nil, err
	}
	var errs []error
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	us, err := parseHubURLs(hubURL)
	if err != nil {
		errs = append(errs, err)
	}
	c.HubURLs = us
	if c.HubResolveInterval <= 0 {
		errs = append(errs, errors.New("--hub-resolve-interval (GATEWAY_HUB_RESOLVE_INTERVAL) must be > 0"))
	}
	if c.HubAttempts < 1 || c.HubAttempts > 10 {
		errs = append(errs, errors.New("--hub-attempts (GATEWAY_HUB_ATTEMPTS) must be from 1 (no retry) to 10"))
	}
	if c.HubTokenFile != "" {
		if _, err := cli.ReadSecretFile(c.HubTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--hub-token-file (GATEWAY_HUB_TOKEN_FILE): %w", err))
		}
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("--max-body-bytes (GATEWAY_MAX_BODY_BYTES) must be > 0"))
	}
	if c.HubResponseHeaderTimeout < 0 {
		errs = append(errs, errors.New("--hub-response-header-timeout (STARGATE_RESPONSE_HEADER_TIMEOUT) must be >= 0 (0 = none)"))
	}
	if c.HubRequestTimeout < 0 {
		errs = append(errs, errors.New("--hub-request-timeout (STARGATE_REQUEST_TIMEOUT) must be >= 0 (0 = none)"))
	}
	if c.RequestDeadline < 0 || c.RequestDeadline > headers.MaxDeadline {
		errs = append(errs, fmt.Errorf("--request-deadline (GATEWAY_REQUEST_DEADLINE) must be from 0 (none) to %v", headers.MaxDeadline))
	}
	if err := checkTLS(c.TLSCertPath, c.TLSKeyPath); err != nil {
		errs = append(errs, err)
	}
	if apiKeysFile != "" {
		b, err := os.ReadFile(apiKeysFile) //nolint:gosec // G304: the operator names this file.
		if err != nil {
			errs = append(errs, fmt.Errorf("--api-keys-file (GATEWAY_API_KEYS_FILE): %w", err))
		} else if keys, err := ParseAPIKeys(b); err != nil {
			errs = append(errs, fmt.Errorf("--api-keys-file (GATEWAY_API_KEYS_FILE): %w", err))
		} else {
			c.APIKeys = append(c.APIKeys, keys...)
		}
	}
	if apiKeys != "" {
		keys, err := ParseAPIKeys([]byte(strings.NewReplacer(",", "\n", ":", " ").Replace(apiKeys)))
		if err != nil {
			errs = append(errs, fmt.Errorf("--api-keys (GATEWAY_API_KEYS): %w", err))
		}
		c.APIKeys = append(c.APIKeys, keys...)
	}
	if len(c.APIKeys) == 0 && !c.InsecureNoAuth {
		errs = append(errs, errors.New("no client API keys: set --api-keys-file (GATEWAY_API_KEYS_FILE) or --api-keys, or --insecure-no-auth to run without authentication"))
	}
	switch {
	case modelConfigFile != "" && modelConfig != "":
		errs = append(errs, errors.New("--model-config and --model-config-json are mutually exclusive"))
	case modelConfigFile != "":
		b, err := os.ReadFile(modelConfigFile) //nolint:gosec // G304: the operator names this file.
		if err == nil {
			c.Models, err = ParseModels(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--model-config (GATEWAY_MODEL_CONFIG) %s: %w", modelConfigFile, err))
		}
	case modelConfig != "":
		m, err := ParseModels([]byte(modelConfig))
		if err != nil {
			errs = append(errs, fmt.Errorf("--model-config-json (GATEWAY_MODEL_CONFIG_JSON): %w", err))
		}
		c.Models = m
	}
	if c.Models == nil {
		c.Models = Models{}
	}
	lc := c.LastCluster
	if lc.TTL <= 0 {
		errs = append(errs, errors.New("--last-cluster-ttl (STARGATE_LAST_CLUSTER_TTL) must be > 0"))
	}
	if lc.LookupTimeout <= 0 {
		errs = append(errs, errors.New("--last-cluster-lookup-timeout (STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT) must be > 0"))
	}
	if lc.LocalMaxEntries <= 0 {
		errs = append(errs, errors.New("--last-cluster-local-max-entries (STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES) must be > 0"))
	}
	if lc.WriteTimeout <= 0 {
		errs = append(errs, errors.New("--last-cluster-write-timeout (STARGATE_LAST_CLUSTER_WRITE_TIMEOUT) must be > 0"))
	}
	if lc.LocalTTL < 0 || lc.LocalTTL >= lc.TTL {
		errs = append(errs, errors.New("--last-cluster-local-ttl (STARGATE_LAST_CLUSTER_LOCAL_TTL) must be >= 0 (0 = no cache) and below --last-cluster-ttl (STARGATE_LAST_CLUSTER_TTL)"))
	}
	errs = append(errs, c.Olric.validate(peers)...)
	if c.RateLimit.StoreTimeout <= 0 {
		errs = append(errs, errors.New("--rate-limit-store-timeout (RATE_LIMIT_STORE_TIMEOUT) must be > 0"))
	}
	if c.RateLimit.DefaultMaxOutputTokens < 0 {
		errs = append(errs, errors.New("--rate-limit-default-max-output-tokens (RATE_LIMIT_DEFAULT_MAX_OUTPUT_TOKENS) must be >= 0"))
	}
	switch c.RateLimit.Mode {
	case RateLimitLocal, RateLimitExact:
	default:
		errs = append(errs, fmt.Errorf("--rate-limit-mode (RATE_LIMIT_MODE) %q: want local or exact", c.RateLimit.Mode))
	}
	if si := c.RateLimit.SyncInterval; si < MinRateLimitSyncInterval || si > MaxRateLimitSyncInterval {
		errs = append(errs, fmt.Errorf("--rate-limit-sync-interval (RATE_LIMIT_SYNC_INTERVAL) %v: must be from %v to %v", si, MinRateLimitSyncInterval, MaxRateLimitSyncInterval))
	}
	// Validated one field at a time so both errors are reported, each
	// with its environment variable.
	if err := (obs.TracingConfig{Endpoint: c.Tracing.Endpoint}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w (OTEL_EXPORTER_OTLP_ENDPOINT)", err))
	}
	if err := (obs.TracingConfig{SampleRatio: c.Tracing.SampleRatio}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w (GATEWAY_OTEL_SAMPLE_RATIO)", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// The hub timeouts' defaults. The response head must come within
// 5 minutes: the hub itself waits at most 60 s for routing capacity (the
// x-max-wait-ms cap) and then gives each attempt 30 s to its head (five
// attempts with its default retries), and an engine that sends its head
// only after the prefill needs tens of seconds for a 120k-token prompt;
// 5 minutes is above all of that together, so only a hub that hangs
// reaches it. A whole non-streaming exchange may take 15 minutes: above
// the OpenAI SDKs' own 10-minute default, so a client with default
// settings gives up first, and enough for about 16k output tokens at 20
// tokens/s; longer answers should stream, which this bound never cuts.
const (
	// DefaultHubResponseHeaderTimeout is --hub-response-header-timeout's
	// default.
	DefaultHubResponseHeaderTimeout = 5 * time.Minute
	// DefaultHubRequestTimeout is --hub-request-timeout's default.
	DefaultHubRequestTimeout = 15 * time.Minute
)

// checkTLS accepts both TLS paths or neither, and a pair that loads now,
// so a wrong path fails at startup instead of at the first handshake.
func checkTLS(cert, key string) error {
	switch {
	case cert == "" && key == "":
		return nil
	case cert == "" || key == "":
		return errors.New("--tls-cert-path (GATEWAY_TLS_CERT_PATH) and --tls-key-path (GATEWAY_TLS_KEY_PATH): set both or neither")
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return fmt.Errorf("--tls-cert-path (GATEWAY_TLS_CERT_PATH) / --tls-key-path (GATEWAY_TLS_KEY_PATH): %w", err)
	}
	return nil
}

// parseHubURLs parses --hub-url: one base URL or a comma-separated list,
// every entry with the same scheme (one transport setup serves them all)
// and none twice.
func parseHubURLs(s string) ([]*url.URL, error) {
	var out []*url.URL
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: entry %d is empty", s, i+1)
		}
		u, err := parseHubURL(part)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && u.Scheme != out[0].Scheme {
			return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: every URL must use the same scheme (%s and %s)", s, out[0].Scheme, u.Scheme)
		}
		if seen[u.String()] {
			return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: %s is listed twice", s, u)
		}
		seen[u.String()] = true
		out = append(out, u)
	}
	return out, nil
}

func parseHubURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: want http(s)://host[:port]", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("--hub-url (STARGATE_URL) %q: must not carry a path or query (request paths are absolute)", s)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// ParseAPIKeys reads one key per line, optionally followed by whitespace
// and a name. Blank lines and lines starting with # are skipped. A key
// without a name is named key-<first 8 hex of its SHA-256>, so logs and
// rate-limit keys never hold the key itself. Errors name the line, never
// the key.
func ParseAPIKeys(b []byte) ([]APIKey, error) {
	var out []APIKey
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) > 2 {
			return nil, fmt.Errorf("line %d: want \"<key> [name]\", got %d fields", n, len(fields))
		}
		k := APIKey{Key: fields[0]}
		if len(fields) == 2 {
			k.Principal = fields[1]
		} else {
			sum := sha256.Sum256([]byte(k.Key))
			k.Principal = "key-" + hex.EncodeToString(sum[:4])
		}
		if seen[k.Key] {
			return nil, fmt.Errorf("line %d: duplicate key", n)
		}
		seen[k.Key] = true
		out = append(out, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseModels decodes the model config document, rejecting unknown fields
// and naming the model and field of any bad value.
func ParseModels(b []byte) (Models, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Models
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	for name, mc := range m {
		if strings.TrimSpace(name) == "" {
			return nil, errors.New("model name must not be blank")
		}
		if mc.RequestsPerMinute < 0 {
			return nil, fmt.Errorf("%s.requests_per_minute must be >= 0", name)
		}
		if mc.TokensPerMinute < 0 {
			return nil, fmt.Errorf("%s.tokens_per_minute must be >= 0", name)
		}
		if mc.MaxWaitMs > 60000 {
			return nil, fmt.Errorf("%s.max_wait_ms must be <= 60000 (the hub's cap)", name)
		}
		if strings.ContainsFunc(mc.RoutingMethod, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			return nil, fmt.Errorf("%s.routing_method must be visible ASCII", name)
		}
		for i, u := range mc.URIs {
			if strings.TrimSpace(u) == "" {
				return nil, fmt.Errorf("%s.uris[%d] must not be blank", name, i)
			}
		}
	}
	return m, nil
}
