package stats

import "testing"

// TestOutputTokensWhileTheyCount: a chunk's tokens are counted until the
// engine's stats stream has sent a valid event, for calibration requests
// always, and again once the OpenAI fallback takes the engine over; a
// chunk not parsed still moves its request to OutputGeneration.
func TestOutputTokensWhileTheyCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeAuto})
	h.c.AddModel(model)
	output := func(id string) *Observer {
		o := h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: 10})
		o.Headers(200)
		o.Output(contentChunk("two words"))
		return o
	}
	tokens := func(o *Observer) uint64 {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return o.tokens
	}
	if o := output("before-stream"); tokens(o) != 2 {
		t.Fatalf("before any stream event: %d tokens, want 2", tokens(o))
	}
	h.line(`{"v":1,"type":"ping"}`)
	o := output("stream-measured")
	if tokens(o) != 0 || o.State() != OutputGeneration {
		t.Fatalf("stream-measured engine: %d tokens, state %v; want 0, output_generation", tokens(o), o.State())
	}
	if id, _ := h.c.NewCalibrationID(model); tokens(output(id)) != 2 {
		t.Fatal("a calibration request's tokens must always count")
	}
	h.c.enableFallback(0)
	if o := output("fallback"); tokens(o) != 2 {
		t.Fatalf("after the fallback took over: %d tokens, want 2", tokens(o))
	}
}
