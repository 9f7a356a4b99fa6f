package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/obs"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/serve"
	"github.com/stargate-router/stargate/pkg/tlsfiles"
	"github.com/stargate-router/stargate/pylon/internal/config"
	"github.com/stargate-router/stargate/pylon/internal/engineproxy"
	"github.com/stargate-router/stargate/pylon/internal/stats"
	"github.com/stargate-router/stargate/pylon/internal/tunnel"
)

// Agent is a wired pylon. Build it with New and run it with Run.
type Agent struct {
	cfg       config.Config
	log       *slog.Logger
	clk       clock.Clock
	collector *stats.Collector
	tracker   *tracker
	proxy     *engineproxy.Proxy
	client    *http.Client
	gauges    *gauges
	ready     serve.Readiness
	api       serve.Server
	metrics   serve.Server

	tls *tls.Config // nil: plaintext tunnels
}

// New wires a pylon from cfg, which Validate must have accepted, and opens
// its listeners; version labels the build-info metric.
func New(cfg config.Config, log *slog.Logger, version string) (*Agent, error) {
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "pylon", version)
	clk := clock.Real{}
	// The engine is on a local network; no overall timeout, since SSE
	// responses and the stats stream are long-lived.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	coll, err := stats.New(statsConfig(cfg, clk, log, client, reg))
	if err != nil {
		return nil, err
	}
	pcfg := proxyConfig(cfg, clk, log, client)
	if err := pcfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: log, clk: clk, collector: coll, client: client, tracker: newTracker(coll), gauges: newGauges(reg)}
	a.proxy = engineproxy.New(pcfg, a.tracker, engineproxy.NewMetrics(reg))
	if err := a.listen(reg); err != nil {
		return nil, err
	}
	if cfg.TLSEnabled() {
		if a.tls, err = tlsfiles.Client(cfg.TLSCertPath, cfg.TLSInsecure); err != nil {
			_ = a.api.Listener.Close()
			_ = a.metrics.Listener.Close()
			return nil, err
		}
	}
	return a, nil
}

// statsConfig is the collector's share of cfg.
func statsConfig(cfg config.Config, clk clock.Clock, log *slog.Logger, client *http.Client, reg prometheus.Registerer) stats.Config {
	scfg := stats.Config{
		Clock: clk, Log: log, HTTPClient: client,
		StreamMode: cfg.StreamMode, StreamPath: cfg.StreamPath, KVCachePath: cfg.KVCachePath,
		InitialInputTPS: cfg.InitialInputTPS, PinInputTPS: cfg.PinInputTPS, MaxEngineConcurrency: cfg.MaxEngineConcurrency, Registerer: reg,
	}
	if len(cfg.Engines) > 1 {
		// Several engines serving the same models: the collector reads
		// every engine's stream and KV stats.
		scfg.UpstreamBaseURLs = cfg.Engines
	} else {
		scfg.UpstreamBaseURL = cfg.UpstreamBaseURL
	}
	return scfg
}

// proxyConfig is the engine proxy's share of cfg.
func proxyConfig(cfg config.Config, clk clock.Clock, log *slog.Logger, client *http.Client) engineproxy.Config {
	pcfg := engineproxy.Defaults()
	if len(cfg.Engines) > 1 {
		// Several engines serving the same models: the proxy spreads the
		// requests over them.
		pcfg.UpstreamBaseURLs = cfg.Engines
	} else {
		pcfg.UpstreamBaseURL = cfg.UpstreamBaseURL
	}
	pcfg.HealthPaths = cfg.HealthPathList
	pcfg.RetryableStatusCodes = cfg.RetryableStatusCodes
	pcfg.RequireUpstreamRetryHeader = cfg.RequireUpstreamRetryHeader
	pcfg.UpstreamRetryHeader = cfg.UpstreamRetryHeader
	pcfg.PropagateRetryAfter = cfg.PropagateRetryAfter
	pcfg.LocalConnectFailuresRetryable = cfg.LocalConnectFailuresRetryable
	pcfg.QueueMismatchEnabled = cfg.QueueMismatchEnabled
	pcfg.QueueMismatchMinDelta = cfg.QueueMismatchMinDelta
	pcfg.QueueMismatchToleranceFactor = cfg.QueueMismatchTolerance
	pcfg.QueueMismatchRetryAfter = cfg.QueueMismatchRetryAfter
	pcfg.UpstreamBackend = cfg.UpstreamBackend
	pcfg.PriorityCeiling = uint32(cfg.PriorityCeiling)
	pcfg.InferenceServerID = cfg.InferenceServerID
	pcfg.EngineAffinity = cfg.EngineAffinity == "on"
	pcfg.EngineAffinityLoadFactor = cfg.EngineAffinityLoadFactor
	pcfg.EngineAffinityQueueWhenFull = cfg.EngineAffinityWhenFull == "queue"
	pcfg.MaxEngineConcurrency = cfg.MaxEngineConcurrency
	pcfg.Client, pcfg.Clock, pcfg.Log = client, clk, log
	return pcfg
}

// listen opens the probe and metrics listeners.
func (a *Agent) listen(reg *prometheus.Registry) error {
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
	mux.HandleFunc("/", serve.NotFound)
	a.api = serve.Server{Name: "api", Listener: apiLn, Handler: mux, Limits: a.cfg.Limits}
	a.metrics = serve.Server{Name: "metrics", Listener: metricsLn, Handler: obs.MetricsMux(reg, a.cfg.Pprof), Limits: a.cfg.Limits}
	return nil
}

// Run serves until ctx is done or a critical part fails, in the bring-up
// order of docs/pylon.md#startup: metrics first, then the stats collector,
// the engine health wait and model initialisation (calibration), and only
// then the tunnels, so a hub never sees a model before its TPS bootstrap
// is done.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		serveErr = serve.Run(ctx, a.log, a.cfg.Drain, func() { a.ready.Set(false) }, a.api, a.metrics)
	})
	wg.Go(func() {
		if err := a.collector.Run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("stats collector stopped", "err", err)
			cancel()
		}
	})
	bcast := newBroadcaster(a.collector.Changed())
	wg.Go(func() { bcast.run(ctx) })

	err := a.bringUp(ctx)
	if err == nil {
		a.ready.Set(true)
		if terr := a.tunnels(bcast).Run(ctx); terr != nil && ctx.Err() == nil {
			err = fmt.Errorf("tunnel client: %w", terr)
		}
	}
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return serveErr
}

// tunnels builds the tunnel client: one tunnel per hub address, each
// serving the registration stream and the proxied requests.
func (a *Agent) tunnels(changed *broadcaster) *tunnel.Client {
	handler := http.NewServeMux()
	handler.Handle(protocol.RegistrationPath, a.observeRegistration(
		tunnel.RegistrationHandler(&snapshotter{a: a, changed: changed}, a.cfg.MinUpdateInterval, a.clk, a.log)))
	handler.Handle("/", a.proxy)
	hs := protocol.Handshake{
		InferenceServerID: a.cfg.InferenceServerID, ClusterID: a.cfg.ClusterID,
		InferenceServerURL: a.cfg.UpstreamBaseURL, HeartbeatMs: uint64(a.cfg.MinUpdateInterval / time.Millisecond),
		Region: a.cfg.Region,
	}
	return tunnel.New(tunnel.Config{
		Addresses: a.cfg.HubAddresses, Handshake: hs, Token: a.token(), Handler: handler,
		Clock: a.clk, Log: a.log, DrainTimeout: a.cfg.Drain, TLS: a.tls, AllowPlaintextToken: a.cfg.InsecurePlaintext,
		OnState: a.gauges.tunnelState,
	})
}

// token returns the per-dial token source, or nil without auth.
func (a *Agent) token() func() (string, error) {
	switch {
	case a.cfg.AuthToken != "":
		tok := a.cfg.AuthToken
		return func() (string, error) { return tok, nil }
	case a.cfg.AuthTokenFile != "":
		path := a.cfg.AuthTokenFile
		return func() (string, error) { return cli.ReadSecretFile(path) }
	}
	return nil
}
