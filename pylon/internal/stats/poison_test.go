package stats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// checkPublished fails when a published throughput is not a number the hub
// can use: NaN, an infinity, a negative or above MaxTPS.
func checkPublished(t *testing.T, s protocol.ModelStats) {
	t.Helper()
	for name, v := range map[string]float64{"last_mean_input_tps": s.LastMeanInputTPS, "max_input_tps": s.MaxInputTPS,
		"output_tps": s.OutputTPS, "max_output_tps": s.MaxOutputTPS} {
		if math.IsNaN(v) || v < 0 || v > MaxTPS {
			t.Errorf("%s = %v published", name, v)
		}
	}
}

// An engine stats line with counters no request can have (the largest
// uint64) is invalid and changes nothing; counters within the bound whose
// rate no engine reaches yield no sample, and the first such sample is
// logged once.
func TestPoisonedStreamCountersNeverReachTheRegistration(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	h := newHarness(t, Config{StreamMode: ModeRequired, InitialInputTPS: 1000,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	h.c.AddModel(model)
	h.c.Begin(RequestInfo{ID: "huge", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	stat(h, "huge", 0, 0, false)
	h.clk.Advance(10 * time.Millisecond)
	stat(h, "huge", math.MaxUint64, math.MaxUint64, false)
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason="+ReasonField); got != 1 {
		t.Errorf("invalid field events %v, want 1", got)
	}

	h.c.Begin(RequestInfo{ID: "fast", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	stat(h, "fast", 0, 0, false)
	h.clk.Advance(10 * time.Millisecond)
	stat(h, "fast", MaxCounterTokens, MaxCounterTokens, false) // 4.3e11 tokens/s
	h.clk.Advance(10 * time.Millisecond)
	stat(h, "fast", MaxCounterTokens, MaxCounterTokens, true)

	s := h.stats(model)
	checkPublished(t, s)
	if s.LastMeanInputTPS != 1000 || s.MaxInputTPS != 1000 || s.OutputTPS != 0 || s.MaxOutputTPS != 0 {
		t.Fatalf("input %v (max %v), output %v (max %v); want the seed 1000 and no output rate",
			s.LastMeanInputTPS, s.MaxInputTPS, s.OutputTPS, s.MaxOutputTPS)
	}
	if n := strings.Count(logs.String(), "implausible throughput"); n != 1 {
		t.Fatalf("%d warnings about implausible samples, want 1:\n%s", n, logs.String())
	}
}

// Usage counters in response chunks (OpenAI fallback) get the same
// bounds: one above MaxCounterTokens is ignored as if absent (the chunk's
// words count instead), and a counter that jumps at an impossible rate
// yields no sample and no live estimate.
func TestPoisonedUsageCountersAreIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	usage := func(n uint64) []byte {
		return fmt.Appendf(nil, `{"choices":[{"delta":{"content":"w"}}],"usage":{"completion_tokens":%d}}`, n)
	}

	o := h.c.Begin(RequestInfo{ID: "huge", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o.Headers(200)
	o.Output(usage(math.MaxUint64))
	h.clk.Advance(time.Second)
	o.Output(usage(math.MaxUint64))
	if s := h.stats(model); s.OutputTPS != 2 || s.StatsSources != nil { // two words, 1 s after the first
		t.Fatalf("live estimate %v, sources %v; want the words' 2/s and no chunk usage", s.OutputTPS, s.StatsSources)
	}
	o.Finish(Cancelled)

	o = h.c.Begin(RequestInfo{ID: "fast", Model: model, Endpoint: EndpointChat, InputTokens: 10})
	o.Headers(200)
	o.Output(usage(1)) // baseline
	h.clk.Advance(time.Second)
	o.Output(usage(MaxCounterTokens)) // 4.3e9 tokens in 1 s
	s := h.stats(model)
	checkPublished(t, s)
	if s.OutputTPS != 0 || s.MaxOutputTPS != 0 {
		t.Fatalf("output %v (max %v) from an impossible counter jump; want none", s.OutputTPS, s.MaxOutputTPS)
	}
	o.Finish(Complete)
	if s := h.stats(model); s.OutputTPS != 0 || s.MaxOutputTPS != 0 {
		t.Fatalf("output %v (max %v) after completion; want none", s.OutputTPS, s.MaxOutputTPS)
	}
}

// A KV poll with a count above MaxKVTokens fails (the last values stay);
// used and free above the capacity are clamped to it.
func TestKVPollRejectsHugeValuesAndClampsToCapacity(t *testing.T) {
	t.Parallel()
	body := func(capacity, used, free uint64) string {
		return fmt.Sprintf(`{"model":%q,"kv_cache_capacity_tokens":%d,"kv_cache_used_tokens":%d,"kv_cache_free_tokens":%d}`,
			model, capacity, used, free)
	}
	srv := kvEngine(t,
		body(1000, 300, 700),
		body(math.MaxUint64, 0, math.MaxUint64),
		body(1000, 300, MaxKVTokens+1),
		body(1000, 5000, 9000),
	)
	h := newHarness(t, Config{UpstreamBaseURL: srv.URL, StreamMode: ModeOff, KVCachePath: "/kv-cache/stats"})
	h.c.AddModel(model)
	ctx := context.Background()
	for i, want := range [][3]uint64{{1000, 300, 700}, {1000, 300, 700}, {1000, 300, 700}, {1000, 1000, 1000}} {
		h.c.pollKV(ctx)
		if got := kvOf(h.stats(model)); got != want {
			t.Fatalf("poll %d: KV %v, want %v", i+1, got, want)
		}
	}
}

// Whatever reached a generation, the published throughputs are usable:
// NaN, infinities, negatives and values above MaxTPS are published as 0
// (unknown).
func TestPublishedThroughputIsBounded(t *testing.T) {
	t.Parallel()
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -5, 2 * MaxTPS} {
		h := newHarness(t, Config{StreamMode: ModeOff})
		h.c.AddModel(model)
		g := h.c.gens[model]
		g.lastMean, g.maxIn, g.maxOut = v, v, v
		g.out.push(v)
		s := h.stats(model)
		if s.LastMeanInputTPS != 0 || s.MaxInputTPS != 0 || s.OutputTPS != 0 || s.MaxOutputTPS != 0 {
			t.Errorf("%v published as %+v", v, s)
		}
		if s.QueueTimeEstimateMsByPriority != nil {
			t.Errorf("%v: a queue estimate from an unusable throughput: %v", v, s.QueueTimeEstimateMsByPriority)
		}
	}
	for _, v := range []float64{math.NaN(), -1, 2 * MaxTPS, math.Inf(1)} {
		if err := (Config{UpstreamBaseURL: "http://e", InitialInputTPS: v}).Validate(); err == nil {
			t.Errorf("--initial-input-tps %v accepted", v)
		}
	}
}
