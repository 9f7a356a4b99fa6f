package server

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
)

// TestSpanNames: the server span and the last-cluster spans come from the
// stargate-gateway tracer, carry the routing key as stargate.routing_key
// (the name upstream Stargate's gateway used, nvcf.function.id, is gone)
// and the lookup and write spans are named stargate-gateway.last_cluster_*.
func TestSpanNames(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
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
	spans := map[string]sdktrace.ReadOnlySpan{}
	for deadline := time.Now().Add(5 * time.Second); len(spans) < len(want) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
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
