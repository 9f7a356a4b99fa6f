// Command gateway is the edge gateway: OpenAI-compatible API, sessions, rate limits, last-cluster hints.
//
// main parses and validates the configuration (flags with environment
// variables; --help lists them), starts the embedded Olric node when
// OLRIC_ENABLED=true, wires the stores, the rate limiter, the last-cluster
// tracker and the hub client into the HTTP server, exports spans over
// OTLP/HTTP with --otel-endpoint, and drains on SIGTERM: HTTP first, then
// in-flight last-cluster writes (bounded), then a graceful Olric leave, then
// a flush of the remaining spans. /healthz answers from the start; /readyz only once the
// Olric node has started and joined (or formed a cluster alone).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/server"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/serve"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, getenv, stdout)
	if err != nil {
		if cli.IsHelp(err) {
			return 0
		}
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	log, err := obs.NewLogger(stderr, cfg.Log)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	if cfg.InsecureNoAuth && len(cfg.APIKeys) == 0 {
		log.Warn("client authentication is DISABLED (--insecure-no-auth): anyone who reaches the listener can use the hub")
	}
	tcfg := cfg.Tracing
	tcfg.Service, tcfg.Version = "llm-api-gateway", version
	shutdownTracing, err := obs.SetupTracing(ctx, tcfg)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	// Spans of the last requests and last-cluster writes are flushed after
	// the drain, the writes and the Olric leave (deferred, so every return
	// below flushes).
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "gateway", version)
	m := metrics.New(reg)
	clk := clock.Real{}

	apiLn, err := serve.Listen("listen", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	metricsLn, err := serve.Listen("metrics-listen", cfg.MetricsListen)
	if err != nil {
		_ = apiLn.Close()
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}

	// The API answers 503 until the stores are up; probes answer at once
	// so a slow Olric join does not fail the liveness probe.
	var ready serve.Readiness
	var api atomic.Pointer[http.Handler]
	mux := http.NewServeMux()
	serve.Probes(mux, &ready)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if h := api.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		openai.WriteError(w, openai.Unavailable("starting", "the gateway is starting"))
	})
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", obs.MetricsHandler(reg))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var node *olricnode.Node
	var tracker *lastcluster.Tracker
	hub := hubclient.New(cfg.HubURL, cfg.HubConnectTimeout, cfg.HubTokenFile)
	var startErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		node, tracker, startErr = wire(ctx, cfg, log, reg, m, clk, hub, &api)
		if startErr != nil {
			log.Error("startup failed", "err", startErr)
			cancel()
			return
		}
		ready.Set(true)
		log.Info("ready", "olric", cfg.Olric.Enabled, "last_cluster", cfg.LastCluster.Enabled, "rate_limit", cfg.RateLimit.Enabled)
		if node != nil {
			wg.Go(func() { watchMembers(ctx, node, m) })
		}
	})
	err = serve.Run(ctx, log, cfg.Drain, func() { ready.Set(false) },
		serve.Server{Name: "api", Listener: apiLn, Handler: mux},
		serve.Server{Name: "metrics", Listener: metricsLn, Handler: mmux})
	cancel()
	wg.Wait()
	hub.CloseIdle()
	sctx, scancel := context.WithTimeout(context.Background(), cfg.LastCluster.WriteTimeout)
	tracker.Wait(sctx)
	scancel()
	if node != nil {
		if err := node.Shutdown(context.Background()); err != nil {
			log.Warn("olric leave", "err", err)
		}
	}
	if err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	if startErr != nil {
		return 1
	}
	return 0
}

// wire starts Olric when enabled and builds the API handler.
func wire(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer, m *metrics.Metrics, clk clock.Clock,
	hub *hubclient.Client, api *atomic.Pointer[http.Handler]) (*olricnode.Node, *lastcluster.Tracker, error) {
	var (
		node    *olricnode.Node
		store   lastcluster.Store
		counter ratelimit.Counter
	)
	if cfg.Olric.Enabled {
		o := cfg.Olric
		n, err := olricnode.Start(ctx, o.Config, log)
		if err != nil {
			return nil, nil, err
		}
		node = n
		if err := reg.Register(olricnode.NewCollector(n)); err != nil {
			return node, nil, fmt.Errorf("registering the olric collector: %w", err)
		}
		lc, err := n.Embedded().NewDMap(o.LastClusterDMap)
		if err != nil {
			return node, nil, fmt.Errorf("olric dmap %s: %w", o.LastClusterDMap, err)
		}
		rl, err := n.Cluster().NewDMap(o.RateLimitDMap)
		if err != nil {
			return node, nil, fmt.Errorf("olric dmap %s: %w", o.RateLimitDMap, err)
		}
		store, counter = lastcluster.Olric{DM: lc}, ratelimit.Olric{DM: rl}
	} else {
		if cfg.LastCluster.Enabled {
			store = lastcluster.NewLRU(cfg.LastCluster.LocalMaxEntries, cfg.LastCluster.TTL)
		}
		counter = ratelimit.NewLocal(clk)
	}
	lc := cfg.LastCluster
	// The global provider: the OTLP exporter SetupTracing installed with
	// --otel-endpoint, otherwise a no-op.
	tp := otel.GetTracerProvider()
	tracker := lastcluster.New(lastcluster.Config{Enabled: lc.Enabled && store != nil, TTL: lc.TTL,
		LookupTimeout: lc.LookupTimeout, WriteTimeout: lc.WriteTimeout}, store, m, tp, log, clk)
	var limiter *ratelimit.Limiter
	if cfg.RateLimit.Enabled {
		limiter = ratelimit.New(counter, ratelimit.Config{FailOpen: cfg.RateLimit.FailOpen, StoreTimeout: cfg.RateLimit.StoreTimeout}, clk, m, log)
	}
	var h http.Handler = server.New(server.Deps{
		Hub: hub, Tracker: tracker, Limiter: limiter, Metrics: m, Log: log, Clock: clk,
		Keys: cfg.APIKeys, Models: cfg.Models, MaxBodyBytes: cfg.MaxBodyBytes, RoutingKeyPrefix: cfg.RoutingKeyPrefix,
		ModelURIAllowlist: cfg.ModelURIAllowlist,
		HubRequestTimeout: cfg.HubRequestTimeout, DefaultMaxOutputTokens: cfg.RateLimit.DefaultMaxOutputTokens,
		TracerProvider: tp,
	})
	api.Store(&h)
	return node, tracker, nil
}

// watchMembers keeps the Olric member gauge current and, when membership
// changes, refreshes the cluster client's partition owners at once rather
// than at its next periodic fetch: until then rate-limit adds may run on a
// former owner, where they are not atomic.
func watchMembers(ctx context.Context, node *olricnode.Node, m *metrics.Metrics) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := -1
	for {
		if n, err := node.Members(ctx); err == nil {
			m.OlricMembers.Set(float64(n))
			if last >= 0 && n != last {
				_ = node.RefreshRouting(ctx)
			}
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
