package server

import (
	"context"
	"errors"
	"io"
	"net/http"

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
	hreq, err := s.d.Hub.NewRequest(ctx, http.MethodGet, "/v1/models", h, nil)
	if err != nil {
		openai.WriteError(w, openai.Internal("gateway cannot reach the hub"))
		return
	}
	hreq.URL.RawQuery = r.URL.RawQuery
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
	resp, err := s.d.Hub.Do(hreq)
	if err != nil {
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
