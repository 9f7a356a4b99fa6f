package server

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/pkg/openai"
)

// errNoHub: --hub-url resolves to no hub at all (yet).
var errNoHub = errors.New("no hub is known: --hub-url resolved to no address")

// buildError is a hub request that could not be built (the token file is
// unreadable): no hub was tried, and none would do better.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// roundTrip sends one request to a hub and, when the exchange fails
// before the hub's response head while ctx is live, again to another hub
// (docs/gateway.md#several-hubs): at most HubAttempts hubs, each at most
// once. Nothing has reached the client at that point, and every attempt
// is built afresh by newReq from the same body and headers. Any response
// head ends the loop, whatever its status: a 4xx, 429 or 5xx is the hub's
// answer, not a failure to reach it. again runs before each retry and
// may refuse it (no deadline left). The error is the last attempt's, or
// errNoHub, or a *buildError.
func (s *Server) roundTrip(ctx context.Context, requestID string, span trace.Span, newReq func(*hubclient.Hub) (*http.Request, error), again func() bool) (*http.Response, error) {
	hc := s.d.Hub
	attempts := s.d.HubAttempts
	if attempts <= 0 {
		attempts = hubclient.DefaultAttempts
	}
	var tried []*hubclient.Hub
	hub := hc.Pick(nil)
	if hub == nil {
		return nil, errNoHub
	}
	for {
		req, err := newReq(hub)
		if err != nil {
			return nil, &buildError{err: err}
		}
		resp, err := hc.Do(hub, req)
		if err == nil {
			if span.IsRecording() {
				span.SetAttributes(attribute.String("gateway.hub", hub.Addr()), attribute.Int("gateway.hub_attempts", len(tried)+1))
			}
			return resp, nil
		}
		tried = append(tried, hub)
		if len(tried) >= attempts || ctx.Err() != nil {
			return nil, err
		}
		next := hc.Pick(tried)
		if next == nil || !again() {
			return nil, err
		}
		reason := hubclient.FailureReason(err)
		s.d.Metrics.HubRetries.WithLabelValues(reason).Inc()
		s.d.Log.Warn("hub exchange failed before its response head; retrying on another hub", "request_id", requestID,
			"hub", hub.Addr(), "next_hub", next.Addr(), "reason", reason, "err", err)
		span.AddEvent("hub retry", trace.WithAttributes(attribute.String("gateway.hub", hub.Addr()),
			attribute.String("gateway.retry_reason", reason), attribute.String("error.message", err.Error())))
		hub = next
	}
}

// writeNoHub answers a request no hub can be tried for: 503, since the
// condition is the deployment's (no hub address resolves) and passes once
// a hub appears.
func writeNoHub(w http.ResponseWriter) {
	openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer, Code: "hub_unavailable",
		Message: "no hub is available: the gateway's --hub-url resolves to no address"})
}
