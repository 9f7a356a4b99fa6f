// Command hub is the hub router: pylons dial its backend listener and
// register over a reverse HTTP/2 tunnel, and it routes OpenAI requests to
// their clusters. Run it with --help for every flag, its environment variable
// and its default; docs/hub.md describes the behaviour.
//
// main only parses and validates the configuration and sets up logging and
// tracing; the app package wires and runs the hub.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/hub/internal/app"
	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/gctune"
	"github.com/stargate-router/stargate/pkg/obs"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads --lb-config-path. It is caught from the start: its
	// default action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, hup))
}

// run is the hub's main; each value on reload asks it to reload
// --lb-config-path.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, reload <-chan os.Signal) int {
	cfg := app.DefaultConfig()
	var logCfg obs.LogConfig
	fs := cli.New("hub", "hub: routes OpenAI requests to clusters whose pylons registered over reverse tunnels.", stdout)
	cfg.Register(fs)
	logCfg.Register(fs, "HUB_")
	if err := fs.Parse(args, getenv); err != nil {
		if cli.IsHelp(err) {
			return 0
		}
		fmt.Fprintln(stderr, "hub:", err)
		return 2
	}
	log, err := obs.NewLogger(stderr, logCfg)
	if err != nil {
		fmt.Fprintln(stderr, "hub:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "hub: invalid configuration:", err)
		return 2
	}
	if gc := gctune.Start(getenv, gctune.DefaultHeadroom); gc != nil {
		defer gc.Stop()
		log.Info("garbage collector: next collection at the live heap + 64 MiB (GOGC set in the environment overrides)", "gogc", gc.Percent())
	}
	shutdownTracing, err := obs.SetupTracing(ctx, cfg.Tracing(version))
	if err != nil {
		fmt.Fprintln(stderr, "hub:", err)
		return 2
	}
	defer func() {
		// Spans of the last requests are flushed after the drain.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()
	a, err := app.New(cfg, log, version)
	if err != nil {
		fmt.Fprintln(stderr, "hub:", err)
		return 1
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reload:
				a.ReloadLBConfig("sighup")
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Error("hub stopped with an error", "err", err)
		return 1
	}
	return 0
}
