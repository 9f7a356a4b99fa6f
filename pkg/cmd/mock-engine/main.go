// Command mock-engine serves an OpenAI-compatible LLM engine whose KV prefix
// cache and shared prefill are modelled, for routing tests and demos on one
// machine. Run it with --help for every flag, its environment variable and
// its default; docs/mock-engine.md explains the model.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/mockengine"
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
	cfg := mockengine.DefaultConfig()
	var logCfg obs.LogConfig
	var drain time.Duration
	fs := cli.New("mock-engine", "mock-engine: an OpenAI-compatible engine with a modelled KV prefix cache,\nshared (processor-sharing) prefill and per-token decode.", stdout)
	cfg.Register(fs)
	logCfg.Register(fs, "MOCK_ENGINE_")
	fs.Duration(&drain, "drain-timeout", "MOCK_ENGINE_DRAIN_TIMEOUT", 15*time.Second, "on SIGTERM, how long in-flight requests may finish before connections are closed")
	if err := fs.Parse(args, getenv); err != nil {
		if cli.IsHelp(err) {
			return 0
		}
		fmt.Fprintln(stderr, "mock-engine:", err)
		return 2
	}
	log, err := obs.NewLogger(stderr, logCfg)
	if err != nil {
		fmt.Fprintln(stderr, "mock-engine:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "mock-engine: invalid configuration:", err)
		return 2
	}
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "mock_engine", version)
	eng, err := mockengine.New(cfg, clock.Real{}, reg, log)
	if err != nil {
		fmt.Fprintln(stderr, "mock-engine:", err)
		return 2
	}
	ln, err := serve.Listen("listen", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "mock-engine:", err)
		return 1
	}
	log.Info("mock engine ready", "model", cfg.ModelName, "kv_capacity_tokens", cfg.KVCapacityTokens,
		"max_concurrent", cfg.MaxConcurrent, "time_scale", cfg.TimeScale, "version", version)
	err = serve.Run(ctx, log, drain, eng.Close, serve.Server{Name: "api", Listener: ln, Handler: eng.Handler(obs.MetricsHandler(reg))})
	eng.Close()
	if err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}
