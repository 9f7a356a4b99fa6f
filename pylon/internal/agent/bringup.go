package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pylon/internal/calibrate"
)

// healthProbeInterval is how often startup probes the engines' health.
const healthProbeInterval = 500 * time.Millisecond

// defaultHealthPaths are tried after --upstream-health-path.
var defaultHealthPaths = []string{"/health", "/v1/health/ready"}

// bringUp waits for an engine, then initialises and publishes every model.
func (a *Agent) bringUp(ctx context.Context) error {
	engine, err := a.waitHealthy(ctx)
	if err != nil {
		return err
	}
	for _, m := range a.cfg.Models {
		a.collector.AddModel(m)
		if a.cfg.DoCalibration {
			if err := a.calibrate(ctx, m, engine); err != nil {
				return err
			}
		}
		a.tracker.publish(m)
	}
	return nil
}

// calibrate runs the input-TPS ramp for model against engine
// (docs/pylon.md#calibration).
func (a *Agent) calibrate(ctx context.Context, model, engine string) error {
	a.log.Warn("calibrating input TPS: valid only when this is the cluster's only pylon, since the hub sums a cluster's pylons", "model", model)
	if len(a.cfg.Engines) > 1 {
		a.log.Warn("calibrating against one engine only: the first healthy one", "model", model, "engine", engine)
	}
	start := a.clk.Now()
	res, err := calibrate.Run(ctx, calibrate.Config{
		UpstreamBaseURL: engine, Model: model, Requests: a.cfg.CalibRequests,
		PromptUnits: a.cfg.CalibPromptUnits, MaxConcurrency: a.cfg.CalibConcurrency, StepTimeout: a.cfg.CalibStepTimeout,
		NewID:  func() (string, bool) { return a.collector.NewCalibrationID(model) },
		Client: a.client, Clock: a.clk, Log: a.log,
	}, a.tracker)
	a.gauges.calibrations.WithLabelValues(model, res.Outcome).Set(float64(a.clk.Since(start).Milliseconds()))
	if err != nil {
		return fmt.Errorf("calibrating model %s: %w", model, err)
	}
	a.log.Info("calibration finished", "model", model, "input_tps", res.InputTPS, "steps", res.Steps, "requests", res.Completed)
	return nil
}

// waitHealthy probes the engines' health paths every 500 ms until one
// answers 2xx or --upstream-health-wait-ms passes (0: probe once), and
// returns the base URL of the first engine, in configuration order, that
// answered. With several engines one healthy engine is enough: the engine
// proxy routes around the others until they answer.
func (a *Agent) waitHealthy(ctx context.Context) (string, error) {
	deadline := a.clk.Now().Add(a.cfg.HealthWait)
	paths := append(append([]string(nil), a.cfg.HealthPathList...), defaultHealthPaths...)
	for {
		for _, e := range a.cfg.Engines {
			for _, p := range paths {
				if a.probe(ctx, e, p) {
					return e, nil
				}
			}
		}
		if !a.clk.Now().Before(deadline) {
			if len(a.cfg.Engines) > 1 {
				return "", fmt.Errorf("no engine of %s healthy within --upstream-health-wait-ms (%v)", a.cfg.UpstreamBaseURL, a.cfg.HealthWait)
			}
			return "", fmt.Errorf("engine at %s not healthy within --upstream-health-wait-ms (%v)", a.cfg.UpstreamBaseURL, a.cfg.HealthWait)
		}
		if !clock.Sleep(a.clk, ctx.Done(), healthProbeInterval) {
			return "", ctx.Err()
		}
	}
}

// probe reports whether engine answers 2xx on path within
// --bringup-canary-timeout-ms.
func (a *Agent) probe(ctx context.Context, engine, path string) bool {
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
