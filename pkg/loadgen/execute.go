package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/stargate-router/stargate/pkg/workload"
)

// RunSpec is one workload to replay and the folder its results go to.
type RunSpec struct {
	Workload    *workload.Workload
	Path        string
	Fingerprint string
	// Client is the request template; an empty Model takes the
	// workload's. Its HTTP client and clock must be set.
	Client Client
	// Config bounds the run; a zero Timeout takes the workload's
	// client_timeout_ms param when it has one.
	Config Config
	// Meta labels the run (arm, repeat); Execute fills the rest.
	Meta Meta
	Dir  string
	// ProgressOut receives progress (nil = none); ProgressTTY redraws a
	// bar instead of printing lines every ProgressEvery.
	ProgressOut   io.Writer
	ProgressTTY   bool
	ProgressEvery time.Duration
	// DefaultTimeout bounds each request when neither Config.Timeout nor
	// the workload's client_timeout_ms does.
	DefaultTimeout time.Duration
	// Send replaces Client.Do (tests).
	Send Sender
	// Recorder, when set, records the system's counters into Dir before
	// and after the run (RunRecorder); the run's statistics then carry
	// what the engines and the hub counted during it.
	Recorder RunRecorder
}

// Phases of a RunRecorder call.
const (
	PhaseBefore = "before"
	PhaseAfter  = "after"
)

// RunRecorder records the state of the system under test around one run,
// as counter files (EnginesBeforeFile, HubAfterFile, ...) in the run's
// folder, so a campaign can tell what each run cost the engines (their
// evictions) and what the hub did (escapes by reason) rate by rate, not
// only per arm. An ArmStack may implement it.
type RunRecorder interface {
	// RecordRun writes the counter files of phase (PhaseBefore or
	// PhaseAfter) into runDir. A counter the system does not export is
	// left out, not an error.
	RecordRun(ctx context.Context, runDir, phase string) error
}

// recordTimeout bounds a RunRecorder call after the run, which runs on a
// fresh context so an interrupted run still gets its "after" counters.
const recordTimeout = 15 * time.Second

// NewHTTPClient returns the HTTP client loadgen uses: no overall timeout
// (each request has its own), enough idle connections for every worker.
func NewHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	return &http.Client{Transport: tr}
}

// paramDuration reads a millisecond param of the workload header.
func paramDuration(w *workload.Workload, key string) time.Duration {
	v, ok := number(w.Header.Params[key])
	if !ok || v <= 0 {
		return 0
	}
	return time.Duration(v * float64(time.Millisecond))
}

// Execute replays spec.Workload and writes its run folder.
func Execute(ctx context.Context, spec RunSpec) (*RunReport, error) {
	w := spec.Workload
	c := spec.Client
	if c.Model == "" {
		c.Model = w.Header.Model
	}
	if c.SLO == 0 {
		c.SLO = paramDuration(w, "request_slo_ms")
	}
	if c.MaxWait == 0 {
		c.MaxWait = paramDuration(w, "max_wait_ms")
	}
	cfg := spec.Config
	if cfg.Timeout == 0 {
		cfg.Timeout = paramDuration(w, "client_timeout_ms")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = spec.DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = c.Clock
	}
	total := len(w.Requests)
	if cfg.MaxRequests > 0 {
		total = min(total, cfg.MaxRequests)
	}
	var stopProgress func()
	if spec.ProgressOut != nil {
		label := w.Header.Suite
		if spec.Meta.Arm != "" {
			label = spec.Meta.Arm + "/" + label
		}
		cfg.Progress = NewProgress(spec.ProgressOut, spec.ProgressTTY, label, total, spec.ProgressEvery, cfg.Clock)
		pctx, cancel := context.WithCancel(ctx)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			cfg.Progress.Run(pctx)
		}()
		stopProgress = func() { cancel(); <-finished }
	}
	send := spec.Send
	if send == nil {
		send = c.Do
	}
	if spec.Recorder != nil {
		if err := os.MkdirAll(spec.Dir, 0o750); err != nil {
			return nil, err
		}
		if err := spec.Recorder.RecordRun(ctx, spec.Dir, PhaseBefore); err != nil {
			if stopProgress != nil {
				stopProgress()
			}
			return nil, fmt.Errorf("recording the counters before the run: %w", err)
		}
	}
	out, err := NewRunner(cfg, send).Run(ctx, w)
	if stopProgress != nil {
		stopProgress()
	}
	var recErr error
	if spec.Recorder != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		if rerr := spec.Recorder.RecordRun(rctx, spec.Dir, PhaseAfter); rerr != nil {
			recErr = fmt.Errorf("recording the counters after the run: %w", rerr)
		}
		cancel()
	}
	if err != nil {
		return nil, errors.Join(err, recErr)
	}
	meta := spec.Meta
	meta.Suite, meta.Workload, meta.Fingerprint = w.Header.Suite, spec.Path, spec.Fingerprint
	meta.Seed, meta.Mode, meta.Workers, meta.Params = w.Header.Seed, w.Header.Mode, w.Header.Workers, w.Header.Params
	meta.Target, meta.URL, meta.Model, meta.Stream = c.Target, c.BaseURL, c.Model, c.Stream
	meta.Salt, meta.MaxRequests, meta.BlockTokens = cfg.Salt, cfg.MaxRequests, blockTokens(cfg.BlockTokens)
	meta.TimeoutMs, meta.DeadlineMs = cfg.Timeout.Milliseconds(), cfg.Deadline.Milliseconds()
	meta.FileRequests = len(w.Requests)
	meta.Interrupted = ctx.Err() != nil
	rep, err := WriteRun(spec.Dir, meta, out)
	if err != nil {
		return nil, fmt.Errorf("writing results to %s: %w", spec.Dir, err)
	}
	if meta.Interrupted {
		return rep, errors.Join(fmt.Errorf("interrupted (partial results in %s, not marked complete): %w", spec.Dir, context.Cause(ctx)), recErr)
	}
	return rep, recErr
}

// blockTokens is the block size a run's ceiling is counted in.
func blockTokens(n int) int {
	if n == 0 {
		return workload.DefaultBlockTokens
	}
	return n
}
