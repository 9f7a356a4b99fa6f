package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// TestCompareFlags checks every way --compare can be misused: each exits 2
// before anything starts, naming the flag (or what is missing).
func TestCompareFlags(t *testing.T) {
	dir := t.TempDir()
	arms := filepath.Join(dir, "arms.json")
	if err := os.WriteFile(arms, []byte(`[{"name":"a"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	// bin holds stand-ins for every binary: enough to get past the check.
	bin := filepath.Join(dir, "bin")
	_ = os.Mkdir(bin, 0o750)
	for _, b := range stack.Binaries() {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\nexit 1\n"), 0o700); err != nil { //nolint:gosec // a test stand-in
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	base := []string{"campaign", "--suites", "smoke", "--arms", arms, "--out", filepath.Join(dir, "out")}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"url", []string{"--compare", "--bin", bin, "--url", "http://x"}, nil, []string{"--url must not be given with --compare"}},
		{"url from env", []string{"--compare", "--bin", bin}, map[string]string{"LOADGEN_URL": "http://x"}, []string{"--url must not be given"}},
		{"api key file", []string{"--compare", "--bin", bin, "--api-key-file", "k"}, nil, []string{"--api-key-file must not be given"}},
		{"api key", []string{"--compare", "--bin", bin, "--api-key", "k"}, nil, []string{"--api-key must not be given"}},
		{"before hook", []string{"--compare", "--bin", bin, "--before-arm", "true"}, nil, []string{"--before-arm", "--after-arm"}},
		{"after hook from env", []string{"--bin", bin}, map[string]string{"LOADGEN_COMPARE": "true", "LOADGEN_AFTER_ARM": "true"}, []string{"--after-arm"}},
		{"missing binaries", []string{"--compare", "--bin", empty}, nil, []string{"hub", "gateway", "pylon", "mock-engine", "make build"}},
		// The test binary's folder holds none of them.
		{"default bin", []string{"--compare"}, nil, []string{"lacks", "make build"}},
		{"model", []string{"--compare", "--bin", bin, "--model", "other"}, nil, []string{"--model", "dummy-model"}},
		{"request model", []string{"--compare", "--bin", bin, "--request-model", "other"}, nil, []string{"--request-model"}},
		{"target", []string{"--compare", "--bin", bin, "--target", "pylon"}, nil, []string{"--target"}},
		{"bin without compare", []string{"--bin", bin, "--target", "hub", "--url", "http://x"}, nil, []string{"--bin only applies with --compare"}},
		{"stack logs without compare", []string{"--stack-logs", dir, "--target", "hub", "--url", "http://x"}, nil, []string{"--stack-logs only applies"}},
		{"max errors", []string{"--compare", "--bin", bin, "--max-errors", "-2"}, nil, []string{"--max-errors"}},
		{"hubs", []string{"--compare", "--bin", bin, "--hubs", "0"}, nil, []string{"--hubs 0"}},
		{"hubs without compare", []string{"--hubs", "2", "--target", "hub", "--url", "http://x"}, nil, []string{"--hubs only applies"}},
		// Without --compare the URL is still required.
		{"no url", []string{"--target", "hub"}, nil, []string{"--url is required"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, c.env, append(base, c.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
				t.Errorf("the campaign started")
			}
		})
	}
}

// TestMaxErrors runs a campaign against an engine that refuses every
// request: without --max-errors it succeeds (the failures are results),
// with --max-errors 0 it exits 1 naming the arm and suite.
func TestMaxErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"no"}}`, http.StatusBadRequest)
	}))
	defer srv.Close()
	dir := t.TempDir()
	arms := filepath.Join(dir, "arms.json")
	if err := os.WriteFile(arms, []byte(`[{"name":"a"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"campaign", "--suites", "smoke", "--arms", arms, "--target", "hub", "--url", srv.URL}
	code, out, stderr := runCLI(t, nil, append(args, "--out", filepath.Join(dir, "r1"))...)
	if code != 0 || !strings.Contains(out, "| metric | a |") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, nil, append(args, "--out", filepath.Join(dir, "r2"), "--max-errors", "0")...)
	if code != 1 || !strings.Contains(stderr, "--max-errors 0 exceeded") || !strings.Contains(stderr, "arm a, suite smoke:") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	// The table is printed anyway.
	if !strings.Contains(out, "| metric | a |") {
		t.Errorf("stdout %q", out)
	}
}

func TestErrorsOver(t *testing.T) {
	rep := &loadgen.CampaignReport{
		Arms:   []loadgen.Arm{{Name: "a"}, {Name: "b"}},
		Suites: []loadgen.CampaignSuite{{Key: "smoke"}, {Key: "mixed"}},
		Results: map[string]map[string]loadgen.Stats{
			"a": {"smoke": {Requests: 10, OK: 10}, "mixed": {Requests: 10, OK: 7, Failed: 2, Aborted: 1}},
			"b": {"smoke": {Requests: 10, OK: 10}},
		},
	}
	err := errorsOver(rep, 0)
	if err == nil || !strings.Contains(err.Error(), "arm a, suite mixed: 3 of 10 requests did not succeed (2 failed, 0 skipped, 1 aborted)") ||
		strings.Contains(err.Error(), "suite smoke") {
		t.Errorf("limit 0: %v", err)
	}
	if err := errorsOver(rep, 3); err != nil {
		t.Errorf("limit 3: %v", err)
	}
}

// TestHubCounters: the hub file holds the hub's stargate_* counters and
// gauges as counter-file lines, which loadgen reads back into escapes by
// reason; histograms and other processes' series are left out.
func TestHubCounters(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# TYPE stargate_session_escapes_total counter
stargate_session_escapes_total{model="m",reason="retry"} 2
stargate_session_escapes_total{model="m",reason="group_saturated"} 5
# TYPE stargate_inflight gauge
stargate_inflight{cluster="a"} 1
# TYPE stargate_ttft_seconds histogram
stargate_ttft_seconds_bucket{le="+Inf"} 3
stargate_ttft_seconds_sum 1
stargate_ttft_seconds_count 3
# TYPE go_goroutines gauge
go_goroutines 9
`))
	}))
	defer srv.Close()
	fams, err := promscrape.Scrape(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got := string(hubCounters(fams))
	want := `hub stargate_inflight{cluster="a"} 1
hub stargate_session_escapes_total{model="m",reason="retry"} 2
hub stargate_session_escapes_total{model="m",reason="group_saturated"} 5
`
	if got != want {
		t.Fatalf("hub counters:\n%s\nwant:\n%s", got, want)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, loadgen.HubAfterFile), []byte(got), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadgen.ReadCounters(dir)
	if err != nil || c.Escapes["retry"] != 2 || c.Escapes["group_saturated"] != 5 {
		t.Fatalf("read back: %+v, %v", c, err)
	}
}
