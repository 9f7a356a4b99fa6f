package app

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/stargate-router/stargate/hub/internal/lbreload"
	"github.com/stargate-router/stargate/pkg/openai"
)

// serveModels answers GET /v1/models with the active models (unscoped),
// optionally filtered by ?model_ids=
// (docs/design/routing-state.md#model-discovery).
func (a *App) serveModels(w http.ResponseWriter, r *http.Request) {
	ids := a.store.ActiveModels("")
	if want := r.URL.Query()["model_ids"]; len(want) > 0 {
		keep := map[string]bool{}
		for _, id := range want {
			id = strings.TrimSpace(id)
			if id == "" {
				openai.WriteError(w, openai.BadRequest("model_ids", "invalid_value", "model_ids must not be blank"))
				return
			}
			keep[id] = true
		}
		filtered := ids[:0:0]
		for _, id := range ids {
			if keep[id] {
				filtered = append(filtered, id)
			}
		}
		ids = filtered
	}
	sort.Strings(ids)
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, id := range ids {
		out.Data = append(out.Data, model{ID: id, Object: "model", OwnedBy: "stargate"})
	}
	writeJSON(w, out)
}

// serveDebug answers GET /debug/state on the admin listener:
// configuration, tunnels, the routing state with reservations, breakers
// and the session escapes counted so far. It names
// engine URLs and pylon addresses, which is why it is not on --listen.
func (a *App) serveDebug(w http.ResponseWriter, _ *http.Request) {
	lb := a.lb.Status()
	writeJSON(w, map[string]any{
		"config": map[string]any{
			"hub_id": a.cfg.HubID, "listen": a.cfg.Listen, "backend_listen": a.cfg.BackendListen,
			"metrics_listen": a.cfg.MetricsListen, "tunnel_protocol": "http2-reverse", "default_lb": lb.DefaultLB,
			"client_auth": a.clientAuthMode(), "registration_auth": !a.cfg.InsecureNoRegistrationAuth,
			"api_tls": a.cfg.APITLSCertPath != "", "backend_tls": a.cfg.TLSCertPath != "",
			"lb_config": lbConfigState{Status: lb, Watch: a.watch != nil,
				ReloadDebounceMs: a.cfg.LBConfigReloadDebounce.Milliseconds()},
		},
		"sessions":         a.tunnels.Sessions(),
		"routing":          a.store.Debug(),
		"active_model_ids": a.store.ActiveModels(""),
		// Backends whose error breaker has seen outcomes; absent ones are closed.
		"breakers": a.reg.breakers.Snapshot(),
		// Sessions answered away from their own cluster since start, by
		// target and reason (stargate_session_escapes_total).
		"session_escapes": a.proxy.Escapes(),
		// The prefix index's size and counters (prefix-aware routes).
		"prefix_index": a.prefix.Stats(),
	})
}

// lbConfigState is /debug/state's config.lb_config: the active lb-config
// (hash, path, when it was loaded, the algorithm of the default and of
// each model), the last rejected reload, and how reloads are triggered.
type lbConfigState struct {
	lbreload.Status
	Watch            bool  `json:"watch"`
	ReloadDebounceMs int64 `json:"reload_debounce_ms"`
}

// clientAuthMode names who --listen serves, for /debug/state.
func (a *App) clientAuthMode() string {
	switch {
	case a.cfg.GatewayTokenFile == "":
		return "none"
	case a.cfg.AllowAnonymousClients:
		return "gateway-token-or-anonymous"
	}
	return "gateway-token"
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		openai.WriteError(w, openai.Internal("encoding response"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// pageOff answers /ui when --routing-page-records is 0.
func pageOff(w http.ResponseWriter, _ *http.Request) {
	openai.WriteError(w, openai.NotFound("the routing page is off (--routing-page-records 0)"))
}
