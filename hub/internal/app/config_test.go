package app

import (
	"strings"
	"testing"
)

// The defaults are valid, and Validate reports every bad setting at once,
// each naming its flag.
func TestValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HubID = "hub-1" // the default is the host name, which may be empty in a sandbox
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.MaxReplayBodyBytes = 0
	cfg.RequestTimeout = 0
	cfg.TLSCertPath = "cert.pem"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, flag := range []string{"--proxy-max-replay-body-bytes", "--tunnel-request-timeout-ms", "--tls-cert-path"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("%q does not name %s", err, flag)
		}
	}
}
