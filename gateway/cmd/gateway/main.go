// Command gateway is the edge gateway: OpenAI-compatible API, sessions,
// rate limits, last-cluster hints. Run it with --help for every flag, its
// environment variable and its default; docs/gateway.md describes the
// behaviour.
//
// main parses and validates the configuration, sets up the logger and the
// span export (OTLP/HTTP with --otel-endpoint), and hands over to the app
// package, which brings the gateway up and drains it on SIGTERM. The
// remaining spans are flushed last, after the drain, the last-cluster
// writes and the Olric leave, so the spans of the last requests are kept.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/app"
	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/gctune"
	"github.com/stargate-router/stargate/pkg/obs"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run returns the exit code: 0 after a clean drain, 2 for a bad
// configuration, 1 when the gateway could not start or serve.
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
	if gc := gctune.Start(getenv, gctune.DefaultHeadroom); gc != nil {
		defer gc.Stop()
		log.Info("garbage collector: next collection at the live heap + 64 MiB (GOGC set in the environment overrides)", "gogc", gc.Percent())
	}
	tcfg := cfg.Tracing
	tcfg.Service, tcfg.Version = app.ServiceName, version
	shutdownTracing, err := obs.SetupTracing(ctx, tcfg)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()
	g, err := app.New(cfg, log, version)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	if err := g.Run(ctx); err != nil {
		return 1 // Run logged why
	}
	return 0
}
