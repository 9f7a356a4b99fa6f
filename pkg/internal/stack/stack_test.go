package stack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/obs"
)

// fakeFleet plays the binary the test binary was started as (Start runs
// it through a symlink named hub, gateway, pylon or mock-engine), just
// enough for Start and the recorders: readiness, pylons that register with
// the hub using the registration token, the hub's /debug/state listing
// them, /metrics with a <binary>_build_info, and for mock-engine a real
// in-process mock engine. mode "fleet,fail=ROLE" makes that role exit at
// once; "fleet,hang=ROLE" makes it never ready.
func fakeFleet(mode string) int {
	role := filepath.Base(os.Args[0])
	if strings.Contains(mode, "fail="+role) {
		fmt.Fprintln(os.Stderr, role+": refusing to start")
		return 2
	}
	ready := !strings.Contains(mode, "hang="+role)
	args := os.Args[1:]
	arg := func(name string) string { v, _ := flagValue(args, name); return v }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry()
	obs.BuildInfo(reg, strings.ReplaceAll(role, "-", "_"), "test")
	metrics := obs.MetricsHandler(reg)
	readyz := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	servers := map[string]http.Handler{}
	switch role {
	case "hub":
		token, _ := os.ReadFile(arg("registration-token-file"))
		var mu sync.Mutex
		var clusters []map[string]any
		model := ""
		backend := http.NewServeMux()
		backend.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+strings.TrimSpace(string(token)) {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			tps, _ := strconv.ParseFloat(r.FormValue("tps"), 64)
			mu.Lock()
			defer mu.Unlock()
			model = r.FormValue("model")
			clusters = append(clusters, map[string]any{"cluster_id": r.FormValue("cluster"), "rtt_ns": 1000, "stats": map[string]any{"max_input_tps": tps}})
		})
		// The routing state is on the admin listener, beside /metrics.
		admin := http.NewServeMux()
		admin.Handle("GET /metrics", metrics)
		admin.HandleFunc("GET /debug/state", func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"routing": map[string]any{"targets": []any{map[string]any{"model": model, "clusters": clusters}}}})
		})
		servers[arg("listen")], servers[arg("backend-listen")], servers[arg("metrics-listen")] = readyz, backend, admin
	case "pylon":
		token, _ := os.ReadFile(arg("auth-token-file"))
		form := fmt.Sprintf("cluster=%s&model=%s&tps=%s", arg("cluster-id"), arg("model-name"), arg("initial-input-tps"))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+arg("stargate-address")+"/register", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "pylon: registering:", err, resp)
			return 1
		}
		_ = resp.Body.Close()
		servers[arg("listen")], servers[arg("metrics-listen")] = readyz, metrics
	case "gateway":
		if os.Getenv("OLRIC_ENABLED") != "true" || os.Getenv("STARGATE_LAST_CLUSTER_ENABLED") != "true" {
			fmt.Fprintln(os.Stderr, "gateway: Olric and last-cluster tracking are off")
			return 1
		}
		servers[arg("listen")], servers[arg("metrics-listen")] = readyz, metrics
	case floorBinary:
		u, err := url.Parse(arg("target"))
		if err != nil || u.Host == "" {
			fmt.Fprintln(os.Stderr, "baseline-proxy: bad --target", arg("target"))
			return 2
		}
		servers[arg("listen")] = httputil.NewSingleHostReverseProxy(u)
	case "mock-engine":
		cfg := mockengine.DefaultConfig()
		cfg.ModelName = arg("model-name")
		cfg.TTFT, cfg.TokenDelay, cfg.ColdPrefillTPS, cfg.CachedPrefillTPS = 0, 0, 0, 0
		eng, err := mockengine.New(cfg, clock.Real{}, reg, slog.New(slog.DiscardHandler))
		if err != nil {
			fmt.Fprintln(os.Stderr, "mock-engine:", err)
			return 1
		}
		defer eng.Close()
		servers[arg("listen")] = eng.Handler(metrics)
	default:
		fmt.Fprintln(os.Stderr, "unknown role", role)
		return 1
	}
	for a, h := range servers {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 1
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
	}
	<-ctx.Done()
	return 0
}

// fakeBin is a bin folder whose Binaries are all the test binary.
func fakeBin(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, b := range Binaries() {
		if err := os.Symlink(exe, filepath.Join(dir, b)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// listenAddrs reads the --listen address of every child from the first
// line of its log ("# binary args").
func listenAddrs(t *testing.T, logDir string) map[string]string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	out := map[string]string{}
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		_ = f.Close()
		if a, ok := flagValue(strings.Fields(line), "listen"); ok {
			out[strings.TrimSuffix(filepath.Base(l), ".log")] = a
		}
	}
	return out
}

// assertAllGone fails unless nothing listens on any child's address.
func assertAllGone(t *testing.T, logDir string) {
	t.Helper()
	addrs := listenAddrs(t, logDir)
	if len(addrs) == 0 {
		t.Fatal("no child logs")
	}
	for name, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("%s still listens on %s", name, a)
		}
	}
}

func chat(t *testing.T, engine, prompt string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"dummy-model","max_tokens":2,"messages":[{"role":"user","content":%q}]}`, prompt)
	resp, err := http.Post(engine+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: HTTP %d", resp.StatusCode)
	}
}

// counter reads one series' value for cluster from an engines file.
func counter(t *testing.T, file []byte, cluster, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cluster+" "+series) + `\{model_name="dummy-model"\} (\S+)$`).FindSubmatch(file)
	if m == nil {
		t.Fatalf("no %s %s in\n%s", cluster, series, file)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestStartRecordsAndStops(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	logs := filepath.Join(t.TempDir(), "logs") // Start creates it
	st, err := Start(t.Context(), Options{BinDir: fakeBin(t), LogDir: logs, Fleet: LegacyBenchFleet(), Principal: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	ep := st.Endpoints()
	ids := LegacyBenchFleet().ClusterIDs()
	for _, id := range ids {
		if ep.Engines[id] == "" || ep.PylonMetrics[id] == "" {
			t.Errorf("no engine or pylon metrics URL for %s: %+v", id, ep)
		}
	}
	if ep.Gateway == "" || ep.GatewayMetrics == "" || ep.Hub == "" || ep.HubMetrics == "" || ep.GatewayToken == "" {
		t.Errorf("endpoints %+v", ep)
	}
	keys, err := os.ReadFile(ep.APIKeysFile)
	if err != nil || string(keys) != ep.APIKey+" bench\n" || !strings.HasPrefix(ep.APIKey, "sk-bench-") {
		t.Errorf("api key %q, file %q (%v)", ep.APIKey, keys, err)
	}

	// The same prompt (several cache blocks long) twice on near-a fills
	// and hits its cache.
	prompt := strings.Repeat("tell me a long story about a cache. ", 50)
	chat(t, ep.Engines["near-a"], prompt)
	chat(t, ep.Engines["near-a"], prompt)
	dir := t.TempDir()
	ctx := t.Context()
	if err := st.WriteEngineCounters(ctx, filepath.Join(dir, "before.txt")); err != nil {
		t.Fatal(err)
	}
	if err := st.ResetCaches(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteEngineCounters(ctx, filepath.Join(dir, "after.txt")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "before.txt"))
	after, _ := os.ReadFile(filepath.Join(dir, "after.txt"))
	if n := bytes.Count(after, []byte("\n")); n != 4*len(ids) {
		t.Errorf("%d lines, want 4 per engine:\n%s", n, after)
	}
	for i, id := range ids {
		// Fleet order, each engine's lines together.
		if got := strings.Split(string(after), "\n")[4*i]; !strings.HasPrefix(got, id+" mock_engine_kv_cache_blocks{") {
			t.Errorf("line %d = %q, want %s's first", 4*i, got, id)
		}
	}
	if counter(t, before, "near-a", "vllm:prefix_cache_hits_total") <= 0 || counter(t, before, "near-a", "mock_engine_kv_cache_blocks") <= 0 {
		t.Errorf("near-a did not cache:\n%s", before)
	}
	if counter(t, after, "near-a", "mock_engine_kv_cache_blocks") != 0 {
		t.Errorf("ResetCaches left blocks:\n%s", after)
	}
	// The reset empties the cache, not the counters.
	if h := counter(t, after, "near-a", "vllm:prefix_cache_hits_total"); h != counter(t, before, "near-a", "vllm:prefix_cache_hits_total") {
		t.Errorf("hits changed by the reset: %v", h)
	}
	if counter(t, after, "far-b", "vllm:prefix_cache_queries_total") != 0 {
		t.Errorf("far-b was asked:\n%s", after)
	}

	if err := st.WriteVersions(ctx, filepath.Join(dir, "versions.txt")); err != nil {
		t.Fatal(err)
	}
	versions, _ := os.ReadFile(filepath.Join(dir, "versions.txt"))
	want := `hub hub_build_info{version="test"} 1
gateway gateway_build_info{version="test"} 1
pylon-near-a pylon_build_info{version="test"} 1
engine-near-a mock_engine_build_info{version="test"} 1
`
	if string(versions) != want {
		t.Errorf("versions.txt:\n%s\nwant:\n%s", versions, want)
	}

	st.l.mu.Lock()
	procs := slices.Clone(st.l.procs)
	st.l.mu.Unlock()
	if len(procs) != 2+2*len(ids) {
		t.Fatalf("%d children, want a hub, a gateway and an engine and a pylon per cluster", len(procs))
	}
	st.Stop()
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			t.Errorf("%s still running after Stop", p.name)
		}
	}
	if _, err := os.Stat(filepath.Dir(ep.APIKeysFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left the credentials: %v", err)
	}
	st.Stop() // a second call does nothing
	assertAllGone(t, logs)
}

// TestStartLaysOutPylonsAndEngines starts the pressure fleet (fake
// binaries): one child per pylon and per engine, each pylon given its own
// engines, every URL in the endpoints under the layout's names.
func TestStartLaysOutPylonsAndEngines(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	f := BenchFleet()
	st, err := Start(t.Context(), Options{BinDir: fakeBin(t), LogDir: t.TempDir(), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	ep := st.Endpoints()
	if len(ep.Engines) != 16 || len(ep.PylonMetrics) != 8 {
		t.Fatalf("%d engines, %d pylons; want 16 and 8", len(ep.Engines), len(ep.PylonMetrics))
	}
	used := map[string]string{}
	for _, p := range f.Pylons() {
		if ep.PylonMetrics[p.Name] == "" {
			t.Errorf("no metrics URL for pylon %s", p.Name)
		}
		if !st.Running("pylon-" + p.Name) {
			t.Errorf("pylon-%s is not running", p.Name)
		}
		args := st.l.latest("pylon-" + p.Name).cmd.Args
		upstreams, _ := flagValue(args, "upstream-http-base-url")
		for _, id := range p.Engines {
			if !st.Running("engine-" + id) {
				t.Errorf("engine-%s is not running", id)
			}
			if !strings.Contains(upstreams, ep.Engines[id]) {
				t.Errorf("pylon %s upstreams %q lack its engine %s (%s)", p.Name, upstreams, id, ep.Engines[id])
			}
			if other, ok := used[ep.Engines[id]]; ok {
				t.Errorf("engine URL %s used by %s and %s", ep.Engines[id], other, id)
			}
			used[ep.Engines[id]] = id
		}
	}
}

func TestStartStopsWhatItStartedWhenAChildFails(t *testing.T) {
	t.Setenv(childEnv, "fleet,fail=pylon")
	logs := t.TempDir()
	secrets := t.TempDir()
	st, err := Start(t.Context(), Options{BinDir: fakeBin(t), LogDir: logs, SecretDir: secrets, Fleet: LegacyBenchFleet()})
	if st != nil || err == nil || !strings.Contains(err.Error(), "pylon-near-a: exited before it was ready") ||
		!strings.Contains(err.Error(), "pylon: refusing to start") {
		t.Fatalf("Start = %v, %v; want the failing pylon named with its log", st, err)
	}
	assertAllGone(t, logs)
	// A caller's secret folder is the caller's to remove.
	if _, err := os.Stat(filepath.Join(secrets, "api-keys")); err != nil {
		t.Errorf("api-keys: %v", err)
	}
}

func TestStartStopsWhatItStartedWhenCancelled(t *testing.T) {
	t.Setenv(childEnv, "fleet,hang=gateway")
	logs := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	st, err := Start(ctx, Options{BinDir: fakeBin(t), LogDir: logs, Fleet: LegacyBenchFleet()})
	if st != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, %v; want the context's error", st, err)
	}
	assertAllGone(t, logs)
}

func TestMissingBinaries(t *testing.T) {
	dir := t.TempDir()
	if got := MissingBinaries(dir); !slices.Equal(got, Binaries()) {
		t.Errorf("empty folder: missing %v", got)
	}
	_ = os.WriteFile(filepath.Join(dir, "hub"), []byte("#!/bin/sh\n"), 0o700)
	_ = os.WriteFile(filepath.Join(dir, "pylon"), []byte("not executable"), 0o600)
	_ = os.Mkdir(filepath.Join(dir, "gateway"), 0o700)
	if got := MissingBinaries(dir); !slices.Equal(got, []string{"gateway", "pylon", "mock-engine"}) {
		t.Errorf("missing %v, want gateway (a folder), pylon (not executable), mock-engine", got)
	}
	_, err := Start(t.Context(), Options{BinDir: dir, LogDir: t.TempDir(), Fleet: LegacyBenchFleet()})
	if err == nil || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "mock-engine") {
		t.Errorf("Start with missing binaries: %v", err)
	}
}
