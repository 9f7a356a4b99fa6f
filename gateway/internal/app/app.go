package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pkg/tlsfiles"
)

// ServiceName is the gateway's OpenTelemetry service name (the
// service.name of its exported spans).
const ServiceName = "stargate-gateway"

// Gateway is a gateway whose listeners are open; Run serves on them.
type Gateway struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics.Metrics
	clk clock.Clock
	hub *hubclient.Client

	apiLn, metricsLn net.Listener
	ready            serve.Readiness
	// api is the API handler, nil until the stores are up.
	api atomic.Pointer[http.Handler]
}

// parts are what start brings up and Run takes down. Either may be nil:
// no Olric node, or startup failed before the tracker existed.
type parts struct {
	node    *olricnode.Node
	tracker *lastcluster.Tracker
	// synced is the local rate-limit mode's state, nil in the exact mode
	// or without Olric.
	synced *ratelimit.Synced
}

// New registers the metrics and opens both listeners, so a bad address
// fails before anything starts.
func New(cfg *config.Config, log *slog.Logger, version string) (*Gateway, error) {
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "gateway", version)
	g := &Gateway{cfg: cfg, log: log, reg: reg, m: metrics.New(reg), clk: clock.Real{}}
	var err error
	if g.apiLn, err = serve.Listen("listen", cfg.Listen); err != nil {
		return nil, err
	}
	if g.apiLn, err = withTLS(g.apiLn, cfg, log); err != nil {
		return nil, err
	}
	if g.metricsLn, err = serve.Listen("metrics-listen", cfg.MetricsListen); err != nil {
		_ = g.apiLn.Close()
		return nil, err
	}
	g.hub = hubclient.NewPool(hubclient.Config{URLs: cfg.HubURLs, ConnectTimeout: cfg.HubConnectTimeout, TokenFile: cfg.HubTokenFile,
		ResolveInterval: cfg.HubResolveInterval, Clock: g.clk, Log: log, OnState: hubState(g.m)})
	if cfg.Pprof {
		warnExposedPprof(g.metricsLn.Addr(), log)
	}
	return g, nil
}

// hubState keeps llm_api_gateway_hub_up current from the pool's reports.
func hubState(m *metrics.Metrics) func(string, hubclient.State) {
	return func(hub string, s hubclient.State) {
		switch s {
		case hubclient.Up:
			m.HubUp.WithLabelValues(hub).Set(1)
		case hubclient.Down:
			m.HubUp.WithLabelValues(hub).Set(0)
		case hubclient.Gone:
			m.HubUp.DeleteLabelValues(hub)
		}
	}
}

// warnExposedPprof warns when --pprof serves on a listener other hosts can
// reach: the metrics listener has no authentication, and the profiler
// shows the command line (which may carry --api-keys) and lets anyone
// start CPU profiles and traces.
func warnExposedPprof(addr net.Addr, log *slog.Logger) {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return
	}
	log.Warn("--pprof serves the Go profiler without authentication on a listener other hosts can reach; keep --metrics-listen on loopback or a trusted network",
		"addr", addr.String())
}

// withTLS wraps the API listener in TLS when --tls-cert-path is set (it
// closes ln on error). The listener is served by pkg/serve, which takes
// any net.Listener: net/http then sees *tls.Conn connections and serves
// HTTP/2 to clients that negotiate h2 through ALPN, HTTP/1.1 to the rest.
// The certificate is loaded on every handshake, so a rotated Secret is
// served from the next connection on without a restart.
func withTLS(ln net.Listener, cfg *config.Config, log *slog.Logger) (net.Listener, error) {
	if cfg.TLSCertPath == "" {
		return ln, nil
	}
	log.Info("the API listener serves TLS", "addr", ln.Addr().String(), "cert", cfg.TLSCertPath)
	return tlsfiles.Listener(ln, cfg.TLSCertPath, cfg.TLSKeyPath)
}

// Run serves until ctx ends, then drains: HTTP, then in-flight
// last-cluster writes (bounded by their write timeout), then the Olric
// leave. The stores start in the background so a slow Olric join cannot
// fail the liveness probe. An error (already logged) means startup or
// serving failed.
func (g *Gateway) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		p        = &parts{}
		startErr error
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		if startErr = g.start(ctx, p); startErr != nil {
			g.log.Error("startup failed", "err", startErr)
			cancel()
			return
		}
		wg.Go(func() { g.hub.Run(ctx) })
		g.ready.Set(true)
		cfg := g.cfg
		g.log.Info("ready", "olric", cfg.Olric.Enabled, "last_cluster", cfg.LastCluster.Enabled, "rate_limit", cfg.RateLimit.Enabled)
		if p.node != nil {
			wg.Go(func() { watchMembers(ctx, p.node, g.m, p.synced) })
		}
		if p.synced != nil {
			// Its last round runs when ctx ends, before stop leaves Olric.
			wg.Go(func() { p.synced.Run(ctx) })
		}
	})
	err := serve.Run(ctx, g.log, g.cfg.Drain, func() { g.ready.Set(false) },
		serve.Server{Name: "api", Listener: g.apiLn, Handler: g.apiMux(), Limits: g.cfg.Limits},
		serve.Server{Name: "metrics", Listener: g.metricsLn, Handler: obs.MetricsMux(g.reg, g.cfg.Pprof), Limits: g.cfg.Limits})
	cancel()
	wg.Wait()
	g.stop(p)
	if err != nil {
		g.log.Error("serve failed", "err", err)
		return fmt.Errorf("serving: %w", err)
	}
	return startErr
}

// apiMux answers the probes at once and the API with 503 "starting" until
// start installed the handler.
func (g *Gateway) apiMux() http.Handler {
	mux := http.NewServeMux()
	serve.Probes(mux, &g.ready)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if h := g.api.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		openai.WriteError(w, openai.Unavailable("starting", "the gateway is starting"))
	})
	return mux
}

// stop closes idle hub connections, waits for in-flight last-cluster
// writes up to their write timeout, and leaves the Olric cluster.
func (g *Gateway) stop(p *parts) {
	g.hub.CloseIdle()
	sctx, scancel := context.WithTimeout(context.Background(), g.cfg.LastCluster.WriteTimeout)
	p.tracker.Wait(sctx)
	scancel()
	if p.node != nil {
		if err := p.node.Shutdown(context.Background()); err != nil {
			g.log.Warn("olric leave", "err", err)
		}
	}
}
