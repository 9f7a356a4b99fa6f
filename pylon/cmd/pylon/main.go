// Command pylon is the cluster agent: it dials every hub, registers its
// engine's models over a reverse HTTP/2 tunnel, streams their statistics,
// applies queue admission and forwards the hub's requests to the engine.
// Run it with --help for every flag, its environment variable and its
// default; docs/pylon.md describes the behaviour.
//
// main only parses and validates the configuration; the agent package
// wires and runs the pylon.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/gctune"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pylon/internal/agent"
	"github.com/stargate-router/stargate/pylon/internal/config"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg := config.Default()
	var logCfg obs.LogConfig
	fs := cli.New("pylon", "pylon: registers an engine's models with every hub over reverse tunnels and relays the hubs' requests.", stdout)
	cfg.Register(fs)
	logCfg.Register(fs, "PYLON_")
	if err := fs.Parse(args, getenv); err != nil {
		if cli.IsHelp(err) {
			return 0
		}
		fmt.Fprintln(stderr, "pylon:", err)
		return 2
	}
	log, err := obs.NewLogger(stderr, logCfg)
	if err != nil {
		fmt.Fprintln(stderr, "pylon:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "pylon: invalid configuration:", err)
		return 2
	}
	if gc := gctune.Start(getenv, gctune.DefaultHeadroom); gc != nil {
		defer gc.Stop()
		log.Info("garbage collector: next collection at the live heap + 64 MiB (GOGC set in the environment overrides)", "gogc", gc.Percent())
	}
	warnInsecure(log, cfg)
	a, err := agent.New(cfg, log, version)
	if err != nil {
		fmt.Fprintln(stderr, "pylon:", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error("pylon stopped with an error", "err", err)
		return 1
	}
	return 0
}

// warnInsecure says at startup which protection of the registration token
// the operator turned off, so a development setting that reached
// production shows in the first lines of the log.
func warnInsecure(log *slog.Logger, cfg config.Config) {
	token := cfg.AuthToken != "" || cfg.AuthTokenFile != ""
	if cfg.InsecureNoAuth {
		log.Warn("dialing the hubs WITHOUT a registration token (--insecure-no-auth): only a hub that lets anyone register clusters accepts this pylon")
	}
	if token && !cfg.TLSEnabled() {
		log.Warn("the registration token is sent WITHOUT TLS (--insecure-plaintext): anyone on the path to the hubs can read it and register clusters")
	}
	if token && cfg.TLSInsecure {
		log.Warn("the hubs' certificates are NOT verified (--tls-insecure): the registration token goes to whichever server answers at the hub address")
	}
}
