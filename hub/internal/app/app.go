package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/hub/internal/filewatch"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/lbreload"
	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/proxy"
	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routepage"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/hub/internal/tunnel"
	"github.com/stargate-router/stargate/hub/internal/waitroom"
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
	// lb holds the active lb-config generation; watch, when set, reloads
	// it as the file changes.
	lb    *lbreload.Reloader
	watch *filewatch.Watcher
	reg   *registrar
	// prefix remembers which clusters hold which prompt prefixes, for
	// prefix-aware routes.
	prefix *prefixindex.Index
	// page is the live routing page; nil with --routing-page-records 0.
	page    *routepage.Page
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
	var err error
	a.lb, err = lbreload.New(lbreload.Options{Path: cfg.LBConfigPath, Factory: lbfactory.New,
		Resolver: lbconfig.Options{Clock: clk, Log: log}, Registerer: reg, MetricsPrefix: cfg.MetricsPrefix,
		Clock: clk, Log: log, OnApply: a.applyLBConfig})
	if err != nil {
		return nil, err
	}
	gen := a.lb.Current()
	gatewayToken, err := readGatewayToken(cfg, log)
	if err != nil {
		return nil, err
	}
	a.store = state.New(clk, state.OnActiveServers(func(t routing.Target, n int) {
		m.ActiveServers(t, n)
		if n == 0 {
			// A target that empties starts afresh when it comes back
			// (docs/design/routing-state.md#targets-and-generations): its
			// round-robin counters and caches go with it. Older
			// generations' state goes with the requests that hold them.
			a.lb.Current().Resolver.Forget(t)
		}
	}), state.BackendAffinity(cfg.BackendAffinity == "on", cfg.BackendAffinityLoadFactor))
	reg.MustRegister(a.store.Collector(cfg.MetricsPrefix), a.store.AffinityCollector(cfg.MetricsPrefix))
	backendLn, err := serve.Listen("backend-listen", cfg.BackendListen)
	if err != nil {
		return nil, err
	}
	a.reg = &registrar{store: a.store}
	if a.tunnels, err = newTunnels(cfg, log, clk, backendLn, a.reg); err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	pcfg := proxyConfig(cfg, log, clk, m, gatewayToken)
	pcfg.WaitingRoom.Metrics = waitroom.NewMetrics(reg, cfg.MetricsPrefix)
	pcfg.ConfiguredModel = gen.Config.HasModel
	if a.reg.breakers, a.reg.breakerState, err = newBreakers(cfg, log, clk, reg); err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	pcfg.Breakers = a.reg.breakers
	if a.prefix, err = prefixindex.New(cfg.PrefixIndex(), clk); err != nil {
		_ = backendLn.Close()
		return nil, fmt.Errorf("prefix index: %w", err)
	}
	pcfg.Prefix = a.prefix
	reg.MustRegister(newPrefixCollector(cfg.MetricsPrefix, a.prefix, cfg.PrefixIndex()))
	if cfg.RoutingPageRecords > 0 {
		records := routelog.New(cfg.RoutingPageRecords)
		pcfg.Records = records
		a.page = &routepage.Page{HubID: cfg.HubID, Log: records, Fleet: a.store, Clock: clk,
			Prefix: prefixView(a.prefix, cfg.PrefixIndex().MaxBytes())}
	}
	a.proxy = proxy.New(pcfg, a.store, a.tunnels, gen.Resolver)
	a.proxy.SetGeneration(proxyGeneration(gen))
	if err := a.listen(reg, backendLn); err != nil {
		_ = backendLn.Close()
		return nil, err
	}
	if cfg.LBConfigPath != "" && cfg.LBConfigWatch {
		// Last, so that no failure after it leaves an inotify watch open.
		a.watch, err = filewatch.New(filewatch.Config{Path: cfg.LBConfigPath, Debounce: cfg.LBConfigReloadDebounce,
			OnChange: func() { a.ReloadLBConfig("watch") }, Clock: clk, Log: log})
		if err != nil {
			a.closeListeners()
			return nil, fmt.Errorf("--lb-config-watch: %w", err)
		}
	}
	return a, nil
}

// closeListeners closes the three listeners of a hub that will not run.
func (a *App) closeListeners() {
	for _, s := range []serve.Server{a.api, a.metrics, a.backend} {
		if s.Listener != nil {
			_ = s.Listener.Close()
		}
	}
}

// ReloadLBConfig reloads --lb-config-path (hub/internal/lbreload): the
// hub's SIGHUP handler and the file watch call it. A new valid file serves
// every request that arrives after it is applied; an invalid one is
// logged, counted and ignored. Without --lb-config-path it only logs.
func (a *App) ReloadLBConfig(trigger string) {
	a.lb.Reload(trigger)
}

// applyLBConfig hands a reloaded generation to the proxy, before lbreload
// makes it Current.
func (a *App) applyLBConfig(g *lbreload.Generation) {
	a.proxy.SetGeneration(proxyGeneration(g))
}

// proxyGeneration is the part of g the proxy routes by.
func proxyGeneration(g *lbreload.Generation) proxy.Generation {
	return proxy.Generation{Resolver: g.Resolver, ConfiguredModel: g.Config.HasModel, Hash: g.Hash}
}

// readGatewayToken reads --gateway-token-file once, at startup. Without it
// (--insecure-no-client-auth) every caller is served and may steer
// routing; with --allow-anonymous-clients callers without it are served
// too. The hub warns about both.
func readGatewayToken(cfg Config, log *slog.Logger) (string, error) {
	if cfg.GatewayTokenFile == "" {
		log.Warn("--insecure-no-client-auth: every caller that reaches --listen is served and may steer routing " +
			"(x-routing-key, x-cache-affinity-key, x-stargate-*), bypassing the gateway's API keys and rate limits")
		return "", nil
	}
	if cfg.AllowAnonymousClients {
		log.Warn("--allow-anonymous-clients: callers without the gateway token are served (their routing headers removed), " +
			"bypassing the gateway's API keys and rate limits")
	}
	return cli.ReadSecretFile(cfg.GatewayTokenFile)
}

// newTunnels builds the tunnel server pylons dial, feeding their
// registrations into store.
func newTunnels(cfg Config, log *slog.Logger, clk clock.Clock, ln net.Listener, reg *registrar) (*tunnel.Server, error) {
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
		log.Warn("--insecure-no-registration-auth: any process that can reach --backend-listen can register as a pylon, for any cluster id, and receive prompts")
	}
	return tunnel.New(tcfg, reg), nil
}

// proxyConfig is the proxy's configuration from the flags.
func proxyConfig(cfg Config, log *slog.Logger, clk clock.Clock, m *proxy.Metrics, gatewayToken string) proxy.Config {
	pcfg := proxy.Defaults()
	pcfg.GatewayToken = gatewayToken
	pcfg.AllowAnonymous = cfg.AllowAnonymousClients
	pcfg.ModelUnavailableWait = cfg.ModelUnavailableWait
	pcfg.StartupGrace = cfg.StartupGrace
	pcfg.MaxReplayBodyBytes = cfg.MaxReplayBodyBytes
	pcfg.RetryBudgetHeader = cfg.RetryBudgetHeader
	pcfg.MaxRequestRetries = cfg.MaxRequestRetries
	pcfg.MaxQueueMismatchRetries = cfg.MaxQueueMismatchRetries
	pcfg.MaxConnectRetries = cfg.MaxConnectRetries
	pcfg.RequirePylonRetrySignal = cfg.RequirePylonRetrySignal
	pcfg.RequestTimeout = cfg.RequestTimeout
	pcfg.WaitingRoom.Limit = cfg.MaxWaitingRequests
	pcfg.WaitingRoom.ReturningFirst = cfg.ReturningSessionPriority
	pcfg.Clock, pcfg.Log, pcfg.Metrics = clk, log, m
	if cfg.OTelEndpoint == "" {
		// Nothing exports spans, so none is made: the no-op provider hands
		// back the caller's span context (which the attempt still forwards
		// to the pylon) without the two span objects and two contexts per
		// span that otel's global provider allocates while no SDK is set.
		pcfg.TracerProvider = noop.NewTracerProvider()
	}
	return pcfg
}

// listen opens the API and admin listeners and builds the three servers.
func (a *App) listen(reg *prometheus.Registry, backendLn net.Listener) error {
	apiLn, err := a.listenAPI()
	if err != nil {
		return err
	}
	metricsLn, err := serve.Listen("metrics-listen", a.cfg.MetricsListen)
	if err != nil {
		_ = apiLn.Close()
		return err
	}
	if a.cfg.AdminTokenFile == "" && !isLoopback(a.cfg.MetricsListen) {
		a.log.Warn("no --admin-token-file: /debug/state (engine URLs, pylon addresses) and /metrics are open to anyone who reaches --metrics-listen",
			"addr", a.cfg.MetricsListen)
	}
	a.api = serve.Server{Name: "api", Listener: apiLn, Handler: a.apiMux(), Limits: a.cfg.Limits}
	a.metrics = serve.Server{Name: "metrics", Listener: metricsLn, Handler: a.adminMux(reg), Limits: a.cfg.Limits}
	a.backend = serve.Server{Name: "backend", Listener: backendLn}
	return nil
}

// listenAPI binds --listen, speaking TLS when --api-tls-cert-path is set.
// The TLS layer is wrapped around the listener here, so the server that
// serves it is the same plain one every listener uses; ALPN offers h2
// first, which net/http's server takes up on a *tls.Conn.
func (a *App) listenAPI() (net.Listener, error) {
	ln, err := serve.Listen("listen", a.cfg.Listen)
	if err != nil {
		return nil, err
	}
	if a.cfg.APITLSCertPath == "" {
		if a.cfg.GatewayTokenFile != "" && !isLoopback(a.cfg.Listen) {
			a.log.Warn("--listen is plaintext (no --api-tls-cert-path): the gateway token and every prompt cross the network in clear",
				"addr", a.cfg.Listen)
		}
		return ln, nil
	}
	tln, err := tlsfiles.Listener(ln, a.cfg.APITLSCertPath, a.cfg.APITLSKeyPath)
	if err != nil {
		return nil, fmt.Errorf("--api-tls-cert-path/--api-tls-key-path: %w", err)
	}
	return tln, nil
}

// apiMux is --listen: the probes (never authenticated, for load balancers
// and kubelets), GET /v1/models and the inference routes, both behind the
// gateway token.
func (a *App) apiMux() http.Handler {
	mux := http.NewServeMux()
	serve.Probes(mux, &a.ready)
	mux.Handle("GET /v1/models", a.proxy.Authenticate(http.HandlerFunc(a.serveModels)))
	mux.Handle("/v1/", a.proxy.Handler())
	mux.HandleFunc("/", serve.NotFound)
	return mux
}

// adminMux is --metrics-listen: /metrics, and under /debug/ the routing
// state and, with --pprof, the profiler. With --admin-token-file /debug/
// needs the admin token, and /metrics too with
// --metrics-require-admin-token.
func (a *App) adminMux(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	metrics := obs.MetricsHandler(reg)
	if a.cfg.MetricsRequireAdminToken {
		metrics = a.adminOnly(metrics)
	}
	mux.Handle("GET /metrics", metrics)
	debug := http.NewServeMux()
	debug.HandleFunc("GET /debug/state", a.serveDebug)
	if a.page != nil {
		debug.HandleFunc("GET /debug/routing", a.page.ServeJSON)
		// ServeUI knows the page's files and answers the rest of /ui/
		// with a 404.
		mux.HandleFunc("GET /ui", a.page.ServeUI)
		mux.HandleFunc("GET /ui/", a.page.ServeUI)
	} else {
		mux.HandleFunc("GET /ui", pageOff)
	}
	if a.cfg.Pprof {
		obs.Pprof(debug)
	}
	debug.HandleFunc("/", serve.NotFound)
	mux.Handle("/debug/", a.adminOnly(debug))
	mux.HandleFunc("/", serve.NotFound)
	return mux
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
	if a.watch != nil {
		wg.Go(func() {
			if err := a.watch.Run(tctx); err != nil {
				// SIGHUP still reloads; the watch is a convenience.
				a.log.Error("lb-config watch stopped; reload with SIGHUP", "path", a.cfg.LBConfigPath, "err", err)
			}
		})
	}
	wg.Go(func() { sweepPrefixes(tctx, clock.Real{}, a.prefix, a.store, sweepInterval(a.cfg.PrefixIndexTTL)) })
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

// registrar feeds tunnel sessions into the routing state, and forgets a
// backend's breaker with its tunnel: a pylon that comes back starts
// closed, since its reconnection is news the breaker cannot judge.
type registrar struct {
	store        *state.Store
	breakers     *breaker.Set
	breakerState *prometheus.GaugeVec
}

func (r *registrar) Registered(b tunnel.Backend, reg *protocol.Registration, rtt time.Duration, rttKnown bool) {
	r.store.Apply(state.Backend{ID: b.ID, ClusterID: b.ClusterID, URL: b.URL, Region: b.Region}, reg, rtt, rttKnown)
}

func (r *registrar) Disconnected(b tunnel.Backend) {
	r.store.Remove(b.ID)
	r.breakers.Forget(b.ID)
	if r.breakerState != nil {
		r.breakerState.DeleteLabelValues(b.ID)
	}
}
