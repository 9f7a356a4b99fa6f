package stats

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/protocol"
)

const (
	roleChunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`
	stopChunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
)

func contentChunk(s string) []byte {
	return fmt.Appendf(nil, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, s)
}

func stat(h *harness, id string, processed, generated uint64, finished bool) {
	fin := ""
	if finished {
		fin = `,"finished":true`
	}
	h.line(`{"v":1,"type":"stats","request_id":"%s","model":"%s","tokens_processed":%d,"tokens_generated":%d%s}`, id, model, processed, generated, fin)
}

// streamRequest plays one streamed chat request the way the mock engine
// reports it: (0,0) on arrival, (in,0) after prefill, (in,k) per token.
func streamRequest(h *harness, id string, input uint64, prefill time.Duration, tokens int, tokenDelay time.Duration) {
	o := h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: input})
	stat(h, id, 0, 0, false)
	h.clk.Advance(prefill)
	o.Headers(200)
	stat(h, id, input, 0, false)
	o.Output([]byte(roleChunk))
	for k := 1; k <= tokens; k++ {
		if k > 1 {
			h.clk.Advance(tokenDelay)
		}
		o.Output(contentChunk("tok"))
		stat(h, id, input, uint64(k), false)
	}
	o.Output([]byte(stopChunk))
	stat(h, id, input, uint64(tokens), true)
	o.Finish(Complete)
}

func TestStreamModeInputTPSAcceptance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeAuto})
	h.c.AddModel(model)
	for i := range 4 {
		streamRequest(h, fmt.Sprintf("req-%d", i), 1000, 500*time.Millisecond, 4, 100*time.Millisecond)
	}
	if s := h.stats(model); s.LastMeanInputTPS != 0 {
		t.Fatalf("last_mean_input_tps %v before 5 samples", s.LastMeanInputTPS)
	}
	streamRequest(h, "req-4", 1000, 500*time.Millisecond, 4, 100*time.Millisecond)
	s := h.stats(model)
	if !approx(s.LastMeanInputTPS, 2000, 1e-9) {
		t.Fatalf("last_mean_input_tps %v, want 2000", s.LastMeanInputTPS)
	}
	if !slices.Equal(s.StatsSources, []string{protocol.SourceEngineStatsStream}) ||
		!slices.Equal(s.StatsCapabilities, []string{protocol.CapabilityEngineStream}) {
		t.Fatalf("labels %v / %v", s.StatsCapabilities, s.StatsSources)
	}
	// Only the stream fed the distribution: observer completions add nothing
	// in stream mode.
	if n := h.c.gens[model].dist.count; n != 5 {
		t.Fatalf("distribution holds %d samples, want 5", n)
	}
	// Output: first sample 1 token over the 500 ms since (0,0) (an engine
	// counter starts at 0 at acceptance, so the first sample includes TTFT),
	// then 1 token per 100 ms.
	if !approx(s.MaxOutputTPS, 10, 1e-9) {
		t.Fatalf("max_output_tps %v", s.MaxOutputTPS)
	}
	if !approx(s.OutputTPS, (2+10+10+10+2+10+10+10)/8.0, 1e-9) {
		t.Fatalf("output_tps %v", s.OutputTPS)
	}
	if h.metric("pylon_model_last_mean_input_tps", "model="+model) != s.LastMeanInputTPS ||
		h.metric("pylon_model_stats_source", "model="+model+",source=engine_stats_stream") != 1 ||
		h.metric("pylon_model_stats_source", "model="+model+",source=chunk_usage") != 0 {
		t.Fatal("model gauges disagree with Stats")
	}
}

func TestSeedMovesSlowlyAndPinHolds(t *testing.T) {
	t.Parallel()
	for _, pin := range []bool{false, true} {
		h := newHarness(t, Config{StreamMode: ModeRequired, InitialInputTPS: 1000, PinInputTPS: pin})
		h.c.AddModel(model)
		if s := h.stats(model); s.LastMeanInputTPS != 1000 {
			t.Fatalf("pin=%v: seeded value %v", pin, s.LastMeanInputTPS)
		}
		streamRequest(h, "a", 1000, 250*time.Millisecond, 1, 0) // one sample of 4000
		want := (5*1000 + 4000) / 6.0
		if pin {
			want = 1000
		}
		if got := h.stats(model).LastMeanInputTPS; !approx(got, want, 1e-9) {
			t.Fatalf("pin=%v: last_mean_input_tps %v, want %v", pin, got, want)
		}
		if n := h.c.gens[model].dist.count; n != 6 {
			t.Fatalf("pin=%v: distribution count %d, want 6", pin, n)
		}
	}
}

func TestEngineEventsDroppedAndCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	h.c.Begin(RequestInfo{ID: "r", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	stat(h, "r", 0, 0, false)
	h.clk.Advance(time.Second)
	stat(h, "r", 100, 5, false)
	h.clk.Advance(time.Second)
	stat(h, "r", 90, 6, false)  // processed regressed
	stat(h, "r", 100, 4, false) // generated regressed
	stat(h, "r", 100, 10, true)
	h.clk.Advance(time.Second)
	stat(h, "r", 100, 11, false) // after finished
	stat(h, "bypassed", 10, 0, false)
	h.c.Begin(RequestInfo{ID: "calibration-x-g1-1", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	stat(h, "calibration-x-g1-1", 100, 1, true)
	for reason, want := range map[string]float64{
		ReasonRegressing: 2, ReasonPostFinalize: 1, ReasonUnknownRequest: 1, ReasonCalibration: 1,
	} {
		if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason="+reason); got != want {
			t.Errorf("invalid{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := h.metric("pylon_engine_stats_stream_events_total", "type=stats"); got != 8 {
		t.Errorf("stats events %v, want 8", got)
	}
	g := h.c.gens[model]
	// Samples: input 100/1s; output 5/1s then 5/1s (the regressions applied nothing).
	if g.dist.count != 1 || g.dist.mean != 100 || g.out.n != 2 || g.maxOut != 5 {
		t.Fatalf("dist %+v window %+v max %v", g.dist, g.out, g.maxOut)
	}
}

func TestCanaryEventsCountOverTheFloor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	id, ok := h.c.NewCanaryID(model)
	if !ok {
		t.Fatal("no canary id")
	}
	// A non-streamed canary yields one event: 4 tokens over the 10 ms floor.
	h.line(`{"v":1,"type":"stats","request_id":"%s","model":"%s","tokens_processed":4,"tokens_generated":1,"finished":true}`, id, model)
	g := h.c.gens[model]
	if g.dist.count != 1 || g.dist.mean != 400 || g.maxOut != 100 {
		t.Fatalf("dist %+v max %v", g.dist, g.maxOut)
	}
	// Another process's canary, or a stale generation, is unknown.
	h.line(`{"v":1,"type":"stats","request_id":"canary-other-g1-1","model":"%s","tokens_processed":4}`, model)
	h.line(`{"v":1,"type":"stats","request_id":"canary-%s-g99-1","model":"%s","tokens_processed":4}`, h.c.scope, model)
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=unknown_request"); got != 2 {
		t.Fatalf("unknown_request %v, want 2", got)
	}
	if cal, ok := h.c.NewCalibrationID(model); !ok || cal[:len(CalibrationPrefix)] != CalibrationPrefix {
		t.Fatalf("calibration id %q", cal)
	}
	if _, ok := h.c.NewCanaryID("nope"); ok {
		t.Fatal("canary id for an unknown model")
	}
}

// fallbackRequest plays one streamed chat request against a mock that sends
// no usage: a role chunk, then tokens one word each, tokenDelay apart.
func fallbackRequest(h *harness, id string, input uint64, prefill time.Duration, tokens int, tokenDelay time.Duration) *Observer {
	o := h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: input})
	h.clk.Advance(prefill)
	o.Headers(200)
	o.Output([]byte(roleChunk))
	for k := 1; k <= tokens; k++ {
		if k > 1 {
			h.clk.Advance(tokenDelay)
		}
		o.Output(contentChunk(" word"))
	}
	o.Output([]byte(stopChunk))
	o.Output([]byte("[DONE]"))
	o.Finish(Complete)
	return o
}

func TestFallbackWordCountingAcceptance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	const tokenDelay = 100 * time.Millisecond
	for i := range 5 {
		fallbackRequest(h, fmt.Sprintf("r%d", i), 1000, 50*time.Millisecond, 32, tokenDelay)
	}
	s := h.stats(model)
	want := 1000 / float64(tokenDelay.Milliseconds())
	if !approx(s.OutputTPS, want, 0.05) {
		t.Fatalf("output_tps %v, want ≈ %v", s.OutputTPS, want)
	}
	if !approx(s.OutputTPS, 32/3.1, 1e-9) || !approx(s.MaxOutputTPS, 32/3.1, 1e-9) {
		t.Fatalf("output_tps %v max %v, want 32/3.1", s.OutputTPS, s.MaxOutputTPS)
	}
	if !approx(s.LastMeanInputTPS, 1000/0.05, 1e-9) {
		t.Fatalf("last_mean_input_tps %v, want 20000", s.LastMeanInputTPS)
	}
	if s.StatsSources != nil || s.StatsCapabilities != nil {
		t.Fatalf("labels %v / %v, want none (no chunk usage, no stream)", s.StatsCapabilities, s.StatsSources)
	}
}

func TestFallbackLiveEstimateWhileStreaming(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o.Headers(200)
	o.Output([]byte(roleChunk))
	o.Output(contentChunk("one two"))
	if got := h.stats(model).OutputTPS; got != 0 {
		t.Fatalf("estimate %v with no elapsed time", got)
	}
	h.clk.Advance(500 * time.Millisecond)
	o.Output(contentChunk("three"))
	if got := h.stats(model).OutputTPS; !approx(got, 6, 1e-9) { // 3 words / 0.5 s
		t.Fatalf("live estimate %v, want 6", got)
	}
	o2 := h.c.Begin(RequestInfo{ID: "b", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o2.Headers(200)
	o2.Output(contentChunk("x"))
	h.clk.Advance(time.Second)
	o2.Output(contentChunk("y"))                                        // 2 / 1 s
	if got := h.stats(model).OutputTPS; !approx(got, (6+2)/2.0, 1e-9) { // averaged across requests
		t.Fatalf("live estimate %v, want 4", got)
	}
	o.Finish(Cancelled)
	o2.Finish(Cancelled)
	if got := h.stats(model).OutputTPS; got != 0 {
		t.Fatalf("output_tps %v after cancellations (no completed sample)", got)
	}
}

func TestFallbackExplicitUsageCounters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o.Headers(200)
	usage := func(n int) []byte {
		return fmt.Appendf(nil, `{"choices":[{"delta":{"content":"w w w"}}],"usage":{"completion_tokens":%d}}`, n)
	}
	o.Output(usage(2)) // baseline: no sample
	g := h.c.gens[model]
	if g.out.n != 0 || !g.chunkUsage {
		t.Fatalf("after baseline: window %d chunk usage %v", g.out.n, g.chunkUsage)
	}
	h.clk.Advance(500 * time.Millisecond)
	o.Output(usage(7)) // 5 tokens / 0.5 s
	h.clk.Advance(5 * time.Millisecond)
	o.Output(usage(8)) // under the floor: accumulates
	o.Output(usage(6)) // never goes down (parser keeps 8)
	o.Output(contentChunk("ignored words after usage"))
	h.clk.Advance(5 * time.Millisecond)
	o.Output(usage(9)) // 2 tokens / 10 ms
	if g.out.n != 2 || g.maxOut != 200 || !g.authoritative {
		t.Fatalf("window %+v max %v authoritative %v", g.out, g.maxOut, g.authoritative)
	}
	// Counter samples are authoritative: a live word estimate is ignored.
	o2 := h.c.Begin(RequestInfo{ID: "b", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o2.Headers(200)
	o2.Output(contentChunk("a"))
	h.clk.Advance(10 * time.Millisecond)
	o2.Output(contentChunk(string(make([]byte, 0)) + "b c d e f g h i j k l m n o p q r s t u v w x y z"))
	s := h.stats(model)
	if !approx(s.OutputTPS, (10+200)/2.0, 1e-9) {
		t.Fatalf("output_tps %v, want the window mean 105", s.OutputTPS)
	}
	if !slices.Equal(s.StatsSources, []string{protocol.SourceChunkUsage}) {
		t.Fatalf("sources %v", s.StatsSources)
	}
	o.Finish(Complete)
	o2.Finish(Cancelled)
	// The usage request completed with a live counter: no extra
	// per-request sample.
	if g.out.n != 2 {
		t.Fatalf("window %d after completion, want 2", g.out.n)
	}
}

func TestFallbackEmbeddingsInputSample(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	for i := range 5 {
		o := h.c.Begin(RequestInfo{ID: fmt.Sprint(i), Model: model, Endpoint: EndpointEmbeddings, InputTokens: 50})
		if i%2 == 0 {
			h.clk.Advance(2 * time.Millisecond) // under the floor: raised to 10 ms
			o.Headers(200)
		} else {
			h.clk.Advance(100 * time.Millisecond) // body without a recorded head: total duration
			o.Output([]byte(`{"object":"list","data":[]}`))
		}
		o.Finish(Complete)
	}
	g := h.c.gens[model]
	want := (3*5000 + 2*500) / 5.0
	if g.dist.count != 5 || !approx(h.stats(model).LastMeanInputTPS, want, 1e-9) {
		t.Fatalf("dist %+v, want mean %v", g.dist, want)
	}
}

func TestCalibrationObservationsFeedInputTPSInStreamMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	for range 5 {
		id, _ := h.c.NewCalibrationID(model)
		o := h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: 4096})
		h.clk.Advance(2 * time.Second)
		o.Headers(200)
		o.Output([]byte(`{"object":"chat.completion","choices":[{"message":{"content":"1"}}],"usage":{"prompt_tokens":4096,"completion_tokens":1}}`))
		if o.Finish(Complete) != Complete {
			t.Fatal("calibration request not complete")
		}
	}
	if got := h.stats(model).LastMeanInputTPS; got != 2048 {
		t.Fatalf("last_mean_input_tps %v, want 2048", got)
	}
	// A tunnel request in stream mode adds no observer sample.
	fallbackRequest(h, "tunnel", 1, 10*time.Millisecond, 1, 0)
	if n := h.c.gens[model].dist.count; n != 5 {
		t.Fatalf("distribution count %d, want 5", n)
	}
}

func TestSweepStalenessKeepsStickyValues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	for i := range 5 {
		streamRequest(h, fmt.Sprint(i), 1000, 500*time.Millisecond, 3, 100*time.Millisecond)
	}
	before := h.stats(model)
	if before.OutputTPS == 0 || before.LastMeanInputTPS == 0 || before.MaxOutputTPS == 0 {
		t.Fatalf("no stats to go stale: %+v", before)
	}
	last := h.clk.Now()
	h.c.sweep(last.Add(ModelTTL - time.Millisecond))
	if got := h.stats(model).OutputTPS; got != before.OutputTPS {
		t.Fatalf("cleared before the model TTL: %v", got)
	}
	h.c.sweep(last.Add(ModelTTL))
	after := h.stats(model)
	if after.OutputTPS != 0 || after.LastMeanInputTPS != before.LastMeanInputTPS || after.MaxOutputTPS != before.MaxOutputTPS {
		t.Fatalf("after staleness: %+v", after)
	}
	if h.c.gens[model].authoritative {
		t.Fatal("counter-authoritative flag not reset")
	}
	if got := h.metric("pylon_engine_stats_stale_cleanups_total", "kind=stats,source=engine_stats_stream"); got != 1 {
		t.Fatalf("stats cleanups %v", got)
	}
	h.c.sweep(last.Add(2 * ModelTTL)) // nothing left to clear: not counted again
	if got := h.metric("pylon_engine_stats_stale_cleanups_total", "kind=stats,source=engine_stats_stream"); got != 1 {
		t.Fatalf("stats cleanups %v after a second sweep", got)
	}
}

func TestSweepRequestTTL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	o := h.c.Begin(RequestInfo{ID: "slow", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	stat(h, "slow", 0, 0, false)
	h.c.Begin(RequestInfo{ID: "done", Model: model, Endpoint: EndpointChat, InputTokens: 10}).Finish(Cancelled)
	start := h.clk.Now()
	if got := h.metric("pylon_engine_stats_live_requests", "source=engine_stats_stream"); got != 1 {
		t.Fatalf("live requests %v", got)
	}
	h.c.sweep(start.Add(RequestTTL - time.Millisecond))
	if !h.c.reqs["slow"].counting || h.c.reqs["done"] == nil {
		t.Fatal("request state dropped before the TTL")
	}
	h.c.sweep(start.Add(RequestTTL))
	if t0 := h.c.reqs["slow"]; !t0.finalized || h.c.reqs["done"] != nil {
		t.Fatalf("after TTL: slow %+v, done %v", t0, h.c.reqs["done"])
	}
	if got := h.metric("pylon_engine_stats_stale_cleanups_total", "kind=request,source=engine_stats_stream"); got != 1 {
		t.Fatalf("request cleanups %v", got)
	}
	// The tombstone rejects late events, then goes away after another TTL.
	h.clk.Set(start.Add(RequestTTL + time.Second))
	stat(h, "slow", 10, 0, false)
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=post_finalize"); got != 1 {
		t.Fatalf("post_finalize %v", got)
	}
	h.c.sweep(start.Add(2 * RequestTTL))
	if _, ok := h.c.reqs["slow"]; ok {
		t.Fatal("tombstone outlived the TTL")
	}
	// The projection is the engine proxy's: the observer still counts until Finish.
	if s := h.stats(model); s.NumRunningQueries != 1 {
		t.Fatalf("projection %+v", s)
	}
	o.Finish(Cancelled)
}

// max_input_tps is the peak the mean has reached: seeded by
// --initial-input-tps, raised by a faster mean, kept when the mean falls.
func TestMaxInputTPSIsThePeakMean(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired, InitialInputTPS: 1000})
	h.c.AddModel(model)
	if s := h.stats(model); s.MaxInputTPS != 1000 {
		t.Fatalf("seeded max_input_tps %v, want 1000", s.MaxInputTPS)
	}
	streamRequest(h, "fast", 1000, 250*time.Millisecond, 1, 0) // a sample of 4000
	peak := (5*1000 + 4000) / 6.0
	if s := h.stats(model); !approx(s.MaxInputTPS, peak, 1e-9) {
		t.Fatalf("max_input_tps %v after a faster sample, want %v", s.MaxInputTPS, peak)
	}
	streamRequest(h, "slow", 100, time.Second, 1, 0) // a sample of 100 lowers the mean
	if s := h.stats(model); !(s.LastMeanInputTPS < peak) || !approx(s.MaxInputTPS, peak, 1e-9) {
		t.Fatalf("mean %v, max_input_tps %v: the peak must stay %v", s.LastMeanInputTPS, s.MaxInputTPS, peak)
	}
}

// --max-engine-concurrency is published as max_engine_concurrency; without
// it the field stays 0 (unknown), as upstream Stargate always publishes it.
func TestMaxEngineConcurrencyPublished(t *testing.T) {
	t.Parallel()
	for _, mec := range []uint64{0, 25} {
		h := newHarness(t, Config{StreamMode: ModeRequired, MaxEngineConcurrency: mec})
		h.c.AddModel(model)
		if got := h.stats(model).MaxEngineConcurrency; got != mec {
			t.Fatalf("max_engine_concurrency %d, want %d", got, mec)
		}
	}
}
