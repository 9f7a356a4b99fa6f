// Command overload drives the whole stack on loopback past its capacity
// and reports, per arm, how new and returning sessions fare: success rate
// and time to first token of each class, the hub's refusals by reason and
// every process's peak goroutines and memory. It first measures the
// fleet's capacity (a closed-loop sessions run with four clients per
// engine slot) unless -rate is given, then offers -factor times that
// open-loop (the capacity suite: 3-turn sessions 2 s apart, 10 %
// anonymous requests) to a fresh stack per arm. make overload runs it;
// docs/reliability.md#overload-and-shedding keeps the result.
//
// The fleet is the demo's, with 2 slots per engine and 20 ms per output
// token, so the engines, not this machine's two cores, are what runs out.
//
// Exit status: 0 when every run finished, 1 otherwise, 2 for bad flags.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/internal/overload"
	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// arms are the hub flags each arm runs with: "policy" is the hub's
// defaults (a bounded waiting room, returning sessions first); "today" is
// the hub before the waiting room (no bound, no priority).
var arms = map[string][]string{
	"policy": nil,
	"today":  {"--proxy-max-waiting-requests", "0", "--proxy-returning-session-priority=false"},
}

type options struct {
	bin, out, report string
	rate, factor     float64
	duration         time.Duration
	seed             uint64
	arms             []string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	var armList string
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin", "folder of the built binaries (make build)")
	fs.StringVar(&o.out, "out", "", "results folder (default results/overload-<UTC time>)")
	fs.StringVar(&o.report, "report", "", "also copy report.md here")
	fs.Float64Var(&o.rate, "rate", 0, "offered rate in req/s; 0 measures the capacity first and offers -factor times it")
	fs.Float64Var(&o.factor, "factor", 2, "multiple of the measured capacity to offer")
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "open-loop send window per arm")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed (also salts session names)")
	fs.StringVar(&armList, "arms", "policy,today", "arms to run in this order: policy (the hub's defaults), today (no waiting room)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, a := range strings.Split(armList, ",") {
		if _, ok := arms[a]; !ok {
			fmt.Fprintf(stderr, "overload: -arms: unknown arm %q (want policy or today)\n", a)
			return 2
		}
		o.arms = append(o.arms, a)
	}
	if o.factor <= 0 || o.rate < 0 || o.duration <= 0 {
		fmt.Fprintln(stderr, "overload: -factor and -duration must be > 0, -rate >= 0")
		return 2
	}
	if o.out == "" {
		o.out = filepath.Join("results", "overload-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := overloadRun(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "overload:", err)
		return 1
	}
	return 0
}

// fleet is the demo fleet with fewer, slower slots: its capacity is a
// few req/s, so twice it stays far below what the processes can relay.
// It keeps one pylon and one engine per cluster, the layout the published
// overload numbers were measured on.
func fleet() stack.Fleet {
	f := stack.DemoFleet()
	f.PylonsPerCluster, f.EnginesPerPylon, f.KVCapacityTokens = 1, 1, 0
	f.Slots, f.TokenDelayMs = 2, 20
	return f
}

func overloadRun(ctx context.Context, o options, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o750); err != nil {
		return err
	}
	f := fleet()
	lb, _ := json.Marshal(map[string]any{"models": map[string]any{f.Model: map[string]any{
		"algorithm": "pulsar-wait-and-widen", "cache_affinity_wait_ms": 300, "last_cluster_affinity": true}}})
	lbPath := filepath.Join(o.out, "lb-config.json")
	if err := os.WriteFile(lbPath, lb, 0o600); err != nil {
		return err
	}
	capacity := 0.0
	rate := o.rate
	if rate == 0 {
		var err error
		if capacity, err = measureCapacity(ctx, o, f, lbPath, stdout); err != nil {
			return fmt.Errorf("measuring capacity: %w", err)
		}
		rate = o.factor * capacity
		fmt.Fprintf(stdout, "overload: capacity %.2f req/s; offering %.2f req/s\n", capacity, rate)
	}
	var runs []overload.Run
	for _, arm := range o.arms {
		r, err := armRun(ctx, o, f, lbPath, arm, rate, stdout)
		if err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
		runs = append(runs, r)
	}
	var report bytes.Buffer
	overload.WriteReport(&report, fmt.Sprintf("overload: %s per arm at %.1f req/s (seed %d), %s", o.duration, rate, o.seed,
		time.Now().UTC().Format("2006-01-02 15:04 UTC")), capacity, runs)
	for _, path := range []string{filepath.Join(o.out, "report.md"), o.report} {
		if path == "" {
			continue
		}
		if err := os.WriteFile(path, report.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a report, not a secret
			return err
		}
	}
	_, err := stdout.Write(report.Bytes())
	return err
}

// measureCapacity runs the sessions suite closed-loop with four clients
// per engine slot on a stack of the "today" arm and returns its
// successful requests per second.
func measureCapacity(ctx context.Context, o options, f stack.Fleet, lbPath string, stdout io.Writer) (float64, error) {
	dir := filepath.Join(o.out, "capacity")
	slots := f.Slots * len(f.ClusterIDs())
	wl, err := workload.Generate(workload.SuiteSessions, workload.SuiteParams{Seed: o.seed + 1000, Model: f.Model,
		Workers: 4 * slots, Sessions: 12 * slots, Turns: 3, OutputTokens: 32})
	if err != nil {
		return 0, err
	}
	rep, _, err := execute(ctx, o, f, lbPath, "today", dir, wl, stdout)
	if err != nil {
		return 0, err
	}
	if rep.Stats.ThroughputRPS <= 0 {
		return 0, errors.New("no request succeeded")
	}
	return rep.Stats.ThroughputRPS, nil
}

func armRun(ctx context.Context, o options, f stack.Fleet, lbPath, arm string, rate float64, stdout io.Writer) (overload.Run, error) {
	wl, err := workload.Generate(workload.SuiteCapacity, workload.SuiteParams{Seed: o.seed, Model: f.Model, Rate: rate,
		Duration: o.duration, Turns: 3, OutputTokens: 32})
	if err != nil {
		return overload.Run{}, err
	}
	rep, peaks, err := execute(ctx, o, f, lbPath, arm, filepath.Join(o.out, arm), wl, stdout)
	if err != nil {
		return overload.Run{}, err
	}
	recs, err := loadgen.ReadRecords(filepath.Join(o.out, arm, "run"))
	if err != nil {
		return overload.Run{}, err
	}
	r := overload.FromRecords(arm, rate, &rep.Stats, recs)
	r.Peaks = peaks.Peaks
	r.Refusals = peaks.Refusals
	return r, nil
}

// execute starts a fresh stack for arm, runs wl through its gateway
// (streamed, no client retries, a 60 s client timeout) while sampling
// every process every 2 s, and returns the report with the peaks and the
// hub's refusals by reason.
func execute(ctx context.Context, o options, f stack.Fleet, lbPath, arm, dir string, wl *workload.Workload, stdout io.Writer) (*loadgen.RunReport, overload.Run, error) {
	var peaks overload.Run
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return nil, peaks, err
	}
	st, err := stack.Start(ctx, stack.Options{BinDir: o.bin, LogDir: filepath.Join(dir, "logs"), Fleet: f,
		LBConfigPath: lbPath, Principal: "overload", ExtraArgs: map[string][]string{"hub": arms[arm]}})
	if err != nil {
		return nil, peaks, err
	}
	defer st.Stop()
	ep := st.Endpoints()
	path := filepath.Join(dir, "workload.jsonl")
	fp, err := wl.WriteFile(path)
	if err != nil {
		return nil, peaks, err
	}
	fmt.Fprintf(stdout, "overload: %s: %d requests (%s) through %s\n", arm, len(wl.Requests), wl.Header.Suite, ep.Gateway)
	targets := map[string]string{"gateway": ep.GatewayMetrics, "hub": ep.HubMetrics}
	for id, u := range ep.PylonMetrics {
		targets["pylon "+id] = u
	}
	scraper := &http.Client{Timeout: 5 * time.Second}
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			for name, u := range targets {
				if fams, err := promscrape.Scrape(sctx, scraper, u); err == nil {
					mu.Lock()
					peaks.Observe(name, fams.Gauge("go_goroutines"), fams.Gauge("process_resident_memory_bytes"))
					mu.Unlock()
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	})
	clk := clock.Real{}
	rep, runErr := loadgen.Execute(ctx, loadgen.RunSpec{
		Workload: wl, Path: path, Fingerprint: fp, Dir: filepath.Join(dir, "run"),
		Client: loadgen.Client{HTTP: loadgen.NewHTTPClient(), BaseURL: ep.Gateway, Target: loadgen.TargetGateway,
			APIKey: ep.APIKey, Stream: true, Clock: clk},
		Config:         loadgen.Config{Clock: clk},
		Meta:           loadgen.Meta{Arm: arm},
		ProgressOut:    stdout,
		ProgressEvery:  30 * time.Second,
		DefaultTimeout: 60 * time.Second,
	})
	stopSampling()
	wg.Wait()
	if rep == nil {
		return nil, peaks, runErr
	}
	if fams, err := promscrape.Scrape(ctx, scraper, ep.HubMetrics); err == nil {
		peaks.Refusals = fams.CounterByLabel("stargate_admission_rejections_total", "reason")
	}
	return rep, peaks, nil
}
