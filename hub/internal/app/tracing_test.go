package app

import (
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/pkg/clock"
)

// Without --otel-endpoint the proxy gets the no-op tracer provider (no span
// objects per request); with one it keeps nil, so proxy.New takes the
// exporting provider obs.SetupTracing installed.
func TestProxyConfigTracerProvider(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	if tp := proxyConfig(Config{}, log, clock.Real{}, nil, "").TracerProvider; tp == nil {
		t.Error("no --otel-endpoint: TracerProvider is nil; want the no-op provider")
	} else if _, ok := tp.(noop.TracerProvider); !ok {
		t.Errorf("no --otel-endpoint: TracerProvider is %T; want noop.TracerProvider", tp)
	}
	if tp := proxyConfig(Config{OTelEndpoint: "http://collector:4318"}, log, clock.Real{}, nil, "").TracerProvider; tp != nil {
		t.Errorf("with --otel-endpoint: TracerProvider is %T; want nil (the global one)", tp)
	}
}
