// Command gateway is the edge gateway: OpenAI-compatible API, sessions, rate limits, last-cluster hints.
//
// This is the process skeleton every binary shares (flags with environment
// variables, slog logging, an explicit Prometheus registry, health probes and
// a bounded graceful drain on SIGTERM); the gateway's own components are wired
// in here as they land. Run it with --help for every flag.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/obs"
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
	var (
		listen, metricsListen string
		drain                 time.Duration
		logCfg                obs.LogConfig
	)
	fs := cli.New("gateway", "gateway: the edge gateway: OpenAI-compatible API, sessions, rate limits, last-cluster hints.", stdout)
	fs.String(&listen, "listen", "GATEWAY_LISTEN", "127.0.0.1:8080", "HTTP listen address host:port")
	fs.String(&metricsListen, "metrics-listen", "GATEWAY_METRICS_LISTEN", "127.0.0.1:9464", "Prometheus /metrics listen address host:port")
	fs.Duration(&drain, "drain-timeout", "GATEWAY_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, how long in-flight requests and streams may finish before connections are closed")
	logCfg.Register(fs, "GATEWAY_")
	if err := fs.Parse(args, getenv); err != nil {
		if cli.IsHelp(err) {
			return 0
		}
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	log, err := obs.NewLogger(stderr, logCfg)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "gateway", version)

	var ready serve.Readiness
	api := http.NewServeMux()
	serve.Probes(api, &ready)
	api.HandleFunc("/", serve.NotFound)
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", obs.MetricsHandler(reg))

	apiLn, err := serve.Listen("listen", listen)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	metricsLn, err := serve.Listen("metrics-listen", metricsListen)
	if err != nil {
		_ = apiLn.Close()
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	ready.Set(true)
	err = serve.Run(ctx, log, drain, func() { ready.Set(false) },
		serve.Server{Name: "api", Listener: apiLn, Handler: api},
		serve.Server{Name: "metrics", Listener: metricsLn, Handler: metrics})
	if err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}
