package stats

import (
	"fmt"
	"testing"
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
