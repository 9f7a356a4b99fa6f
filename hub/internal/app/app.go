package app

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/proxy"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/hub/internal/tunnel"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pkg/tlsfiles"
)

// App is the wired hub. Build it with New, then Run it.
type App struct {
	cfg     Config
	log     *slog.Logger
	store   *state.Store
	tunnels *tunnel.Server
	proxy   *proxy.Proxy
	ready   serve.Readiness
	api     serve.Server
	metrics serve.Server
	backend serve.Server
}

// New wires a hub from a validated configuration: the load-balancer
// configuration and resolver, the routing state, the tunnel server, the
// proxy and the three listeners. version labels the build-info metric.
func New(cfg Config, log *slog.Logger, version string) (*App, error) {
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "hub", version)
	m := proxy.NewMetrics(reg, cfg.MetricsPrefix)
	clk := clock.Real{}
	a := &App{cfg: cfg, log: log}
	resolver, err := newResolver(cfg, log, clk, reg)
	if err != nil {
		return nil, err
	}
	gatewayToken, err := readGatewayToken(cfg, log)
	if err != nil {
		return nil, err
	}
	a.store = state.New(clk, state.OnActiveServers(func(t routing.Target, n int) {
		m.ActiveServers(t, n)
		if n == 0 {
			// A target that empties starts afresh when it comes back
			// (docs/design/routing-state.md#targets-and-generations): its
			// round-robin counters and caches go with it.
			resolver.Forget(t)
		}
	}))
	reg.MustRegister(a.store.Collector(cfg.MetricsPrefix))
	backendLn, err := serve.Listen("backend-listen", cfg.BackendListen)
	if err != nil {
		return nil, err
	}
	if a.tunnels, err = newTunnels(cfg, log, clk, backendLn, a.store); err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	a.proxy = proxy.New(proxyConfig(cfg, log, clk, m, gatewayToken), a.store, a.tunnels, resolver)
	if err := a.listen(reg, backendLn); err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	return a, nil
}

// newResolver loads --lb-config-path (every algorithm at its defaults when
// unset) and builds the resolver that gives each request its route.
func newResolver(cfg Config, log *slog.Logger, clk clock.Clock, reg prometheus.Registerer) (*lbconfig.Resolver, error) {
	lbCfg := lbconfig.Permissive()
	if cfg.LBConfigPath != "" {
		var err error
		if lbCfg, err = lbconfig.Load(cfg.LBConfigPath); err != nil {
			return nil, err
		}
		sum := lbCfg.Summary()
		log.Info("load balancer config loaded", "path", cfg.LBConfigPath, "default_lb", sum.DefaultLB, "model_overrides", sum.ModelOverrides)
	}
	return lbconfig.NewResolver(lbCfg, lbfactory.New, lbconfig.Options{Clock: clk, Registerer: reg,
		MetricsPrefix: cfg.MetricsPrefix, Log: log})
}

// readGatewayToken reads --gateway-token-file; without it every caller may
// steer routing, which the hub warns about.
func readGatewayToken(cfg Config, log *slog.Logger) (string, error) {
	if cfg.GatewayTokenFile == "" {
		log.Warn("no --gateway-token-file: every caller's routing headers (x-routing-key, x-cache-affinity-key, x-stargate-*) are trusted; keep --listen reachable only by the gateway")
		return "", nil
	}
	return cli.ReadSecretFile(cfg.GatewayTokenFile)
}

// newTunnels builds the tunnel server pylons dial, feeding their
// registrations into store.
func newTunnels(cfg Config, log *slog.Logger, clk clock.Clock, ln net.Listener, store *state.Store) (*tunnel.Server, error) {
	tcfg := tunnel.Config{
		Listener: ln, HubID: cfg.HubID, Clock: clk, Log: log,
		HealthInterval: cfg.HealthInterval,
		MinIdleTimeout: disabledIfZero(cfg.IdleTimeoutMin), MaxIdleTimeout: disabledIfZero(cfg.IdleTimeoutMax),
	}
	if cfg.TLSCertPath != "" {
		var err error
		if tcfg.TLS, err = tlsfiles.Server(cfg.TLSCertPath, cfg.TLSKeyPath); err != nil {
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
	return tunnel.New(tcfg, registrar{store}), nil
}

// proxyConfig is the proxy's configuration from the flags.
func proxyConfig(cfg Config, log *slog.Logger, clk clock.Clock, m *proxy.Metrics, gatewayToken string) proxy.Config {
	pcfg := proxy.Defaults()
	pcfg.GatewayToken = gatewayToken
	pcfg.MaxReplayBodyBytes = cfg.MaxReplayBodyBytes
	pcfg.RetryBudgetHeader = cfg.RetryBudgetHeader
	pcfg.MaxRequestRetries = cfg.MaxRequestRetries
	pcfg.MaxConnectRetries = cfg.MaxConnectRetries
	pcfg.RequirePylonRetrySignal = cfg.RequirePylonRetrySignal
	pcfg.RequestTimeout = cfg.RequestTimeout
	pcfg.Clock, pcfg.Log, pcfg.Metrics = clk, log, m
	return pcfg
}

// listen opens the API and metrics listeners and builds the three servers.
func (a *App) listen(reg *prometheus.Registry, backendLn net.Listener) error {
	apiLn, err := serve.Listen("listen", a.cfg.Listen)
	if err != nil {
		return err
	}
	metricsLn, err := serve.Listen("metrics-listen", a.cfg.MetricsListen)
	if err != nil {
		_ = apiLn.Close()
		return err
	}
	mux := http.NewServeMux()
	serve.Probes(mux, &a.ready)
	mux.HandleFunc("GET /v1/models", a.serveModels)
	mux.HandleFunc("GET /debug/state", a.serveDebug)
	mux.Handle("/v1/", a.proxy.Handler())
	mux.HandleFunc("/", serve.NotFound)
	a.api = serve.Server{Name: "api", Listener: apiLn, Handler: mux}
	a.metrics = serve.Server{Name: "metrics", Listener: metricsLn, Handler: obs.MetricsMux(reg, a.cfg.Pprof)}
	a.backend = serve.Server{Name: "backend", Listener: backendLn}
	return nil
}

// disabledIfZero maps the flags' "0 disables" to the tunnel's negative.
func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Run serves until ctx is cancelled, then drains: readiness goes false,
// the tunnels drain, and in-flight requests get --drain-timeout to finish.
func (a *App) Run(ctx context.Context) error {
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
