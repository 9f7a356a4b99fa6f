package proxy

import (
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
)

// The hub continues the caller's trace: the root span proxy_openai_request
// is a child of the incoming traceparent and carries the routing fields
// (session state included), each attempt is a child span, and the pylon
// receives a traceparent naming that attempt span.
func TestTracing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	wp := &waitingPicker{session: routing.SessionReturning, group: 1, calls: make(chan pick, 10)}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "wait-and-widen", Picker: wp, LastClusterAffinity: true}},
		func(c *Config) { c.TracerProvider, c.Propagator = tp, propagation.TraceContext{} })
	hdr := validHeaders()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	hdr.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	hdr.Set(headers.CacheAffinityKey, "mt:v1:session:abc")
	hdr.Set(headers.StargateLastClusterID, "ca")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}

	var root, attempt sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() != traceID {
			continue
		}
		switch s.Name() {
		case spanRequest:
			root = s
		case spanAttempt:
			attempt = s
		}
	}
	if root == nil || attempt == nil {
		t.Fatalf("spans of the trace: root %v, attempt %v", root != nil, attempt != nil)
	}
	if root.Parent().SpanID().String() != "00f067aa0ba902b7" || root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root parent %s kind %v", root.Parent().SpanID(), root.SpanKind())
	}
	if attempt.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Error("the attempt span is not a child of the root span")
	}
	want := map[attribute.Key]attribute.Value{
		"request.endpoint":        attribute.StringValue("chat_completions"),
		"request.model_id":        attribute.StringValue(model),
		"request.input_tokens":    attribute.Int64Value(100),
		"routing.algorithm":       attribute.StringValue("wait-and-widen"),
		"routing.session_state":   attribute.StringValue("returning"),
		"selected_cluster.id":     attribute.StringValue("ca"),
		"routing.rank_depth":      attribute.IntValue(1),
		"proxy.upstream_status":   attribute.IntValue(http.StatusOK),
		"proxy.attempt":           attribute.IntValue(1),
		"proxy.queue.expected_ms": attribute.Int64Value(120),
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range root.Attributes() {
		got[kv.Key] = kv.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("root %s = %v, want %v", k, got[k].String(), v.String())
		}
	}
	// The pylon got the attempt span as its parent, and never the hint.
	var fwd http.Header
	for _, id := range []string{"a1", "a2"} {
		if rs := h.backends[id].requests(); len(rs) > 0 {
			fwd = rs[0].Header
		}
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), propagation.HeaderCarrier(fwd)))
	if sc.TraceID().String() != traceID || sc.SpanID() != attempt.SpanContext().SpanID() {
		t.Errorf("forwarded traceparent %q, want trace %s span %s", fwd.Get("traceparent"), traceID, attempt.SpanContext().SpanID())
	}
}

// Without an exporter the hub runs on the no-op tracer provider: no span
// is made, yet the caller's trace context still reaches the pylon, once
// and unchanged, so the pylon's and engine's spans join the caller's trace.
func TestTracingNoopPropagates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.TracerProvider, c.Propagator = noop.NewTracerProvider(), propagation.TraceContext{} })
	hdr := validHeaders()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	hdr.Set("traceparent", parent)
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var fwd http.Header
	for _, b := range h.backends {
		if rs := b.requests(); len(rs) > 0 {
			fwd = rs[0].Header
		}
	}
	if got := fwd.Values("traceparent"); len(got) != 1 || got[0] != parent {
		t.Errorf("forwarded traceparent %q; want only %q", got, parent)
	}
}
