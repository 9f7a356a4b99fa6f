package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/proxy"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/hub/internal/tunnel"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pkg/tlsfiles"
)

// app is the wired hub.
type app struct {
	cfg     config
	log     *slog.Logger
	store   *state.Store
	tunnels *tunnel.Server
	proxy   *proxy.Proxy
	ready   serve.Readiness
	api     serve.Server
	metrics serve.Server
	backend serve.Server
}

func newApp(cfg config, log *slog.Logger) (*app, error) {
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "hub", version)
	m := proxy.NewMetrics(reg, cfg.MetricsPrefix)
	clk := clock.Real{}
	a := &app{cfg: cfg, log: log}
	lbCfg := lbconfig.Permissive()
	var err error
	if cfg.LBConfigPath != "" {
		if lbCfg, err = lbconfig.Load(cfg.LBConfigPath); err != nil {
			return nil, err
		}
		sum := lbCfg.Summary()
		log.Info("load balancer config loaded", "path", cfg.LBConfigPath, "default_lb", sum.DefaultLB, "model_overrides", sum.ModelOverrides)
	}
	resolver, err := lbconfig.NewResolver(lbCfg, lbfactory.New, lbconfig.Options{Clock: clk, Registerer: reg,
		MetricsPrefix: cfg.MetricsPrefix, Log: log})
	if err != nil {
		return nil, err
	}
	gatewayToken := ""
	if cfg.GatewayTokenFile != "" {
		if gatewayToken, err = cli.ReadSecretFile(cfg.GatewayTokenFile); err != nil {
			return nil, err
		}
	} else {
		log.Warn("no --gateway-token-file: every caller's routing headers (x-routing-key, x-cache-affinity-key, x-stargate-*) are trusted; keep --listen reachable only by the gateway")
	}
	a.store = state.New(clk, state.OnActiveServers(func(t routing.Target, n int) {
		m.ActiveServers(t, n)
		if n == 0 {
			// A target that empties starts afresh (hub.md §6.4): its
			// round-robin counters and caches go with it.
			resolver.Forget(t)
		}
	}))

	backendLn, err := serve.Listen("backend-listen", cfg.BackendListen)
	if err != nil {
		return nil, err
	}
	tcfg := tunnel.Config{
		Listener: backendLn, HubID: cfg.HubID, Clock: clk, Log: log,
		HealthInterval: cfg.HealthInterval,
		MinIdleTimeout: disabledIfZero(cfg.IdleTimeoutMin), MaxIdleTimeout: disabledIfZero(cfg.IdleTimeoutMax),
	}
	if cfg.TLSCertPath != "" {
		tcfg.TLS, err = tlsfiles.Server(cfg.TLSCertPath, cfg.TLSKeyPath)
		if err != nil {
			_ = backendLn.Close()
			return nil, err
		}
	} else {
		log.Warn("the tunnel listener is plaintext (no --tls-cert-path): use it only on loopback or a trusted network")
	}
	switch {
	case cfg.RegistrationTokenFile != "":
		path := cfg.RegistrationTokenFile
		tcfg.TokenSource = func() (string, error) { return cli.ReadSecretFile(path) }
	case cfg.RegistrationToken != "":
		tcfg.Token = cfg.RegistrationToken
	default:
		log.Warn("no registration token configured: any process that can reach --backend-listen can register as a pylon")
	}
	a.tunnels = tunnel.New(tcfg, registrar{a.store})

	pcfg := proxy.Defaults()
	pcfg.GatewayToken = gatewayToken
	pcfg.MaxReplayBodyBytes = cfg.MaxReplayBodyBytes
	pcfg.RetryBudgetHeader = cfg.RetryBudgetHeader
	pcfg.MaxRequestRetries = cfg.MaxRequestRetries
	pcfg.MaxConnectRetries = cfg.MaxConnectRetries
	pcfg.RequirePylonRetrySignal = cfg.RequirePylonRetrySignal
	pcfg.RequestTimeout = cfg.RequestTimeout
	pcfg.Clock, pcfg.Log, pcfg.Metrics = clk, log, m
	a.proxy = proxy.New(pcfg, a.store, a.tunnels, resolver)

	apiLn, err := serve.Listen("listen", cfg.Listen)
	if err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	metricsLn, err := serve.Listen("metrics-listen", cfg.MetricsListen)
	if err != nil {
		_ = backendLn.Close()
		_ = apiLn.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	serve.Probes(mux, &a.ready)
	mux.HandleFunc("GET /v1/models", a.serveModels)
	mux.HandleFunc("GET /debug/state", a.serveDebug)
	mux.Handle("/v1/", a.proxy.Handler())
	mux.HandleFunc("/", serve.NotFound)
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", obs.MetricsHandler(reg))
	if cfg.Pprof {
		obs.Pprof(mmux)
	}
	a.api = serve.Server{Name: "api", Listener: apiLn, Handler: mux}
	a.metrics = serve.Server{Name: "metrics", Listener: metricsLn, Handler: mmux}
	a.backend = serve.Server{Name: "backend", Listener: backendLn}
	return a, nil
}

// disabledIfZero maps the flags' "0 disables" to the tunnel's negative.
func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func (a *app) run(ctx context.Context) error {
	tctx, tcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var tunnelErr error
	wg.Go(func() { tunnelErr = a.tunnels.Run(tctx) })
	a.log.Info("listening", "listener", "backend", "addr", a.backend.Listener.Addr().String())
	a.ready.Set(true)
	err := serve.Run(ctx, a.log, a.cfg.Drain, func() {
		a.ready.Set(false)
		a.tunnels.Drain()
	}, a.api, a.metrics)
	tcancel()
	wg.Wait()
	if err != nil {
		return err
	}
	if tunnelErr != nil && ctx.Err() == nil {
		return tunnelErr
	}
	return nil
}

// registrar feeds tunnel sessions into the routing state.
type registrar struct{ store *state.Store }

func (r registrar) Registered(b tunnel.Backend, reg *protocol.Registration, rtt time.Duration, rttKnown bool) {
	r.store.Apply(state.Backend{ID: b.ID, ClusterID: b.ClusterID, URL: b.URL}, reg, rtt, rttKnown)
}

func (r registrar) Disconnected(b tunnel.Backend) { r.store.Remove(b.ID) }

// serveModels answers GET /v1/models with the active models (unscoped),
// optionally filtered by ?model_ids= (hub.md §6.8).
func (a *app) serveModels(w http.ResponseWriter, r *http.Request) {
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

// serveDebug answers GET /debug/state: configuration, tunnels and the
// routing state with reservations.
func (a *app) serveDebug(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{
		"config": map[string]any{
			"hub_id": a.cfg.HubID, "listen": a.cfg.Listen, "backend_listen": a.cfg.BackendListen,
			"metrics_listen": a.cfg.MetricsListen, "tunnel_protocol": "http2-reverse", "default_lb": "power-of-n",
		},
		"sessions":         a.tunnels.Sessions(),
		"routing":          a.store.Debug(),
		"active_model_ids": a.store.ActiveModels(""),
	})
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
