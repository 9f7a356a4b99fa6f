package app

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/obs"
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

	MaxReplayBodyBytes      int64
	RetryBudgetHeader       string
	MaxRequestRetries       int
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
}

// DefaultConfig is every setting at its default; the hub id is the host
// name.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Listen: "127.0.0.1:8000", BackendListen: "127.0.0.1:50071", MetricsListen: "127.0.0.1:9090",
		HubID: host, MetricsPrefix: "stargate_", Drain: 30 * time.Second,
		MaxReplayBodyBytes: 64 << 20, RetryBudgetHeader: headers.StargateMaxWaitMs,
		MaxRequestRetries: 2, MaxConnectRetries: 2, RequirePylonRetrySignal: true,
		RequestTimeout: 30 * time.Second, IdleTimeoutMin: 60 * time.Second, IdleTimeoutMax: 300 * time.Second,
		HealthInterval: time.Second,
	}
}

// Register declares every setting as a flag of fs, with its environment
// variable and default.
func (c *Config) Register(fs *cli.FlagSet) {
	d := DefaultConfig()
	fs.String(&c.Listen, "listen", "HUB_LISTEN", d.Listen, "HTTP listen address for the OpenAI proxy, probes, /v1/models and /debug/state")
	fs.String(&c.BackendListen, "backend-listen", "HUB_BACKEND_LISTEN", d.BackendListen, "listen address pylons dial for their reverse tunnels")
	fs.String(&c.MetricsListen, "metrics-listen", "HUB_METRICS_LISTEN", d.MetricsListen, "Prometheus /metrics listen address")
	fs.String(&c.HubID, "hub-id", "HUB_ID", d.HubID, "this replica's identity in handshake acks and logs")
	fs.String(&c.RegistrationToken, "registration-token", "HUB_REGISTRATION_TOKEN", "", "shared token pylons must present (prefer --registration-token-file)")
	fs.String(&c.RegistrationTokenFile, "registration-token-file", "HUB_REGISTRATION_TOKEN_FILE", "", "file holding the shared pylon token; re-read on every handshake")
	fs.String(&c.MetricsPrefix, "metrics-prefix", "HUB_METRICS_PREFIX", d.MetricsPrefix, "prefix of the hub's routing metrics")
	fs.Duration(&c.Drain, "drain-timeout", "HUB_DRAIN_TIMEOUT", d.Drain, "on SIGTERM, how long in-flight requests and streams may finish")
	fs.Int64(&c.MaxReplayBodyBytes, "proxy-max-replay-body-bytes", "HUB_PROXY_MAX_REPLAY_BODY_BYTES", d.MaxReplayBodyBytes, "largest request body (kept for retries); larger gets 413")
	fs.String(&c.RetryBudgetHeader, "proxy-retry-budget-header", "HUB_PROXY_RETRY_BUDGET_HEADER", d.RetryBudgetHeader, "request header carrying the retry budget in ms; empty disables it")
	fs.Int(&c.MaxRequestRetries, "proxy-max-request-retries", "HUB_PROXY_MAX_REQUEST_RETRIES", d.MaxRequestRetries, "retries after retryable upstream answers")
	fs.Int(&c.MaxConnectRetries, "proxy-max-connect-retries", "HUB_PROXY_MAX_CONNECT_RETRIES", d.MaxConnectRetries, "retries after tunnel failures")
	fs.Bool(&c.RequirePylonRetrySignal, "proxy-require-pylon-retry-signal", "HUB_PROXY_REQUIRE_PYLON_RETRY_SIGNAL", d.RequirePylonRetrySignal, "retry 429/503 only when the pylon says x-stargate-retryable: true")
	fs.Millis(&c.RequestTimeout, "tunnel-request-timeout-ms", "HUB_TUNNEL_REQUEST_TIMEOUT_MS", d.RequestTimeout, "time to the response head of one attempt")
	fs.Millis(&c.IdleTimeoutMin, "registration-update-idle-timeout-ms", "HUB_REGISTRATION_UPDATE_IDLE_TIMEOUT_MS", d.IdleTimeoutMin, "lower bound of the registration idle timeout (3 x heartbeat)")
	fs.Millis(&c.IdleTimeoutMax, "registration-update-max-idle-timeout-ms", "HUB_REGISTRATION_UPDATE_MAX_IDLE_TIMEOUT_MS", d.IdleTimeoutMax, "upper bound of the registration idle timeout")
	fs.Millis(&c.HealthInterval, "health-check-interval-ms", "HUB_HEALTH_CHECK_INTERVAL_MS", d.HealthInterval, "period of the /health RTT probe over each tunnel")
	fs.String(&c.TLSCertPath, "tls-cert-path", "HUB_TLS_CERT_PATH", "", "certificate (PEM) pylons verify on --backend-listen; with --tls-key-path enables TLS; re-read on every handshake")
	fs.String(&c.TLSKeyPath, "tls-key-path", "HUB_TLS_KEY_PATH", "", "private key (PEM) of --tls-cert-path")
	fs.Bool(&c.Pprof, "pprof", "HUB_PPROF", false, "serve the Go profiler under /debug/pprof/ on --metrics-listen")
	fs.String(&c.LBConfigPath, "lb-config-path", "HUB_LB_CONFIG_PATH", "", "lb-config.json: algorithms per model, read once at startup; unset allows every algorithm with default settings")
	fs.String(&c.OTelEndpoint, "otel-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP collector base URL for request traces (span proxy_openai_request); empty: no export, trace context still propagates")
	fs.Float64(&c.OTelSampleRatio, "otel-sample-ratio", "HUB_OTEL_SAMPLE_RATIO", 1, "share of new traces sampled (a sampled caller's trace is always continued)")
	fs.String(&c.GatewayTokenFile, "gateway-token-file", "HUB_GATEWAY_TOKEN_FILE", "", "file holding the token the gateway sends as Authorization: Bearer; when set, only requests bearing it may steer routing")
}

// Validate reports every invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
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
	if c.GatewayTokenFile != "" {
		if _, err := cli.ReadSecretFile(c.GatewayTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--gateway-token-file: %w", err))
		}
	}
	if err := c.Tracing("").Validate(); err != nil {
		errs = append(errs, err)
	}
	if (c.TLSCertPath == "") != (c.TLSKeyPath == "") {
		errs = append(errs, errors.New("--tls-cert-path and --tls-key-path: set both or neither"))
	}
	if strings.TrimSpace(c.HubID) == "" {
		errs = append(errs, errors.New("--hub-id: must not be empty"))
	}
	return errors.Join(errs...)
}

// Tracing is the trace export configuration of the flags.
func (c *Config) Tracing(version string) obs.TracingConfig {
	return obs.TracingConfig{Endpoint: c.OTelEndpoint, Service: ServiceName, Version: version, SampleRatio: c.OTelSampleRatio}
}

// ServiceName is the hub's OpenTelemetry service.name, named like the
// gateway's (stargate-gateway) so a trace reads tier by tier.
const ServiceName = "stargate-hub"
