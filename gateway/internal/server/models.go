package server

import (
	"context"
	"errors"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// models answers GET /v1/models with the hub's list, unchanged: the hub
// knows which models its clusters serve. The list is one small document,
// so --hub-response-header-timeout bounds the whole exchange: a hung hub
// answers 504 here as on the API.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	st := state(r.Context())
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if d := s.d.HubResponseHeaderTimeout; d > 0 {
		t := s.d.Clock.AfterFunc(d, func() { cancel(errHubHeadTimeout) })
		defer t.Stop()
	}
	h := http.Header{}
	h.Set(headers.RequestID, st.requestID)
	h.Set("Accept", "application/json")
	newReq := func(hub *hubclient.Hub) (*http.Request, error) {
		hreq, err := s.d.Hub.NewRequest(ctx, hub, http.MethodGet, "/v1/models", h.Clone(), nil)
		if err != nil {
			return nil, err
		}
		hreq.URL.RawQuery = r.URL.RawQuery
		return hreq, nil
	}
	failed := func(msg string) {
		if r.Context().Err() != nil {
			return
		}
		if errors.Is(context.Cause(ctx), errHubHeadTimeout) {
			writeTimeout(w, errHubHeadTimeout)
			return
		}
		writeBadGateway(w, msg)
	}
	resp, err := s.roundTrip(ctx, st.requestID, trace.SpanFromContext(ctx), newReq, func() bool { return true })
	var be *buildError
	switch {
	case errors.Is(err, errNoHub):
		writeNoHub(w)
		return
	case errors.As(err, &be):
		openai.WriteError(w, openai.Internal("gateway cannot reach the hub"))
		return
	case err != nil:
		failed("the hub is unreachable")
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		passHubError(w, resp)
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		failed("reading the hub response failed")
		return
	}
	writeBody(w, resp, b)
}
