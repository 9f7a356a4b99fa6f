package server

import (
	"net/http"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// models answers GET /v1/models with the hub's list, unchanged: the hub
// knows which models its clusters serve.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	st := state(r.Context())
	h := http.Header{}
	h.Set(headers.RequestID, st.requestID)
	h.Set("Accept", "application/json")
	hreq, err := s.d.Hub.NewRequest(r.Context(), http.MethodGet, "/v1/models", h, nil)
	if err != nil {
		openai.WriteError(w, openai.Internal("gateway cannot reach the hub"))
		return
	}
	hreq.URL.RawQuery = r.URL.RawQuery
	resp, err := s.d.Hub.Do(hreq)
	if err != nil {
		writeBadGateway(w, "the hub is unreachable")
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		passHubError(w, resp)
		return
	}
	passJSON(w, resp)
}
