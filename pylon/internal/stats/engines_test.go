package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
)

// enginesHarness is newHarness with several engines (newHarness would also
// fill in UpstreamBaseURL).
func enginesHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(epoch), reg: prometheus.NewRegistry()}
	cfg.Clock, cfg.Registerer = h.clk, h.reg
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.c = c
	return h
}

// runCollector runs h's collector until the test ends; every handled
// stream line is reported on the returned channel.
func runCollector(t *testing.T, h *harness) <-chan struct{} {
	t.Helper()
	handled := make(chan struct{}, 1024)
	h.c.onLine = func() { handled <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return handled
}

// sendLine writes one line on an engine's open stream and waits until the
// collector has handled it.
func sendLine(t *testing.T, e *engine, handled <-chan struct{}, line string) {
	t.Helper()
	select {
	case e.lines <- line:
	case <-time.After(failAfter):
		t.Fatal("the engine stream is not open")
	}
	select {
	case <-handled:
	case <-time.After(failAfter):
		t.Fatal("line not handled")
	}
}

func statsLine(id string, processed, generated int) string {
	return fmt.Sprintf(`{"v":1,"type":"stats","request_id":%q,"model":"m","tokens_processed":%d,"tokens_generated":%d}`, id, processed, generated)
}

// inputSamples is the number of input-TPS samples model's distribution
// holds.
func (h *harness) inputSamples(model string) int {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return int(h.c.gens[model].dist.count)
}

// TestStreamEventsFromEveryEngine: both engines' stats streams feed the
// collector, each event counting for the request dispatched to that
// engine; an event for the same id from the other engine is dropped.
func TestStreamEventsFromEveryEngine(t *testing.T) {
	t.Parallel()
	open := func(int) reply { return reply{} }
	e0, e1 := newEngine(t, open), newEngine(t, open)
	h := enginesHarness(t, Config{UpstreamBaseURLs: []string{e0.srv.URL, e1.srv.URL}, StreamMode: ModeRequired})
	h.c.AddModel("m")
	o0 := h.c.Begin(RequestInfo{ID: "r0", Model: "m", Endpoint: EndpointChat, InputTokens: 100})
	o0.Dispatched(0)
	o1 := h.c.Begin(RequestInfo{ID: "r1", Model: "m", Endpoint: EndpointChat, InputTokens: 100})
	o1.Dispatched(1)
	handled := runCollector(t, h)

	sendLine(t, e0, handled, statsLine("r0", 0, 0))
	sendLine(t, e1, handled, statsLine("r1", 0, 0))
	if got := h.metric("pylon_engine_stats_live_requests", "source=engine_stats_stream"); got != 2 {
		t.Fatalf("requests with stream counters = %v, want 2 (one per engine)", got)
	}
	if got := h.metric("pylon_engine_stats_stream_connected", "mode=required"); got != 2 {
		t.Fatalf("stream_connected = %v, want 2", got)
	}
	h.clk.Advance(100 * time.Millisecond)
	sendLine(t, e0, handled, statsLine("r0", 100, 0))
	sendLine(t, e1, handled, statsLine("r1", 100, 0))
	if n := h.inputSamples("m"); n != 2 {
		t.Fatalf("input samples = %d, want one from each engine", n)
	}

	// The same id from the engine that did not get the request: dropped.
	h.clk.Advance(100 * time.Millisecond)
	sendLine(t, e1, handled, statsLine("r0", 5000, 0))
	if n := h.inputSamples("m"); n != 2 {
		t.Fatalf("input samples = %d after a foreign event, want 2", n)
	}
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=unknown_request"); got != 1 {
		t.Fatalf("unknown_request = %v, want 1", got)
	}
	if got := h.metric("pylon_engine_stats_stream_events_total", "type=stats"); got != 5 {
		t.Fatalf("stats events = %v, want 5", got)
	}
	o0.Finish(Cancelled)
	o1.Finish(Cancelled)
}

// TestDispatchedRetryMovesTheRequest: a request re-dispatched to another
// engine (a retry) counts that engine's events from a fresh baseline and
// no longer the first engine's.
func TestDispatchedRetryMovesTheRequest(t *testing.T) {
	t.Parallel()
	h := enginesHarness(t, Config{UpstreamBaseURLs: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, StreamMode: ModeRequired})
	h.c.AddModel("m")
	o := h.c.Begin(RequestInfo{ID: "r", Model: "m", Endpoint: EndpointChat, InputTokens: 100})
	o.Dispatched(0)
	var seen bool
	h.c.handleEngineLine(0, []byte(statsLine("r", 40, 0)), &seen)
	o.Dispatched(1)
	h.c.handleEngineLine(0, []byte(statsLine("r", 50, 0)), &seen)
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=unknown_request"); got != 1 {
		t.Fatalf("the first engine's late event: unknown_request = %v, want 1", got)
	}
	// Engine 1 starts from 0: 10 tokens are not a regression from 40.
	h.c.handleEngineLine(1, []byte(statsLine("r", 10, 0)), &seen)
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=regressing_counters"); got != 0 {
		t.Fatalf("the retry's counters were compared with the first engine's")
	}
	if n := h.inputSamples("m"); n != 2 {
		t.Fatalf("input samples = %d, want 2 (one per engine attempt)", n)
	}
	o.Finish(Cancelled)
}

// kvServer answers the KV stats endpoint with the values it holds.
type kvServer struct {
	srv                  *httptest.Server
	mu                   sync.Mutex
	capacity, used, free uint64
	fail                 atomic.Bool
}

func newKVServer(t *testing.T, capacity, used uint64) *kvServer {
	k := &kvServer{capacity: capacity, used: used, free: capacity - used}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if k.fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"model": "m", "kv_cache_capacity_tokens": k.capacity,
			"kv_cache_used_tokens": k.used, "kv_cache_free_tokens": k.free})
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *kvServer) set(used uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.used, k.free = used, k.capacity-used
}

// TestKVSummedAcrossEngines: the published KV fields are the sums of every
// engine's last successful poll; a failing engine keeps its last values.
func TestKVSummedAcrossEngines(t *testing.T) {
	t.Parallel()
	k0, k1, k2 := newKVServer(t, 1000, 100), newKVServer(t, 2000, 500), newKVServer(t, 4000, 0)
	h := enginesHarness(t, Config{UpstreamBaseURLs: []string{k0.srv.URL, k1.srv.URL, k2.srv.URL}, StreamMode: ModeOff,
		KVCachePath: "/kv-cache/stats"})
	h.c.AddModel("m")
	check := func(when string, capacity, used, free uint64) {
		t.Helper()
		st := h.stats("m")
		if st.KVCacheCapacityTokens != capacity || st.KVCacheUsedTokens != used || st.KVCacheFreeTokens != free {
			t.Fatalf("%s: kv = %d/%d/%d, want %d/%d/%d", when, st.KVCacheCapacityTokens, st.KVCacheUsedTokens,
				st.KVCacheFreeTokens, capacity, used, free)
		}
	}
	h.c.pollKV(context.Background())
	check("first poll", 7000, 600, 6400)
	if st := h.stats("m"); len(st.StatsSources) != 1 || st.StatsSources[0] != "kv_cache_stats" {
		t.Fatalf("sources %v", st.StatsSources)
	}

	k1.fail.Store(true)
	k0.set(900)
	h.c.pollKV(context.Background())
	check("engine 1 failing", 7000, 1400, 5600) // engine 1 keeps 2000/500/1500

	k1.fail.Store(false)
	k1.set(0)
	h.c.pollKV(context.Background())
	check("engine 1 back", 7000, 900, 6100)
}

// TestKVPolledFromEveryEngineByRun: Run starts one KV poll per engine.
func TestKVPolledFromEveryEngineByRun(t *testing.T) {
	t.Parallel()
	k0, k1 := newKVServer(t, 1000, 10), newKVServer(t, 3000, 20)
	h := enginesHarness(t, Config{UpstreamBaseURLs: []string{k0.srv.URL, k1.srv.URL}, StreamMode: ModeOff,
		KVCachePath: "/kv-cache/stats"})
	h.c.AddModel("m")
	drain(h.c)
	runCollector(t, h)
	deadline := time.After(failAfter)
	for h.stats("m").KVCacheCapacityTokens != 4000 {
		select {
		case <-h.c.Changed():
		case <-deadline:
			t.Fatalf("KV not summed: %+v", h.stats("m"))
		}
	}
	if st := h.stats("m"); st.KVCacheUsedTokens != 30 || st.KVCacheFreeTokens != 3970 {
		t.Fatalf("kv = %+v", st)
	}
}

// TestFallbackDecidedPerEngine: in auto mode, an engine without a stats
// stream falls back to OpenAI observation alone; the other keeps its
// stream, and requests are measured by their own engine's mode.
func TestFallbackDecidedPerEngine(t *testing.T) {
	t.Parallel()
	noStream := newEngine(t, func(int) reply { return reply{status: http.StatusNotFound} })
	streaming := newEngine(t, func(int) reply { return reply{prelude: []string{`{"v":1,"type":"ping"}`}} })
	h := enginesHarness(t, Config{UpstreamBaseURLs: []string{noStream.srv.URL, streaming.srv.URL}, StreamMode: ModeAuto})
	handled := runCollector(t, h)
	select {
	case <-handled: // the streaming engine's ping
	case <-time.After(failAfter):
		t.Fatal("no ping handled")
	}
	// Engine 0's consumer ends after its fallback; run it once more by
	// hand to wait for that decision (it ends at once again).
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.c.runEngineStream(context.Background(), 0)
	}()
	select {
	case <-done:
	case <-time.After(failAfter):
		t.Fatal("engine 0's stream consumer did not end")
	}
	if !h.c.EngineFallbackActive(0) {
		t.Fatal("engine 0 did not fall back")
	}
	if h.c.EngineFallbackActive(1) {
		t.Fatal("engine 1 fell back with a working stream")
	}
	if !h.c.FallbackActive() {
		t.Fatal("FallbackActive false with one engine in fallback")
	}
	if got := h.metric("pylon_engine_stats_source_transitions_total", "from=engine_stats_stream,to=openai_fallback,reason=unsupported"); got != 1 {
		t.Fatalf("transitions = %v, want 1", got)
	}

	// A completed request on the fallback engine yields an input sample
	// from its own observation; one on the streaming engine does not.
	h.c.AddModel("m")
	for i, engine := range []int{0, 1} {
		o := h.c.Begin(RequestInfo{ID: fmt.Sprint("q", i), Model: "m", Endpoint: EndpointChat, InputTokens: 100})
		o.Dispatched(engine)
		o.Headers(http.StatusOK)
		h.clk.Advance(50 * time.Millisecond)
		o.Output([]byte(`{"choices":[{"delta":{"content":"hi"}}]}`))
		o.Finish(Complete)
	}
	if n := h.inputSamples("m"); n != 1 {
		t.Fatalf("input samples = %d, want 1 (the fallback engine's request only)", n)
	}
}

func TestConfigEngines(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{UpstreamBaseURL: "http://a:1", UpstreamBaseURLs: []string{"http://b:2"}},
		{UpstreamBaseURLs: []string{"http://a:1", "http://a:1/"}},
		{UpstreamBaseURLs: []string{"http://a:1", "a:2"}},
	} {
		if err := cfg.Validate(); err == nil || !contains(err.Error(), "--upstream-http-base-url") {
			t.Errorf("Validate(%+v) = %v, want an error naming --upstream-http-base-url", cfg, err)
		}
	}
}
