package obs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
)

// A span ends up at the collector as an OTLP/HTTP POST to /v1/traces.
func TestSetupTracingExports(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	prev := otel.GetTracerProvider()
	defer otel.SetTracerProvider(prev)
	shutdown, err := SetupTracing(context.Background(), TracingConfig{Endpoint: srv.URL, Service: "test", Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "op")
	if !span.SpanContext().IsSampled() {
		t.Fatal("span not sampled")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("the collector received no traces")
	}
}

func TestTracingConfigValidate(t *testing.T) {
	for _, c := range []TracingConfig{{Endpoint: "collector:4318"}, {Endpoint: "ftp://x"}, {SampleRatio: 2}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (TracingConfig{Endpoint: "http://127.0.0.1:4318", SampleRatio: 0.5}).Validate(); err != nil {
		t.Error(err)
	}
}

// Without an endpoint nothing is exported, but trace context still
// propagates.
func TestSetupTracingNoEndpoint(t *testing.T) {
	shutdown, err := SetupTracing(context.Background(), TracingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if fields := otel.GetTextMapPropagator().Fields(); !slices.Contains(fields, "traceparent") {
		t.Fatalf("propagator fields %v", fields)
	}
}
