package stats

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// kvEngine serves scripted KV-cache bodies: call n (from 1) gets bodies[n-1]
// (the last one repeats); a body "500" answers that status.
func kvEngine(t *testing.T, bodies ...string) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/kv-cache/stats" {
			http.NotFound(w, r)
			return
		}
		i := min(int(n.Add(1)), len(bodies)) - 1
		if bodies[i] == "500" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(bodies[i]))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func kvOf(s protocol.ModelStats) [3]uint64 {
	return [3]uint64{s.KVCacheCapacityTokens, s.KVCacheUsedTokens, s.KVCacheFreeTokens}
}

func TestKVPollAppliesAndKeepsLastValues(t *testing.T) {
	t.Parallel()
	srv := kvEngine(t,
		`{"model":"dummy-model","kv_cache_capacity_tokens":1000,"kv_cache_used_tokens":300,"kv_cache_free_tokens":700,"kv_cache_entries":3}`,
		"500",
		`{"model":"dummy-model","kv_cache_capacity_tokens":1000`,
		`{"model":"dummy-model","kv_cache_capacity_tokens":1000,"kv_cache_used_tokens":300}`,
		`{"model":"dummy-model","kv_cache_capacity_tokens":-1,"kv_cache_used_tokens":300,"kv_cache_free_tokens":700}`,
		`{"model":"other-model","kv_cache_capacity_tokens":5,"kv_cache_used_tokens":5,"kv_cache_free_tokens":0}`,
		`{"model":"","kv_cache_capacity_tokens":5,"kv_cache_used_tokens":5,"kv_cache_free_tokens":0}`,
		`{"model":"dummy-model","kv_cache_capacity_tokens":1000,"kv_cache_used_tokens":900,"kv_cache_free_tokens":100}`,
	)
	h := newHarness(t, Config{UpstreamBaseURL: srv.URL, StreamMode: ModeOff, KVCachePath: "/kv-cache/stats"})
	h.c.AddModel(model)
	drain(h.c)
	ctx := context.Background()

	h.c.pollKV(ctx)
	s := h.stats(model)
	if kvOf(s) != [3]uint64{1000, 300, 700} || !slices.Equal(s.StatsSources, []string{protocol.SourceKVCacheStats}) ||
		!slices.Equal(s.StatsCapabilities, []string{protocol.CapabilityKVCacheHTTP}) || !signalled(h.c) {
		t.Fatalf("first poll: %+v", s)
	}
	for range 6 { // failure, bad JSON, missing field, bad type, unknown model, empty model
		h.clk.Advance(time.Second)
		h.c.pollKV(ctx)
		if got := kvOf(h.stats(model)); got != [3]uint64{1000, 300, 700} {
			t.Fatalf("values changed to %v", got)
		}
	}
	if _, ok := h.c.Stats("other-model"); ok {
		t.Fatal("KV stats created a model")
	}
	if signalled(h.c) {
		t.Fatal("unchanged KV values signalled")
	}
	h.c.pollKV(ctx)
	if got := kvOf(h.stats(model)); got != [3]uint64{1000, 900, 100} || !signalled(h.c) {
		t.Fatalf("last poll: %v", got)
	}
	if h.metric("pylon_model_kv_cache_used_tokens", "model="+model) != 900 ||
		h.metric("pylon_model_stats_capability", "model="+model+",capability="+protocol.CapabilityKVCacheHTTP) != 1 {
		t.Fatal("KV gauges")
	}
	// Staleness never clears KV values.
	h.c.sweep(h.clk.Now().Add(time.Hour))
	if got := kvOf(h.stats(model)); got != [3]uint64{1000, 900, 100} {
		t.Fatalf("after sweep: %v", got)
	}
}

func TestKVPollTimesOutOnTheClock(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, Config{UpstreamBaseURL: srv.URL, StreamMode: ModeOff, KVCachePath: "/kv-cache/stats"})
	h.c.AddModel(model)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.c.pollKV(context.Background())
	}()
	h.clk.WaitForTimers(1) // the poll's deadline
	select {
	case <-done:
		t.Fatal("poll ended before its deadline")
	default:
	}
	h.clk.Advance(KVPollTimeout)
	select {
	case <-done:
	case <-time.After(failAfter):
		t.Fatal("poll ignored its deadline")
	}
	if s := h.stats(model); s.StatsSources != nil {
		t.Fatalf("timed-out poll applied: %+v", s)
	}
}

func TestRunPollsKV(t *testing.T) {
	t.Parallel()
	srv := kvEngine(t, `{"model":"dummy-model","kv_cache_capacity_tokens":10,"kv_cache_used_tokens":4,"kv_cache_free_tokens":6}`)
	h := newHarness(t, Config{UpstreamBaseURL: srv.URL, StreamMode: ModeOff, KVCachePath: "/kv-cache/stats"})
	h.c.AddModel(model)
	drain(h.c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.c.Run(ctx) }()
	select {
	case <-h.c.Changed():
	case <-time.After(failAfter):
		t.Fatal("no KV poll at start")
	}
	if got := kvOf(h.stats(model)); got != [3]uint64{10, 4, 6} {
		t.Fatalf("KV %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMetricsNamesAndRegistration(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeAuto})
	h.c.AddModel(model)
	h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 3})
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{
		"pylon_engine_stats_stream_events_total", "pylon_engine_stats_stream_invalid_events_total",
		"pylon_engine_stats_stream_reconnects_total", "pylon_engine_stats_stream_connected",
		"pylon_engine_stats_live_requests",
		"pylon_model_output_tps", "pylon_model_last_mean_input_tps", "pylon_model_max_output_tps",
		"pylon_model_queue_size", "pylon_model_queued_input_tokens", "pylon_model_kv_cache_capacity_tokens",
		"pylon_model_kv_cache_used_tokens", "pylon_model_kv_cache_free_tokens",
		"pylon_model_stats_capability", "pylon_model_stats_source",
		"pylon_requests_inflight", "pylon_requests_state", "pylon_requests_state_input_tokens",
	} {
		if !have[name] {
			t.Errorf("metric %s not exported", name)
		}
	}
	if h.metric("pylon_model_queued_input_tokens", "model="+model) != 3 ||
		h.metric("pylon_requests_state", "model="+model+",state=upstream_connecting") != 1 {
		t.Error("request gauges")
	}
	// Retired models leave no series behind.
	h.c.RemoveModel(model)
	if h.metric("pylon_requests_inflight", "model="+model) != 0 {
		t.Error("series of a removed model")
	}
	// A second collector on the same registry is an error, not a panic.
	if _, err := New(Config{UpstreamBaseURL: "http://x", Registerer: h.reg}); err == nil {
		t.Error("duplicate registration accepted")
	}
	// No registerer: everything still works.
	c, err := New(Config{UpstreamBaseURL: "http://x", StreamMode: ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	c.AddModel(model)
	c.Begin(RequestInfo{ID: "a", Model: model}).Finish(Cancelled)
	var _ prometheus.Collector = &snapshotCollector{c: c}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		flag string
	}{
		{Config{}, "--upstream-http-base-url"},
		{Config{UpstreamBaseURL: "localhost:8090"}, "--upstream-http-base-url"},
		{Config{UpstreamBaseURL: "http://h", StreamMode: "sometimes"}, "--engine-stats-stream"},
		{Config{UpstreamBaseURL: "http://h", StreamPath: "stats"}, "--engine-stats-stream-path"},
		{Config{UpstreamBaseURL: "http://h", KVCachePath: "kv"}, "--kv-cache-stats-path"},
		{Config{UpstreamBaseURL: "http://h", InitialInputTPS: -1}, "--initial-input-tps"},
		{Config{UpstreamBaseURL: "http://h", InitialInputTPS: posInf()}, "--initial-input-tps"},
		{Config{UpstreamBaseURL: "http://h", PinInputTPS: true}, "--benchmark-pin-input-tps"},
		{Config{UpstreamBaseURL: "http://h", HTTPClient: &http.Client{Timeout: time.Second}}, "Timeout"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if err == nil || !contains(err.Error(), tc.flag) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.flag)
		}
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("New accepted %+v", tc.cfg)
		}
	}
	if err := (Config{UpstreamBaseURL: "https://h:1/", StreamMode: ModeRequired, InitialInputTPS: 5, PinInputTPS: true}).Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}
