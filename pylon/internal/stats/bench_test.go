package stats

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func BenchmarkParseLine(b *testing.B) {
	line := []byte(`{"type":"stats","v":1,"request_id":"chatcmpl-mock-18a2b3c4d5e6f708","model":"dummy-model","tokens_processed":4096,"tokens_generated":17}`)
	b.ReportAllocs()
	for b.Loop() {
		parseLine(line)
	}
}

func BenchmarkObserverOutput(b *testing.B) {
	h := newHarness(b, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	o.Headers(200)
	chunk := contentChunk(" how")
	b.ReportAllocs()
	for b.Loop() {
		o.Output(chunk)
	}
}

// BenchmarkObserverOutputStreamMeasured is Output for a request whose
// engine is measured by its stats stream, the usual case.
func BenchmarkObserverOutputStreamMeasured(b *testing.B) {
	h := newHarness(b, Config{StreamMode: ModeAuto})
	h.c.AddModel(model)
	h.line(`{"v":1,"type":"ping"}`)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	o.Headers(200)
	chunk := contentChunk(" how")
	b.ReportAllocs()
	for b.Loop() {
		o.Output(chunk)
	}
}

func BenchmarkStats1000Live(b *testing.B) {
	h := newHarness(b, Config{StreamMode: ModeOff, InitialInputTPS: 2000})
	h.c.AddModel(model)
	for i := range 1000 {
		o := h.c.Begin(RequestInfo{ID: fmt.Sprint(i), Model: model, Endpoint: EndpointChat, InputTokens: uint64(i), Priority: uint32(i % 8)})
		if i%3 == 0 {
			o.Headers(200)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		h.c.Stats(model)
	}
}

// BenchmarkRequestMemory is the collector's per-request housekeeping at
// steady state: requests finish at 1,000 per second of the injected clock,
// the sweep runs every second, and the request memory holds every id of
// the last RequestTTL (300,000 at that rate) before the timer starts, as
// a pylon that has served that rate for five minutes does. An op is one
// request's Begin, Headers, Output and Finish plus its share of the
// sweeps; sweep-max-µs is the longest sweep and scrape-µs one scrape of
// the collector's metrics (each holds Collector.mu against every request
// for about its length), retained-B/req the live heap per remembered
// request.
func BenchmarkRequestMemory(b *testing.B) {
	const perSecond = 1000
	h := newHarness(b, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	chunk := contentChunk(" how")
	var seq, n int
	var sweepMax time.Duration
	serve := func() {
		o := h.c.Begin(RequestInfo{ID: "chatcmpl-" + strconv.Itoa(seq), Model: model, Endpoint: EndpointChat, InputTokens: 100})
		seq++
		o.Headers(200)
		o.Output(chunk)
		o.Finish(Complete)
		h.clk.Advance(time.Second / perSecond)
		if n++; n == perSecond {
			n = 0
			start := time.Now()
			h.c.sweep(h.clk.Now())
			sweepMax = max(sweepMax, time.Since(start))
		}
	}
	for range int(RequestTTL/time.Second) * perSecond {
		serve()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.c.mu.Lock()
	remembered := len(h.c.reqs)
	h.c.mu.Unlock()
	retained := float64(ms.HeapAlloc) / float64(remembered)
	sweepMax = 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		serve()
	}
	b.StopTimer()
	start := time.Now()
	if _, err := h.reg.Gather(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds()), "scrape-µs")
	b.ReportMetric(float64(sweepMax.Microseconds()), "sweep-max-µs")
	b.ReportMetric(retained, "retained-B/req")
}
