package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func validConfig(upstream string) Config {
	c := Default()
	c.UpstreamBaseURL = upstream
	c.ModelNames = "m"
	c.InsecureNoAuth = true
	return c
}

func TestUpstreamBaseURLList(t *testing.T) {
	cases := []struct {
		in      string
		engines []string
	}{
		{"http://127.0.0.1:8090/", []string{"http://127.0.0.1:8090"}},
		{"http://127.0.0.1:8090", []string{"http://127.0.0.1:8090"}},
		{"https://engine/v2/", []string{"https://engine/v2"}},
		{"http://a:1, http://b:2/ ,https://c", []string{"http://a:1", "http://b:2", "https://c"}},
	}
	for _, tc := range cases {
		c := validConfig(tc.in)
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !slices.Equal(c.Engines, tc.engines) {
			t.Errorf("%q: engines %q, want %q", tc.in, c.Engines, tc.engines)
		}
		if want := strings.Join(tc.engines, ","); c.UpstreamBaseURL != want {
			t.Errorf("%q: UpstreamBaseURL %q, want %q", tc.in, c.UpstreamBaseURL, want)
		}
	}
}

func TestUpstreamBaseURLListErrors(t *testing.T) {
	cases := []struct{ in, entry string }{
		{"", "required"},
		{"ftp://x", `"ftp://x"`},
		{"http://a:1,ftp://b", `"ftp://b"`},
		{"http://a:1,127.0.0.1:8090", `"127.0.0.1:8090"`},
		{"http://a:1,http://b:2?x=1", `"http://b:2?x=1"`},
		{"http://a:1,http://b:2#f", `"http://b:2#f"`},
		{"http://a:1,http://", `"http:"`},
		{"http://a:1,,http://b:2", "empty entry"},
		{"http://a:1,", "empty entry"},
		{"http://a:1,http://a:1/", `"http://a:1": listed twice`},
		// Its host becomes a metric label, which must be UTF-8: the
		// pylon used to accept it and panic registering the label.
		{"http://a:1,http://\xff:2", "not valid UTF-8"},
		{"http://a:1,http://%80:2", "not valid UTF-8"},
	}
	for _, tc := range cases {
		c := validConfig(tc.in)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--upstream-http-base-url") || !strings.Contains(err.Error(), tc.entry) {
			t.Errorf("%q: error %v, want one naming --upstream-http-base-url and %s", tc.in, err, tc.entry)
		}
	}
}

// The registration token lets its holder register clusters and receive
// users' prompts: no token without --insecure-no-auth, and no token on a
// plaintext tunnel without --insecure-plaintext. Errors name the flags.
func TestRegistrationTokenRules(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		set  func(c *Config)
		want []string // substrings of the error; nil: valid
	}{
		{"no token", func(*Config) {}, []string{"--auth-token-file", "--auth-token", "--insecure-no-auth", "PYLON_INSECURE_NO_AUTH"}},
		{"no token, insecure", func(c *Config) { c.InsecureNoAuth = true }, nil},
		{"token and insecure", func(c *Config) { c.AuthToken, c.InsecureNoAuth = "t", true }, []string{"--insecure-no-auth", "choose one"}},
		{"token, plaintext", func(c *Config) { c.AuthToken = "t" }, []string{"plaintext", "--tls-cert-path", "--insecure-plaintext", "PYLON_INSECURE_PLAINTEXT"}},
		{"token file, plaintext", func(c *Config) { c.AuthTokenFile = file }, []string{"--insecure-plaintext"}},
		{"token, plaintext allowed", func(c *Config) { c.AuthToken, c.InsecurePlaintext = "t", true }, nil},
		{"token file, plaintext allowed", func(c *Config) { c.AuthTokenFile, c.InsecurePlaintext = file, true }, nil},
		{"token, --tls", func(c *Config) { c.AuthToken, c.TLS = "t", true }, nil},
		{"token, --tls-cert-path", func(c *Config) { c.AuthTokenFile, c.TLSCertPath = file, "/ca.pem" }, nil},
		{"token, --tls-insecure", func(c *Config) { c.AuthToken, c.TLSInsecure = "t", true }, nil},
		{"no token, plaintext allowed", func(c *Config) { c.InsecureNoAuth, c.InsecurePlaintext = true, true }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.UpstreamBaseURL, c.ModelNames = "http://127.0.0.1:8090", "m"
			tc.set(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted it; want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// The listener bounds are on by default and cannot be turned off: a zero
// is refused, naming the flag.
func TestListenerLimits(t *testing.T) {
	c := validConfig("http://127.0.0.1:8090")
	if c.Limits.ReadStall <= 0 || c.Limits.WriteStall <= 0 || c.Limits.Idle <= 0 || c.Limits.ReadHeader <= 0 {
		t.Fatalf("default limits %+v", c.Limits)
	}
	c.Limits.Idle = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--idle-timeout") {
		t.Fatalf("Validate = %v", err)
	}
}

// --engine-affinity is on or off, its load factor 0 (no bound) or a
// finite factor of at least 1, and --engine-affinity-when-full spill or
// queue; errors name the flag.
func TestEngineAffinityFlags(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		factor float64
		full   string
		want   string // a substring of the error; "": valid
	}{
		{"on", 1.5, "spill", ""},
		{"off", 1.5, "spill", ""},
		{"on", 0, "spill", ""},
		{"on", 1, "queue", ""},
		{"yes", 1.5, "spill", `--engine-affinity "yes"`},
		{"on", 0.8, "spill", "--engine-affinity-load-factor 0.8"},
		{"on", -1, "spill", "--engine-affinity-load-factor -1"},
		{"on", 2, "wait", `--engine-affinity-when-full "wait"`},
		{"on", 2, "", `--engine-affinity-when-full ""`},
	} {
		c := validConfig("http://a:1,http://b:2")
		c.EngineAffinity, c.EngineAffinityLoadFactor, c.EngineAffinityWhenFull = tc.mode, tc.factor, tc.full
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %v %s: %v", tc.mode, tc.factor, tc.full, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v %s: error %v, want one naming %s", tc.mode, tc.factor, tc.full, err, tc.want)
		}
	}
	if d := Default(); d.EngineAffinity != "on" || d.EngineAffinityLoadFactor != 2 || d.EngineAffinityWhenFull != "spill" {
		t.Errorf("defaults %q %v %q, want on 2 spill", d.EngineAffinity, d.EngineAffinityLoadFactor, d.EngineAffinityWhenFull)
	}
}

// --region is a label for people: anything up to 64 bytes without
// surrounding spaces; errors name the flag.
func TestRegionFlag(t *testing.T) {
	for region, valid := range map[string]bool{"": true, "eu-west": true, strings.Repeat("r", 64): true,
		strings.Repeat("r", 65): false, " eu": false, "eu ": false} {
		c := validConfig("http://a:1")
		c.Region = region
		err := c.Validate()
		if valid != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--region")) {
			t.Errorf("--region %q: error %v, valid %v", region, err, valid)
		}
	}
}
