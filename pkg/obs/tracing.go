package obs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// TracingConfig is what a binary needs to export traces.
type TracingConfig struct {
	// Endpoint is the OTLP/HTTP collector base URL (e.g.
	// http://otel-collector:4318); empty turns exporting off, and spans are
	// then never recorded (the no-op provider costs nothing per request).
	Endpoint string
	// Service is the service.name resource attribute.
	Service string
	// Version is service.version.
	Version string
	// SampleRatio is the share of new traces sampled (parent-based: a
	// sampled caller's trace is always continued). 0 means 1.
	SampleRatio float64
}

// Validate checks the endpoint and ratio; errors name the flag (--otel-*).
func (c TracingConfig) Validate() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otel-endpoint %q: want an http(s) URL of an OTLP/HTTP collector", c.Endpoint)
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("--otel-sample-ratio %v: must be between 0 and 1", c.SampleRatio)
	}
	return nil
}

// SetupTracing installs the W3C trace-context propagator (always, so trace
// ids pass through a tier that does not export) and, with an endpoint, a
// batching OTLP/HTTP exporter as the global tracer provider. The returned
// function flushes and stops the exporter; call it on shutdown.
func SetupTracing(ctx context.Context, cfg TracingConfig) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("--otel-endpoint: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.Service), attribute.String("service.version", cfg.Version)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, err
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
