package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// readyRe is the log line the gateway writes once its API is served.
var readyRe = regexp.MustCompile(`msg=ready`)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRefusesToStartWithoutAuth(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"},
		func(string) string { return "" }, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--insecure-no-auth") {
		t.Fatalf("code %d, stderr %q", code, errb.String())
	}
}

func TestHelpListsEveryEnvVar(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, &out); code != 0 {
		t.Fatalf("code %d", code)
	}
	for _, v := range []string{"STARGATE_LAST_CLUSTER_ENABLED", "STARGATE_LAST_CLUSTER_TTL", "STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT",
		"STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES", "OLRIC_ENABLED", "OLRIC_ENV", "OLRIC_BIND_ADDR", "OLRIC_BIND_PORT",
		"OLRIC_MEMBERLIST_BIND_ADDR", "OLRIC_MEMBERLIST_BIND_PORT", "OLRIC_PEERS", "OLRIC_REPLICA_COUNT",
		"OLRIC_PARTITION_COUNT", "OLRIC_STARTUP_TIMEOUT", "RATE_LIMIT_FAIL_OPEN", "STARGATE_URL",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "GATEWAY_OTEL_SAMPLE_RATIO", "--otel-endpoint", "--otel-sample-ratio",
		"STARGATE_RESPONSE_HEADER_TIMEOUT", "STARGATE_REQUEST_TIMEOUT", "GATEWAY_TLS_CERT_PATH", "GATEWAY_TLS_KEY_PATH"} {
		if !strings.Contains(out.String(), v) {
			t.Errorf("--help lacks %s", v)
		}
	}
}

// TestServesAndDrains: with --insecure-no-auth the gateway starts, warns,
// and returns 0 when its context ends.
func TestServesAndDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--insecure-no-auth", "--drain-timeout", "1s"},
			func(string) string { return "" }, &bytes.Buffer{}, &errb)
	}()
	errb.waitFor(t, readyRe, done)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "authentication is DISABLED") {
		t.Error("no startup warning for --insecure-no-auth")
	}
}
