package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSecret writes a token file in the test's temp dir.
func writeSecret(t *testing.T, name, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// securedDefaults is DefaultConfig with the two tokens every hub needs.
func securedDefaults(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.HubID = "hub-1" // the default is the host name, which may be empty in a sandbox
	cfg.GatewayTokenFile = writeSecret(t, "gateway-token", "gw-secret")
	cfg.RegistrationTokenFile = writeSecret(t, "registration-token", "reg-secret")
	return cfg
}

// The defaults with the two tokens are valid, and Validate reports every
// bad setting at once, each naming its flag.
func TestValidate(t *testing.T) {
	cfg := securedDefaults(t)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults with tokens: %v", err)
	}
	cfg.BackendAffinity, cfg.BackendAffinityLoadFactor = "off", 0 // 0: no bound
	if err := cfg.Validate(); err != nil {
		t.Fatalf("round robin, no bound: %v", err)
	}
	cfg.MaxReplayBodyBytes = 0
	cfg.RequestTimeout = 0
	cfg.TLSCertPath = "cert.pem"
	cfg.APITLSKeyPath = "key.pem"
	cfg.ModelUnavailableWait = -1
	cfg.Limits.ReadStall = 0
	cfg.LBConfigReloadDebounce = 0
	cfg.BackendAffinity = "yes"
	cfg.BackendAffinityLoadFactor = 0.9
	cfg.RoutingPageRecords = -1
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, flag := range []string{"--proxy-max-replay-body-bytes", "--tunnel-request-timeout-ms", "--tls-cert-path",
		"--api-tls-cert-path", "--proxy-model-unavailable-wait-ms", "--read-stall-timeout",
		"--lb-config-reload-debounce-ms", "--backend-affinity \"yes\"", "--backend-affinity-load-factor 0.9",
		"--routing-page-records"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("%q does not name %s", err, flag)
		}
	}
}

// Closed by default: a hub without a gateway token or a registration
// token does not start unless the matching insecure flag says so, and the
// error names both ways out; contradictory settings are refused too.
func TestValidateAuth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings of the error; none: valid
	}{
		{"defaults", func(c *Config) { *c = DefaultConfig(); c.HubID = "hub-1" },
			[]string{"--gateway-token-file: required", "--insecure-no-client-auth", "--registration-token-file (or --registration-token): required", "--insecure-no-registration-auth"}},
		{"no gateway token", func(c *Config) { c.GatewayTokenFile = "" }, []string{"--gateway-token-file: required", "--insecure-no-client-auth"}},
		{"no gateway token, insecure", func(c *Config) { c.GatewayTokenFile, c.InsecureNoClientAuth = "", true }, nil},
		{"gateway token and insecure", func(c *Config) { c.InsecureNoClientAuth = true }, []string{"--gateway-token-file and --insecure-no-client-auth"}},
		{"unreadable gateway token", func(c *Config) { c.GatewayTokenFile = "/nonexistent/token" }, []string{"--gateway-token-file:"}},
		{"anonymous with a token", func(c *Config) { c.AllowAnonymousClients = true }, nil},
		{"anonymous without a token", func(c *Config) { c.GatewayTokenFile, c.InsecureNoClientAuth, c.AllowAnonymousClients = "", true, true },
			[]string{"--allow-anonymous-clients: needs --gateway-token-file"}},
		{"no registration token", func(c *Config) { c.RegistrationTokenFile = "" }, []string{"--registration-token-file (or --registration-token): required"}},
		{"inline registration token", func(c *Config) { c.RegistrationTokenFile, c.RegistrationToken = "", "reg" }, nil},
		{"no registration token, insecure", func(c *Config) { c.RegistrationTokenFile, c.InsecureNoRegistrationAuth = "", true }, nil},
		{"registration token and insecure", func(c *Config) { c.InsecureNoRegistrationAuth = true },
			[]string{"--insecure-no-registration-auth: set one, not both"}},
		{"admin token", func(c *Config) { c.AdminTokenFile = c.GatewayTokenFile; c.MetricsRequireAdminToken = true }, nil},
		{"unreadable admin token", func(c *Config) { c.AdminTokenFile = "/nonexistent/token" }, []string{"--admin-token-file:"}},
		{"negative queue-mismatch retries", func(c *Config) { c.MaxQueueMismatchRetries = -1 },
			[]string{"--proxy-max-queue-mismatch-retries (HUB_PROXY_MAX_QUEUE_MISMATCH_RETRIES): must be >= 0"}},
		{"metrics token without admin token", func(c *Config) { c.MetricsRequireAdminToken = true },
			[]string{"--metrics-require-admin-token: needs --admin-token-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := securedDefaults(t)
			tc.mutate(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
