package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A pylon without a registration token, or with one and no TLS, never
// dials: it exits with a usage error naming the flag that would allow it.
func TestRefusesToStartWithoutTokenProtection(t *testing.T) {
	base := []string{"--upstream-http-base-url", "http://127.0.0.1:1", "--model-name", "m",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--upstream-health-wait-ms", "0"}
	// Cancelled: a pylon that wrongly starts stops at once and the test
	// fails on its exit code instead of waiting for an engine.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no token":        {nil, "--insecure-no-auth"},
		"plaintext token": {[]string{"--auth-token", "s3cret"}, "--insecure-plaintext"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, append(base, tc.args...), func(string) string { return "" }, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%s: code %d, stderr %q; want 2 naming %s", name, code, errb.String(), tc.want)
		}
		if strings.Contains(errb.String(), "s3cret") {
			t.Errorf("%s: the token leaked into the error: %q", name, errb.String())
		}
	}
}

// The insecure settings are announced at startup.
func TestWarnsAboutInsecureSettings(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // validate, warn and stop before any engine is needed
	var out, errb bytes.Buffer
	run(ctx, []string{"--upstream-http-base-url", "http://127.0.0.1:1", "--model-name", "m",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--auth-token", "s3cret", "--insecure-plaintext",
		"--upstream-health-wait-ms", "0"}, func(string) string { return "" }, &out, &errb)
	if !strings.Contains(errb.String(), "WITHOUT TLS") {
		t.Fatalf("no warning for --insecure-plaintext: %q", errb.String())
	}
	if strings.Contains(errb.String(), "s3cret") {
		t.Fatalf("the token leaked into the log: %q", errb.String())
	}
}
