package main

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
	"github.com/stargate-router/stargate/pylon/internal/calibrate"
	"github.com/stargate-router/stargate/pylon/internal/relay"
	"github.com/stargate-router/stargate/pylon/internal/stats"
	"github.com/stargate-router/stargate/pylon/internal/tunnel"
)

// app is the wired pylon.
type app struct {
	cfg       config
	log       *slog.Logger
	clk       clock.Clock
	reg       *prometheus.Registry
	collector *stats.Collector
	tracker   *tracker
	relay     *relay.Relay
	client    *http.Client
	ready     serve.Readiness
	api       serve.Server
	metrics   serve.Server

	tls *tls.Config // nil: plaintext tunnels

	tunnelUp     *prometheus.GaugeVec
	regStreamUp  *prometheus.GaugeVec
	advertised   *prometheus.GaugeVec
	calibrations *prometheus.GaugeVec
}

func newApp(cfg config, log *slog.Logger) (*app, error) {
	reg := obs.NewRegistry()
	obs.BuildInfo(reg, "pylon", version)
	clk := clock.Real{}
	// The engine is on a local network; no overall timeout, since SSE
	// responses and the stats stream are long-lived.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	scfg := stats.Config{
		Clock: clk, Log: log, HTTPClient: client,
		StreamMode: cfg.StreamMode, StreamPath: cfg.StreamPath, KVCachePath: cfg.KVCachePath,
		InitialInputTPS: cfg.InitialInputTPS, PinInputTPS: cfg.PinInputTPS, MaxEngineConcurrency: cfg.MaxEngineConcurrency, Registerer: reg,
	}
	rcfg := relay.Defaults()
	if len(cfg.engines) > 1 {
		// Several engines serving the same models: the relay spreads the
		// requests, the collector reads every engine's stream and KV stats.
		scfg.UpstreamBaseURLs, rcfg.UpstreamBaseURLs = cfg.engines, cfg.engines
	} else {
		scfg.UpstreamBaseURL, rcfg.UpstreamBaseURL = cfg.UpstreamBaseURL, cfg.UpstreamBaseURL
	}
	coll, err := stats.New(scfg)
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, clk: clk, reg: reg, collector: coll, client: client}
	a.tracker = newTracker(coll)
	rcfg.HealthPaths = splitList(cfg.HealthPaths)
	rcfg.RetryableStatusCodes = cfg.codes
	rcfg.RequireUpstreamRetryHeader = cfg.RequireUpstreamRetryHeader
	rcfg.UpstreamRetryHeader = cfg.UpstreamRetryHeader
	rcfg.PropagateRetryAfter = cfg.PropagateRetryAfter
	rcfg.LocalConnectFailuresRetryable = cfg.LocalConnectFailuresRetryable
	rcfg.QueueMismatchEnabled = cfg.QueueMismatchEnabled
	rcfg.QueueMismatchMinDelta = cfg.QueueMismatchMinDelta
	rcfg.QueueMismatchToleranceFactor = cfg.QueueMismatchTolerance
	rcfg.QueueMismatchRetryAfter = cfg.QueueMismatchRetryAfter
	rcfg.UpstreamBackend = cfg.UpstreamBackend
	rcfg.PriorityCeiling = uint32(cfg.PriorityCeiling)
	rcfg.InferenceServerID = cfg.InferenceServerID
	rcfg.Client, rcfg.Clock, rcfg.Log = client, clk, log
	if err := rcfg.Validate(); err != nil {
		return nil, err
	}
	a.relay = relay.New(rcfg, a.tracker, relay.NewMetrics(reg))
	a.tunnelUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_reverse_tunnel_connected",
		Help: "1 while the tunnel (which also carries the registration stream) to this hub address is up."}, []string{"router"})
	a.regStreamUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_registration_stream_connected",
		Help: "1 while the hub at this address holds the registration stream open."}, []string{"router"})
	a.advertised = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_model_advertised_status",
		Help: "1 for the status each model is advertised with to this hub (active while its registration stream is open), 0 for the other."},
		[]string{"router", "model", "status"})
	a.calibrations = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_model_calibration_duration_ms",
		Help: "How long the startup calibration of a model took, by outcome."}, []string{"model", "outcome"})
	reg.MustRegister(a.tunnelUp, a.regStreamUp, a.advertised, a.calibrations)

	apiLn, err := serve.Listen("listen", cfg.Listen)
	if err != nil {
		return nil, err
	}
	metricsLn, err := serve.Listen("metrics-listen", cfg.MetricsListen)
	if err != nil {
		_ = apiLn.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	serve.Probes(mux, &a.ready)
	mux.HandleFunc("/", serve.NotFound)
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", obs.MetricsHandler(reg))
	if cfg.Pprof {
		obs.Pprof(mmux)
	}
	if cfg.TLS || cfg.TLSCertPath != "" || cfg.TLSInsecure {
		a.tls, err = tlsfiles.Client(cfg.TLSCertPath, cfg.TLSInsecure)
		if err != nil {
			_ = apiLn.Close()
			_ = metricsLn.Close()
			return nil, err
		}
	}
	a.api = serve.Server{Name: "api", Listener: apiLn, Handler: mux}
	a.metrics = serve.Server{Name: "metrics", Listener: metricsLn, Handler: mmux}
	return a, nil
}

// run follows pylon.md §1.2: metrics first, then the stats collector, the
// engine health wait, model initialisation (calibration), and only then the
// tunnels, so a hub never sees a model before its TPS bootstrap is done.
func (a *app) run(ctx context.Context) error {
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
		handler := http.NewServeMux()
		handler.Handle(protocol.RegistrationPath, a.observeRegistration(
			tunnel.RegistrationHandler(&snapshotter{a: a, changed: bcast}, a.cfg.MinUpdateInterval, a.clk, a.log)))
		handler.Handle("/", a.relay)
		hs := protocol.Handshake{
			InferenceServerID: a.cfg.InferenceServerID, ClusterID: a.cfg.ClusterID,
			InferenceServerURL: a.cfg.UpstreamBaseURL, HeartbeatMs: uint64(a.cfg.MinUpdateInterval / time.Millisecond),
		}
		tc := tunnel.New(tunnel.Config{
			Addresses: splitList(a.cfg.StargateAddress), Handshake: hs, Token: a.token(), Handler: handler,
			Clock: a.clk, Log: a.log, DrainTimeout: a.cfg.Drain, TLS: a.tls,
			OnState: func(addr string, up bool) {
				v := 0.0
				if up {
					v = 1
				}
				a.tunnelUp.WithLabelValues(addr).Set(v)
			},
		})
		if terr := tc.Run(ctx); terr != nil && ctx.Err() == nil {
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

// token returns the per-dial token source, or nil without auth.
func (a *app) token() func() (string, error) {
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

// bringUp waits for an engine, then initialises and publishes every model.
func (a *app) bringUp(ctx context.Context) error {
	engine, err := a.waitHealthy(ctx)
	if err != nil {
		return err
	}
	for _, m := range a.cfg.models {
		a.collector.AddModel(m)
		if a.cfg.DoCalibration {
			a.log.Warn("calibrating input TPS: valid only when this is the cluster's only pylon, since the hub sums a cluster's pylons", "model", m)
			if len(a.cfg.engines) > 1 {
				a.log.Warn("calibrating against one engine only: the first healthy one", "model", m, "engine", engine)
			}
			start := a.clk.Now()
			res, err := calibrate.Run(ctx, calibrate.Config{
				UpstreamBaseURL: engine, Model: m, Requests: a.cfg.CalibRequests,
				PromptUnits: a.cfg.CalibPromptUnits, MaxConcurrency: a.cfg.CalibConcurrency, StepTimeout: a.cfg.CalibStepTimeout,
				NewID:  func() (string, bool) { return a.collector.NewCalibrationID(m) },
				Client: a.client, Clock: a.clk, Log: a.log,
			}, a.tracker)
			a.calibrations.WithLabelValues(m, res.Outcome).Set(float64(a.clk.Since(start).Milliseconds()))
			if err != nil {
				return fmt.Errorf("calibrating model %s: %w", m, err)
			}
			a.log.Info("calibration finished", "model", m, "input_tps", res.InputTPS, "steps", res.Steps, "requests", res.Completed)
		}
		a.tracker.publish(m)
	}
	return nil
}

// waitHealthy probes the engines' health paths every 500 ms until one
// answers 2xx or --upstream-health-wait-ms passes (0: probe once), and
// returns the base URL of the first engine, in configuration order, that
// answered. With several engines one healthy engine is enough: the relay
// routes around the others until they answer.
func (a *app) waitHealthy(ctx context.Context) (string, error) {
	deadline := a.clk.Now().Add(a.cfg.HealthWait)
	paths := append(splitList(a.cfg.HealthPaths), "/health", "/v1/health/ready")
	for {
		for _, e := range a.cfg.engines {
			for _, p := range paths {
				if a.probe(ctx, e, p) {
					return e, nil
				}
			}
		}
		if !a.clk.Now().Before(deadline) {
			if len(a.cfg.engines) > 1 {
				return "", fmt.Errorf("no engine of %s healthy within --upstream-health-wait-ms (%v)", a.cfg.UpstreamBaseURL, a.cfg.HealthWait)
			}
			return "", fmt.Errorf("engine at %s not healthy within --upstream-health-wait-ms (%v)", a.cfg.UpstreamBaseURL, a.cfg.HealthWait)
		}
		if !clock.Sleep(a.clk, ctx.Done(), 500*time.Millisecond) {
			return "", ctx.Err()
		}
	}
}

func (a *app) probe(ctx context.Context, engine, path string) bool {
	pctx, cancel := context.WithTimeout(ctx, a.cfg.HealthProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, engine+path, nil)
	if err != nil {
		return false
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// snapshotter is the registration the tunnels publish: every published
// model, active, with its live statistics.
type snapshotter struct {
	a       *app
	changed *broadcaster
}

func (s *snapshotter) Registration() protocol.Registration {
	reg := protocol.Registration{
		InferenceServerID: s.a.cfg.InferenceServerID, ClusterID: s.a.cfg.ClusterID,
		Models: map[string]protocol.ModelEntry{},
	}
	if reg.ClusterID == "" {
		reg.ClusterID = reg.InferenceServerID
	}
	for _, m := range s.a.tracker.publishedModels() {
		st, ok := s.a.collector.Stats(m)
		if !ok {
			reg.Models[m] = protocol.ModelEntry{Status: protocol.StatusInactive}
			continue
		}
		reg.Models[m] = protocol.ModelEntry{Status: protocol.StatusActive, Stats: &st}
	}
	return reg
}

func (s *snapshotter) Changed() <-chan struct{} { return s.changed.wait() }

// observeRegistration keeps pylon_registration_stream_connected and
// pylon_model_advertised_status for the hub holding each registration
// stream. On the tunnel the request's remote address is the hub's address,
// the router label of pylon_reverse_tunnel_connected too.
func (a *app) observeRegistration(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		router := r.RemoteAddr
		a.setAdvertised(router, true)
		defer a.setAdvertised(router, false)
		h.ServeHTTP(w, r)
	})
}

func (a *app) setAdvertised(router string, up bool) {
	on, off := protocol.StatusActive, protocol.StatusInactive
	v := 0.0
	if up {
		v = 1
	} else {
		on, off = off, on
	}
	a.regStreamUp.WithLabelValues(router).Set(v)
	for _, m := range a.tracker.publishedModels() {
		a.advertised.WithLabelValues(router, m, string(on)).Set(1)
		a.advertised.WithLabelValues(router, m, string(off)).Set(0)
	}
}
