package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestHubTimeouts: the hub timeouts default to 5 minutes to the response
// head and 15 minutes for a whole non-streaming exchange, come from their
// flags or variables, accept 0 (no bound) and refuse a negative value
// naming the flag and variable.
func TestHubTimeouts(t *testing.T) {
	c, err := Load([]string{"--insecure-no-auth"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HubResponseHeaderTimeout != 5*time.Minute || c.HubRequestTimeout != 15*time.Minute {
		t.Fatalf("defaults: head %v, whole %v; want 5m and 15m", c.HubResponseHeaderTimeout, c.HubRequestTimeout)
	}
	c, err = Load([]string{"--insecure-no-auth", "--hub-request-timeout", "0"},
		env(map[string]string{"STARGATE_RESPONSE_HEADER_TIMEOUT": "90s"}), io.Discard)
	if err != nil || c.HubResponseHeaderTimeout != 90*time.Second || c.HubRequestTimeout != 0 {
		t.Fatalf("%v: head %v, whole %v; want 90s and 0", err, c.HubResponseHeaderTimeout, c.HubRequestTimeout)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--hub-response-header-timeout", "-1s"}, nil, "--hub-response-header-timeout (STARGATE_RESPONSE_HEADER_TIMEOUT) must be >= 0"},
		{nil, map[string]string{"STARGATE_REQUEST_TIMEOUT": "-5m"}, "--hub-request-timeout (STARGATE_REQUEST_TIMEOUT) must be >= 0"},
		{nil, map[string]string{"STARGATE_RESPONSE_HEADER_TIMEOUT": "300"}, "STARGATE_RESPONSE_HEADER_TIMEOUT"},
	} {
		_, err := Load(append([]string{"--insecure-no-auth"}, tc.args...), env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err %v, want it to contain %q", tc.args, tc.env, err, tc.want)
		}
	}
}
