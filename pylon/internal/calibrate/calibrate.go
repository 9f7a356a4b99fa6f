package calibrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/engineproxy"
)

// ErrInsufficientData is returned when the ramp ended before the running
// mean had its five samples. The pylon stops at startup then: publishing a
// model with no input TPS would make the hub score any work sent to it as
// an infinite wait.
var ErrInsufficientData = errors.New("calibration ended without enough completed requests for an input TPS")

// Tracker observes calibration requests and reports the resulting TPS.
type Tracker interface {
	Begin(info engineproxy.RequestInfo) engineproxy.Observation
	// InputTPS is the model's published last_mean_input_tps, if valid.
	InputTPS(model string) (float64, bool)
}

// Config is the ramp; field comments name the pylon flags.
type Config struct {
	UpstreamBaseURL string
	Model           string
	// Requests is --calibration-requests (5): requests in step 0, doubling.
	Requests int
	// PromptUnits is --calibration-prompt-units (4096, floor 256): the
	// largest prompt, in units of "1".
	PromptUnits int
	// MaxConcurrency is --calibration-max-concurrency (4, floor 1).
	MaxConcurrency int
	// StepTimeout is --bringup-calibration-timeout-ms (30 s).
	StepTimeout time.Duration
	// NewID returns the next calibration request id of the model's
	// generation ("calibration-<scope>-g<seq>-<n>"), so engine events for
	// it are recognised as the pylon's own.
	NewID func() (string, bool)

	Client *http.Client
	Clock  clock.Clock
	Log    *slog.Logger
}

// step n of the ramp (docs/design/statistics.md#calibration): prompt
// min(256·2ⁿ, max(PromptUnits, 256)), Requests·2ⁿ requests, concurrency
// min(n+1, max(MaxConcurrency, 1)).
func (c *Config) step(n int) (promptUnits, requests, concurrency int) {
	ceiling := max(c.PromptUnits, 256)
	promptUnits = ceiling
	if n < 20 && 256<<n < ceiling {
		promptUnits = 256 << n
	}
	requests = c.Requests << min(n, 30)
	concurrency = min(n+1, max(c.MaxConcurrency, 1))
	return
}

// Result summarises a finished ramp.
type Result struct {
	InputTPS  float64
	Steps     int
	Completed int
	Outcome   string // completed (a step saturated), cancelled, error
}

// Run executes the ramp until a step does not finish within StepTimeout,
// then returns the TPS the observations produced.
func Run(ctx context.Context, cfg Config, tr Tracker) (Result, error) {
	if cfg.Requests < 1 {
		return Result{Outcome: "error"}, errors.New("--calibration-requests must be > 0")
	}
	res := Result{Outcome: "completed"}
	largestOK := 0 // largest prompt size that completed
	capUnits := 0  // set when the engine said the prompt was too long
	for n := 0; ; n++ {
		units, count, conc := cfg.step(n)
		if capUnits > 0 {
			units = min(units, capUnits)
		}
		cfg.Log.Info("calibration step", "model", cfg.Model, "step", n, "prompt_units", units, "requests", count, "concurrency", conc)
		done, tooLong, err := runStep(ctx, &cfg, tr, units, count, conc)
		res.Steps = n + 1
		res.Completed += done
		if err != nil {
			if ctx.Err() != nil {
				res.Outcome = "cancelled"
				return res, ctx.Err()
			}
			if tooLong {
				if largestOK == 0 {
					res.Outcome = "error"
					return res, fmt.Errorf("calibration: the engine refused the smallest prompt (%d units): %w", units, err)
				}
				if largestOK >= units {
					// No smaller size has completed: capping again would
					// repeat this step forever.
					res.Outcome = "error"
					return res, fmt.Errorf("calibration: the engine refused a %d-unit prompt after completing %d units: %w", units, largestOK, err)
				}
				capUnits = largestOK
				continue
			}
			if errors.Is(err, errSaturated) {
				break
			}
			res.Outcome = "error"
			return res, err
		}
		largestOK = max(largestOK, units)
	}
	tps, ok := tr.InputTPS(cfg.Model)
	if !ok {
		res.Outcome = "error"
		return res, ErrInsufficientData
	}
	res.InputTPS = tps
	return res, nil
}

var errSaturated = errors.New("calibration step did not finish within the step timeout")

// runStep sends count requests with conc workers; it fails with
// errSaturated when the batch outlives the step timeout.
func runStep(ctx context.Context, cfg *Config, tr Tracker, units, count, conc int) (done int, tooLong bool, err error) {
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var saturated atomic.Bool
	timer := cfg.Clock.AfterFunc(cfg.StepTimeout, func() {
		saturated.Store(true)
		cancel()
	})
	defer timer.Stop()

	body := requestBody(cfg.Model, units)
	jobs := make(chan struct{})
	var (
		mu       sync.Mutex
		firstErr error
		long     bool
		wg       sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for range jobs {
				id, ok := cfg.NewID()
				var isLong bool
				var err error
				if ok {
					isLong, err = send(stepCtx, cfg, tr, id, body, uint64(units))
				} else {
					err = fmt.Errorf("model %s has no generation to calibrate", cfg.Model)
				}
				mu.Lock()
				if err == nil {
					done++
				} else if firstErr == nil {
					firstErr, long = err, isLong
					cancel()
				}
				mu.Unlock()
			}
		})
	}
feed:
	for range count {
		select {
		case jobs <- struct{}{}:
		case <-stepCtx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	switch {
	case saturated.Load():
		return done, false, errSaturated
	case firstErr != nil:
		return done, long, firstErr
	case ctx.Err() != nil:
		return done, false, ctx.Err()
	}
	return done, false, nil
}

func requestBody(model string, units int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":       model,
		"messages":    []map[string]string{{"role": "user", "content": strings.Repeat("1", units)}},
		"max_tokens":  1,
		"seed":        33,
		"temperature": 0.7,
		"top_p":       1.0,
		"stream":      false,
	})
	return b
}

// send runs one observed calibration request. tooLong reports a 4xx whose
// message says the prompt exceeds the context.
func send(ctx context.Context, cfg *Config, tr Tracker, id string, body []byte, units uint64) (tooLong bool, err error) {
	obs := tr.Begin(engineproxy.RequestInfo{ID: id, Model: cfg.Model, Endpoint: engineproxy.EndpointChat, InputTokens: units})
	completed := false
	defer func() {
		if completed {
			obs.Complete()
		} else if ctx.Err() != nil {
			obs.Cancel()
		} else {
			obs.Fail()
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.UpstreamBaseURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.RequestID, id)
	req.Header.Set(headers.Model, cfg.Model)
	req.Header.Set(headers.InputTokens, strconv.FormatUint(units, 10))
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	obs.Headers(resp.StatusCode)
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.ToLower(string(b))
		long := resp.StatusCode >= 400 && resp.StatusCode < 500 &&
			(strings.Contains(msg, "prompt too long") || strings.Contains(msg, "context length") || strings.Contains(msg, "maximum context"))
		return long, fmt.Errorf("calibration request %s: engine answered %d", id, resp.StatusCode)
	}
	obs.Output(b)
	completed = true
	return false, nil
}
