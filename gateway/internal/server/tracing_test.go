package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
)

// TestSpanNames: the server span and the last-cluster spans come from the
// stargate-gateway tracer, carry the routing key as stargate.routing_key
// (the name upstream Stargate's gateway used, nvcf.function.id, is gone)
// and the lookup and write spans are named stargate-gateway.last_cluster_*.
func TestSpanNames(t *testing.T) {
	sr := &endSignal{SpanRecorder: tracetest.NewSpanRecorder(), ended: make(chan struct{}, 16)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t, opts{store: lastcluster.NewLRU(100, time.Minute), tp: tp})
	h.srv.d.RoutingKeyPrefix = true
	resp, body := h.post("/v1/chat/completions", `{"model":"fn/m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"abc","stream":true}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	h.tracker.Wait(context.Background())
	want := map[string]string{
		"POST /v1/chat/completions":            "",
		"stargate-gateway.last_cluster_lookup": "miss",
		"stargate-gateway.last_cluster_write":  "success",
	}
	// The server span ends when the handler returns, which may be after
	// the client read the answer: wait for each span's end.
	spans := map[string]sdktrace.ReadOnlySpan{}
	guard := time.After(10 * time.Second)
	for len(spans) < len(want) {
		select {
		case <-sr.ended:
		case <-guard:
			t.Fatalf("spans %v ended, want %v", spans, want)
		}
		for _, s := range sr.Ended() {
			spans[s.Name()] = s
		}
	}
	for name, result := range want {
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no span %q among %v", name, spans)
		}
		if got := s.InstrumentationScope().Name; got != "stargate-gateway" {
			t.Errorf("span %q from tracer %q", name, got)
		}
		attrs := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value.String()
		}
		if attrs["stargate.routing_key"] != "fn" {
			t.Errorf("span %q: stargate.routing_key = %q, want fn", name, attrs["stargate.routing_key"])
		}
		if v, ok := attrs["nvcf.function.id"]; ok {
			t.Errorf("span %q still has nvcf.function.id = %q", name, v)
		}
		if result != "" && attrs["result"] != result {
			t.Errorf("span %q: result = %q, want %q", name, attrs["result"], result)
		}
	}
}

// endSignal is a span recorder that signals every span's end, so a test
// waits for the spans it needs instead of polling.
type endSignal struct {
	*tracetest.SpanRecorder
	ended chan struct{}
}

func (e *endSignal) OnEnd(s sdktrace.ReadOnlySpan) {
	e.SpanRecorder.OnEnd(s)
	select {
	case e.ended <- struct{}{}:
	default: // a signal is already pending: the reader will see this span too
	}
}

// TestTracingOffSkipsSpans: with tracing off a request without trace
// context keeps its own context (no span is started, nothing is
// extracted), while one with a traceparent still gets the client's trace
// to continue to the hub (TestTraceContextPropagates checks the hub's
// side).
func TestTracingOffSkipsSpans(t *testing.T) {
	h := newHarness(t, opts{})
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	x := exchange{s: h.srv, r: req, p: &Prepared{}}
	if ctx := x.startSpan(); ctx != req.Context() || x.span.SpanContext().IsValid() {
		t.Fatalf("tracing off, no trace context: context replaced (%v) or span valid (%v)", ctx != req.Context(), x.span.SpanContext().IsValid())
	}
	x.endSpan()
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := x.startSpan()
	if got := trace.SpanContextFromContext(ctx).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("tracing off, client traceparent: trace id %q in the hub call's context", got)
	}
	x.endSpan()
}
