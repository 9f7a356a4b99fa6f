package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/workload"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func runCLI(t *testing.T, e map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, env(e), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBadInputNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	w := filepath.Join(dir, "w.jsonl")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"generate", "--out", w}, nil, "--suite"},
		{[]string{"generate", "--suite", "nope", "--out", w}, nil, "unknown suite"},
		{[]string{"generate", "--suite", "capacity", "--rate", "-3", "--out", w}, nil, "--rate"},
		{[]string{"generate", "--suite", "smoke", "--out", w}, map[string]string{"LOADGEN_WORKERS": "many"}, "LOADGEN_WORKERS"},
		{[]string{"run", "--workload", w, "--out", dir}, nil, "--url"},
		{[]string{"run", "--workload", w, "--out", dir, "--url", "ftp://x"}, nil, "--url"},
		{[]string{"run", "--workload", w, "--out", dir, "--url", "http://x", "--target", "pylon"}, nil, "--target"},
		{[]string{"run", "--workload", w, "--out", dir, "--url", "http://x"}, nil, "--api-key"},
		{[]string{"run", "--workload", filepath.Join(dir, "none"), "--out", dir, "--url", "http://x", "--target", "hub"}, nil, "--workload"},
		{[]string{"campaign", "--suites", "smoke", "--out", dir, "--url", "http://x", "--target", "hub"}, nil, "--arms"},
		{[]string{"campaign", "--suites", "smok", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub"}, nil, "--suites"},
		{[]string{"generate", "--suite", "sessions", "--rate", "100", "--out", w}, nil, "--sessions"},
		{[]string{"generate", "--suite", "smoke", "--block-tokens", "0", "--out", w}, nil, "--block-tokens"},
		{[]string{"generate", "--suite", "capacity", "--think-time", "-1s", "--out", w}, nil, "--think-time"},
		{[]string{"run", "--workload", w, "--out", dir, "--url", "http://x", "--target", "hub", "--block-tokens", "-1"}, nil, "--block-tokens"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--capacity", "10"}, nil, "--capacity only applies with --rates"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "1x"}, nil, "needs --capacity"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "1x", "--capacity", "lots"}, nil, "--capacity"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "10,20", "--rate", "5"}, nil, "--rate and --rates"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "10,10"}, nil, "--rates"},
		{[]string{"campaign", "--suites", "capacity@8", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "10"}, nil, "--suites"},
		{[]string{"campaign", "--suites", "sessions", "--arms", "a.json", "--out", dir, "--url", "http://x", "--target", "hub", "--rates", "1x", "--capacity", "auto", "--capacity-workers", "0"}, nil, "--capacity-workers"},
		{[]string{"report"}, nil, "results folder"},
		{[]string{"frobnicate"}, nil, "unknown command"},
	} {
		code, _, stderr := runCLI(t, c.env, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", c.args, code, stderr, c.want)
		}
	}
}

func TestHelpListsFlagsAndEnv(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"generate": {"--suite", "LOADGEN_SUITE", "--seed", "LOADGEN_SEED", "--scale", "--workers", "--salt", "LOADGEN_SALT", "--think-time",
			"LOADGEN_THINK_TIME", "--block-tokens", "LOADGEN_BLOCK_TOKENS"},
		"run": {"--workload", "--target", "LOADGEN_TARGET", "--api-key-file", "--max-requests", "--timeout", "--deadline", "LOADGEN_DEADLINE",
			"--block-tokens"},
		"campaign": {"--suites", "--arms", "--resume", "--before-arm", "LOADGEN_AFTER_ARM", "--repeats",
			"--compare", "LOADGEN_COMPARE", "--bin", "LOADGEN_BIN", "--stack-logs", "--max-errors", "LOADGEN_MAX_ERRORS",
			"--rates", "LOADGEN_RATES", "--capacity", "LOADGEN_CAPACITY", "--capacity-workers", "--capacity-requests", "--salt", "--think-time", "--block-tokens"},
		"report": {"--dir", "LOADGEN_REPORT_DIR"},
	} {
		code, out, _ := runCLI(t, nil, cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", cmd, code)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %s", cmd, w)
			}
		}
	}
}

// TestGenerateRunReport is the whole CLI path against a real in-process
// mock engine: generate sessions, run it in hub mode, re-render.
func TestGenerateRunReport(t *testing.T) {
	cfg := mockengine.DefaultConfig()
	cfg.TTFT, cfg.TokenDelay, cfg.ColdPrefillTPS, cfg.CachedPrefillTPS = 0, 0, 0, 0
	eng, err := mockengine.New(cfg, clock.Real{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler(nil))
	defer srv.Close()
	defer eng.Close()

	dir := t.TempDir()
	w := filepath.Join(dir, "w.jsonl")
	code, out, stderr := runCLI(t, nil, "generate", "--suite", "sessions", "--seed", "42", "--workers", "3", "--sessions", "6", "--turns", "3", "--out", w)
	if code != 0 {
		t.Fatalf("generate: %d %s", code, stderr)
	}
	wl, fp, err := workload.ReadFile(w)
	if err != nil || !strings.Contains(out, fp) {
		t.Fatalf("generate printed %q, fingerprint %s (%v)", out, fp, err)
	}
	cacheable, total, err := workload.CacheCeiling(wl, 16)
	if err != nil || !strings.Contains(out, fmt.Sprintf("cache ceiling: %d of %d prompt tokens cacheable", cacheable, total)) {
		t.Fatalf("generate printed %q, want the ceiling %d of %d (%v)", out, cacheable, total, err)
	}
	res := filepath.Join(dir, "run1")
	code, out, stderr = runCLI(t, map[string]string{"LOADGEN_URL": srv.URL + "/v1", "LOADGEN_TARGET": "hub"}, "run", "--workload", w, "--out", res, "--max-requests", "12")
	if code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	if !strings.Contains(out, "12 requests, 12 ok") || !strings.Contains(out, "of the ceiling") || !strings.Contains(stderr, "12/12 done (ok 12") {
		t.Fatalf("run stdout %q stderr %q", out, stderr)
	}
	rep, complete, err := loadgen.ReadRun(res)
	if err != nil || !complete || rep.Meta.Fingerprint != fp || rep.Meta.URL != srv.URL || rep.Stats.Returning.CacheHitPct <= 0 {
		t.Fatalf("run.json: %v %+v", err, rep)
	}
	code, out, _ = runCLI(t, nil, "report", res)
	if code != 0 || !strings.Contains(out, "re-rendered 1 run") {
		t.Fatalf("report: %d %q", code, out)
	}
	b, _ := os.ReadFile(filepath.Join(res, loadgen.RunFile))
	var back loadgen.RunReport
	if err := json.Unmarshal(b, &back); err != nil || back.Stats.OK != 12 {
		t.Fatalf("re-rendered run.json: %v", err)
	}
}

// TestGenerateSeedAndSaltChangeEveryKey: two seeds, or two salts, give
// workloads that share no session id (every prompt_cache_key, conversation
// id and x-multi-turn-session-id) and so no prompt.
func TestGenerateSeedAndSaltChangeEveryKey(t *testing.T) {
	dir := t.TempDir()
	ids := func(args ...string) map[string]bool {
		t.Helper()
		path := filepath.Join(dir, fmt.Sprint(len(args), args[len(args)-1], ".jsonl"))
		if code, _, stderr := runCLI(t, nil, append([]string{"generate", "--suite", "smoke", "--out", path}, args...)...); code != 0 {
			t.Fatalf("generate %v: %s", args, stderr)
		}
		w, _, err := workload.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, r := range w.Requests {
			if r.Session != "" {
				m[r.Session] = true
			}
		}
		return m
	}
	base := ids("--seed", "1")
	for _, other := range [][]string{{"--seed", "2"}, {"--seed", "1", "--salt", "x"}} {
		for id := range ids(other...) {
			if base[id] {
				t.Fatalf("%v shares session id %s with --seed 1", other, id)
			}
		}
	}
}

// TestOpenLoopSessionsFromTheCLI: --rate turns the sessions suite open loop.
func TestOpenLoopSessionsFromTheCLI(t *testing.T) {
	w := filepath.Join(t.TempDir(), "w.jsonl")
	code, out, stderr := runCLI(t, nil, "generate", "--suite", "sessions", "--sessions", "20", "--turns", "3", "--rate", "5", "--think-time", "3s", "--out", w)
	if code != 0 || !strings.Contains(out, "open loop") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	wl, _, err := workload.ReadFile(w)
	if err != nil || wl.Header.Params["arrival"] != workload.ArrivalPoisson || wl.Header.Params["target_rate"] != 5.0 || wl.Header.Params["think_time_ms"] != 3000.0 {
		t.Fatalf("header %+v, %v", wl.Header, err)
	}
}
