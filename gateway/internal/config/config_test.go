package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultsAndEnv(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true", "STARGATE_LAST_CLUSTER_ENABLED": "true",
		"OLRIC_PEERS": "a:1, b:2,", "GATEWAY_MODEL_CONFIG_JSON": `{"m":{"request_slo_ms":100,"tokens_per_minute":5}}`}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.LastCluster.Enabled || c.LastCluster.TTL != 10*time.Minute || c.LastCluster.LookupTimeout != 20*time.Millisecond ||
		c.LastCluster.LocalMaxEntries != 100000 || len(c.HubURLs) != 1 || c.HubURLs[0].String() != "http://127.0.0.1:8000" ||
		c.HubResolveInterval != 10*time.Second || c.HubAttempts != 3 {
		t.Fatalf("%+v", c.LastCluster)
	}
	if c.Tracing.Endpoint != "" || c.Tracing.SampleRatio != 1 {
		t.Fatalf("tracing defaults %+v", c.Tracing)
	}
	if !c.PromptPrefix {
		t.Fatal("--prompt-prefix-enabled is off by default")
	}
	if !c.LastCluster.Anchor {
		t.Fatal("--last-cluster-anchor-enabled is off by default")
	}
	if c, err := Load([]string{"--insecure-no-auth"}, env(map[string]string{"STARGATE_LAST_CLUSTER_ANCHOR_ENABLED": "false"}), io.Discard); err != nil || c.LastCluster.Anchor {
		t.Fatalf("STARGATE_LAST_CLUSTER_ANCHOR_ENABLED=false: anchor %v, %v", c.LastCluster.Anchor, err)
	}
	if c.RateLimit.Mode != RateLimitLocal || c.RateLimit.SyncInterval != 100*time.Millisecond || c.LastCluster.LocalTTL != 5*time.Second {
		t.Fatalf("rate-limit mode defaults %+v, local TTL %v", c.RateLimit, c.LastCluster.LocalTTL)
	}
	if strings.Join(c.Olric.Peers, ",") != "a:1,b:2" || c.Models.For("m").RequestSLOMs != 100 || c.Models.For("x").TokensPerMinute != 0 {
		t.Fatalf("peers %v models %v", c.Olric.Peers, c.Models)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	_ = os.WriteFile(keys, []byte("# comment\nk1 alice\nk2\n\n"), 0o600)
	c, err := Load([]string{"--api-keys-file", keys}, env(nil), io.Discard)
	if err != nil || len(c.APIKeys) != 2 || c.APIKeys[0].Principal != "alice" || !strings.HasPrefix(c.APIKeys[1].Principal, "key-") {
		t.Fatalf("%v %+v", err, c)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--insecure-no-auth"},
		{[]string{"--insecure-no-auth", "--hub-url", "http://h/x"}, nil, "--hub-url (STARGATE_URL)"},
		{[]string{"--insecure-no-auth"}, map[string]string{"STARGATE_LAST_CLUSTER_TTL": "0s"}, "STARGATE_LAST_CLUSTER_TTL"},
		{[]string{"--insecure-no-auth"}, map[string]string{"STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT": "20"}, "STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT"},
		{[]string{"--insecure-no-auth"}, map[string]string{"OLRIC_ENV": "moon"}, "OLRIC_ENV"},
		{[]string{"--insecure-no-auth", "--model-config-json", `{"m":{"slo":1}}`}, nil, `unknown field "slo"`},
		{[]string{"--insecure-no-auth", "--model-config-json", `{"m":{"tokens_per_minute":-1}}`}, nil, "m.tokens_per_minute"},
		{[]string{"--insecure-no-auth", "--hub-token-file", filepath.Join(dir, "missing")}, nil, "--hub-token-file"},
		{[]string{"--api-keys-file", filepath.Join(dir, "nope")}, nil, "--api-keys-file"},
		{[]string{"--insecure-no-auth"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "--otel-endpoint \"collector:4318\""},
		{[]string{"--insecure-no-auth", "--otel-endpoint", "ftp://c"}, nil, "(OTEL_EXPORTER_OTLP_ENDPOINT)"},
		{[]string{"--insecure-no-auth"}, map[string]string{"GATEWAY_OTEL_SAMPLE_RATIO": "1.5"}, "--otel-sample-ratio 1.5: must be between 0 and 1 (GATEWAY_OTEL_SAMPLE_RATIO)"},
		{[]string{"--insecure-no-auth", "--otel-sample-ratio", "-0.1"}, nil, "--otel-sample-ratio"},
		{[]string{"--insecure-no-auth", "--otel-sample-ratio", "half"}, nil, "otel-sample-ratio"},
		{[]string{"--insecure-no-auth", "--read-stall-timeout", "0s"}, nil, "--read-stall-timeout must be > 0"},
		{[]string{"--insecure-no-auth"}, map[string]string{"GATEWAY_IDLE_TIMEOUT": "0s"}, "--idle-timeout must be > 0"},
		{[]string{"--insecure-no-auth"}, map[string]string{"GATEWAY_PROMPT_PREFIX_ENABLED": "maybe"}, "GATEWAY_PROMPT_PREFIX_ENABLED"},
		{[]string{"--insecure-no-auth"}, map[string]string{"RATE_LIMIT_MODE": "eventual"}, `--rate-limit-mode (RATE_LIMIT_MODE) "eventual": want local or exact`},
		{[]string{"--insecure-no-auth", "--rate-limit-sync-interval", "5ms"}, nil, "--rate-limit-sync-interval (RATE_LIMIT_SYNC_INTERVAL) 5ms: must be from 10ms to 5s"},
		{[]string{"--insecure-no-auth"}, map[string]string{"RATE_LIMIT_SYNC_INTERVAL": "6s"}, "RATE_LIMIT_SYNC_INTERVAL"},
		{[]string{"--insecure-no-auth"}, map[string]string{"STARGATE_LAST_CLUSTER_LOCAL_TTL": "-1s"}, "--last-cluster-local-ttl (STARGATE_LAST_CLUSTER_LOCAL_TTL) must be >= 0"},
		{[]string{"--insecure-no-auth", "--last-cluster-ttl", "1m", "--last-cluster-local-ttl", "1m"}, nil, "below --last-cluster-ttl"},
	} {
		_, err := Load(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want it to name %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestPromptPrefixFlag: the summary can be turned off by flag or
// environment variable.
func TestPromptPrefixFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--insecure-no-auth", "--prompt-prefix-enabled=false"}, nil},
		{[]string{"--insecure-no-auth"}, map[string]string{"GATEWAY_PROMPT_PREFIX_ENABLED": "false"}},
	} {
		c, err := Load(tc.args, env(tc.env), io.Discard)
		if err != nil || c.PromptPrefix {
			t.Fatalf("%v %v: err %v, PromptPrefix %v", tc.args, tc.env, err, c != nil && c.PromptPrefix)
		}
	}
}

// TestTracingFlags: the OTLP endpoint and ratio come from their flags or
// environment variables.
func TestTracingFlags(t *testing.T) {
	c, err := Load([]string{"--insecure-no-auth"}, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
		"GATEWAY_OTEL_SAMPLE_RATIO": "0.25"}), io.Discard)
	if err != nil || c.Tracing.Endpoint != "http://otel:4318" || c.Tracing.SampleRatio != 0.25 {
		t.Fatalf("%v %+v", err, c)
	}
	c, err = Load([]string{"--insecure-no-auth", "--otel-endpoint", "https://o:1", "--otel-sample-ratio", "0"},
		env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}), io.Discard)
	if err != nil || c.Tracing.Endpoint != "https://o:1" || c.Tracing.SampleRatio != 0 {
		t.Fatalf("flags must win: %v %+v", err, c)
	}
}

func TestParseAPIKeys(t *testing.T) {
	if _, err := ParseAPIKeys([]byte("a b c\n")); err == nil || strings.Contains(err.Error(), "a b") {
		t.Fatalf("three fields: %v (must not echo the key)", err)
	}
	if _, err := ParseAPIKeys([]byte("a\na\n")); err == nil {
		t.Fatal("duplicate accepted")
	}
}

// TestModelURIs: uris match ignoring case, surrounding whitespace, a
// missing leading '/' and trailing '/'; no uris allows every path.
func TestModelURIs(t *testing.T) {
	m, err := ParseModels([]byte(`{"m":{"uris":[" V1/Chat/Completions/ ","/v1/embeddings"]},"*":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{"/v1/chat/completions": true, "/v1/embeddings": true, "/v1/responses": false, "/v1/completions": false} {
		if got := m.For("m").AllowsPath(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
	if !m.For("other").AllowsPath("/v1/responses") {
		t.Error("a model without uris must allow every path")
	}
	if _, err := ParseModels([]byte(`{"m":{"uris":[" "]}}`)); err == nil || !strings.Contains(err.Error(), "m.uris[0]") {
		t.Errorf("blank uri: %v", err)
	}
	c, err := Load([]string{"--insecure-no-auth"}, env(map[string]string{"MODEL_URI_ALLOWLIST_ENABLED": "true"}), io.Discard)
	if err != nil || !c.ModelURIAllowlist {
		t.Fatalf("%v %+v", err, c)
	}
}

// TestHubURLList: --hub-url takes one URL or a comma list sharing one
// scheme; every error names the flag and its variable.
func TestHubURLList(t *testing.T) {
	c, err := Load([]string{"--insecure-no-auth", "--hub-url", " https://hub-0.hub:8000, https://hub-1.hub:8000/ ,https://[::1]"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range c.HubURLs {
		got = append(got, u.String())
	}
	if want := "https://hub-0.hub:8000 https://hub-1.hub:8000 https://[::1]"; strings.Join(got, " ") != want {
		t.Fatalf("hub URLs %q, want %q", got, want)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--hub-url", "http://a:1,https://b:1"}, nil, "--hub-url (STARGATE_URL) \"http://a:1,https://b:1\": every URL must use the same scheme"},
		{[]string{"--hub-url", "http://a:1,,http://b:1"}, nil, "--hub-url (STARGATE_URL) \"http://a:1,,http://b:1\": entry 2 is empty"},
		{[]string{"--hub-url", "http://a:1,http://a:1/"}, nil, "http://a:1 is listed twice"},
		{[]string{"--hub-url", "http://a:1,http://b:1/v1"}, nil, "--hub-url (STARGATE_URL) \"http://b:1/v1\": must not carry a path"},
		{[]string{"--hub-url", "http://a:1,b:1"}, nil, "--hub-url (STARGATE_URL) \"b:1\": want http(s)://host[:port]"},
		{nil, map[string]string{"STARGATE_URL": "http://a:x"}, "--hub-url (STARGATE_URL)"},
		{nil, map[string]string{"GATEWAY_HUB_RESOLVE_INTERVAL": "0s"}, "--hub-resolve-interval (GATEWAY_HUB_RESOLVE_INTERVAL) must be > 0"},
		{[]string{"--hub-attempts", "0"}, nil, "--hub-attempts (GATEWAY_HUB_ATTEMPTS) must be from 1"},
		{nil, map[string]string{"GATEWAY_HUB_ATTEMPTS": "11"}, "--hub-attempts (GATEWAY_HUB_ATTEMPTS)"},
	} {
		_, err := Load(append([]string{"--insecure-no-auth"}, tc.args...), env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err %v, want it to contain %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestLocalModesConfigurable: the exact mode (the local mode is the
// default), the sync interval and a disabled last-cluster cache are
// reachable by flag and environment.
func TestLocalModesConfigurable(t *testing.T) {
	c, err := Load([]string{"--insecure-no-auth", "--rate-limit-mode", "exact", "--last-cluster-local-ttl", "0s"},
		env(map[string]string{"RATE_LIMIT_SYNC_INTERVAL": "250ms"}), io.Discard)
	if err != nil || c.RateLimit.Mode != RateLimitExact || c.RateLimit.SyncInterval != 250*time.Millisecond || c.LastCluster.LocalTTL != 0 {
		t.Fatalf("%v %+v %+v", err, c.RateLimit, c.LastCluster)
	}
	c, err = Load([]string{"--insecure-no-auth"}, env(map[string]string{"RATE_LIMIT_MODE": "exact"}), io.Discard)
	if err != nil || c.RateLimit.Mode != RateLimitExact {
		t.Fatalf("RATE_LIMIT_MODE=exact: %v %+v", err, c.RateLimit)
	}
}
