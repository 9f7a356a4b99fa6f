package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
)

// Load is what the run sends through the stack while Prometheus scrapes.
type Load struct {
	// Sessions and Turns size loadgen's sessions suite (16 clients).
	Sessions, Turns int
	// Deadline bounds the loadgen run.
	Deadline time.Duration
	// Bursts are overload bursts straight to the hub, sent at these
	// offsets from the start (admission rejections, retries, escapes).
	Bursts []time.Duration
	// BurstSize requests of BurstTokens output tokens each.
	BurstSize, BurstTokens int
}

// drive runs loadgen against the gateway and the bursts beside it, and
// returns when both are done.
func drive(ctx context.Context, bin, dir string, ep demostack.Endpoints, l Load, log io.Writer) error {
	keyFile := filepath.Join(dir, "api-key")
	if err := os.WriteFile(keyFile, []byte(ep.APIKey+"\n"), 0o600); err != nil {
		return err
	}
	wl := filepath.Join(dir, "workload.jsonl")
	loadgen := filepath.Join(bin, "loadgen")
	gen := exec.CommandContext(ctx, loadgen, "generate", "--suite", "sessions", "--model", ep.Model, //nolint:gosec // G204: our own binary
		"--sessions", strconv.Itoa(l.Sessions), "--turns", strconv.Itoa(l.Turns), "--seed", "11", "--out", wl)
	gen.Stdout, gen.Stderr = log, log
	if err := gen.Run(); err != nil {
		return fmt.Errorf("loadgen generate: %w", err)
	}
	c := &http.Client{Timeout: 2 * time.Minute}
	if err := ep.Errors(ctx, c); err != nil {
		return err
	}
	burstErr := make(chan error, 1)
	start := time.Now()
	go func() {
		var first error
		for i, at := range l.Bursts {
			select {
			case <-ctx.Done():
				burstErr <- ctx.Err()
				return
			case <-time.After(time.Until(start.Add(at))):
			}
			counts, err := ep.Burst(ctx, c, strconv.Itoa(i), l.BurstSize, l.BurstTokens)
			fmt.Fprintf(log, "burst %d at +%s: %v\n", i+1, at, counts)
			if err == nil {
				// The error panels draw rates: a few errors per burst show.
				err = ep.Errors(ctx, c)
			}
			if err != nil && first == nil {
				first = err
			}
		}
		burstErr <- first
	}()
	run := exec.CommandContext(ctx, loadgen, "run", "--workload", wl, "--target", "gateway", "--url", ep.Gateway, //nolint:gosec // G204: our own binary
		"--api-key-file", keyFile, "--out", filepath.Join(dir, "loadgen"), "--deadline", l.Deadline.String(),
		"--retries", "2", "--progress-interval", "15s")
	run.Stdout, run.Stderr = log, log
	runErr := run.Run()
	if err := <-burstErr; err != nil {
		return fmt.Errorf("overload bursts: %w", err)
	}
	if runErr != nil {
		return fmt.Errorf("loadgen run: %w", runErr)
	}
	return nil
}
