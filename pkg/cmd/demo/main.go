// Command demo is what `make demo` runs: it starts the whole stack on
// loopback (a gateway with embedded Olric, a hub, and 2 regions x 2
// clusters, each two pylons of two mock engines), replays a bounded multi-turn
// workload through the gateway with a progress bar, prints a summary
// (requests, errors, TTFT, cache hits per session class, the hub's session
// states, share per region and cluster, sessions that escaped their
// cluster and followed it) and stops everything it started, also on
// Ctrl-C. --check turns the summary into pass/fail for `make e2e`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/workload"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const help = `demo: start the whole stack on loopback, drive a multi-turn workload
through the gateway and summarise what the routing did.

The stack: a gateway (API key auth, embedded Olric, last-cluster tracking), a
hub (lb-config with the model on --algorithm) and 2 regions x 2 clusters, each
two pylons of two mock engines with the cluster's prefill rates; the far region has a
larger RTT and TTFT. The workload is pkg/workload's sessions suite: multi-turn
sessions named by prompt_cache_key, Responses conversation ids or
x-multi-turn-session-id, plus anonymous requests. Child logs, the lb-config,
the workload and the loadgen run (report.md, run.json, requests.jsonl, SVG
plots) go to a new folder under --results-dir.

--check (make e2e) uses a smaller workload and exits 1 unless:
  - every request succeeded;
  - later turns hit the engines' prefix cache for >= 70 % of their prompt
    tokens (about 90 % when sessions stay on their cluster; power-of-n and
    random, which ignore sessions, score about 40 %);
  - each region served at least one request and every response named its
    cluster (x-mock-engine-id through the gateway);
  - with an algorithm that classifies sessions, the hub classified >= 80 %
    of later turns as returning, i.e. they arrived with the gateway's
    last-cluster hint (a broken hint path gives 0).

DEMO_KEEP=1 (--keep) leaves the stack running after the summary and prints its
URLs; Ctrl-C (or SIGTERM) stops every process the demo started.`

// options are the parsed flags.
type options struct {
	binDir, resultsDir, algorithm string
	check, keep, queueAdmission   bool
	prefixAffinity                bool
	sessions, turns, workers      int
	seed                          uint64
	waitMs                        int
	deadline                      time.Duration
}

func parseOptions(args []string, getenv func(string) string, out io.Writer) (*options, error) {
	var o options
	fs := cli.New("demo", help, out)
	fs.String(&o.binDir, "bin-dir", "DEMO_BIN_DIR", "bin", "directory holding the built binaries")
	fs.String(&o.resultsDir, "results-dir", "DEMO_RESULTS_DIR", "results", "parent of the run folder (logs, lb-config, workload, loadgen results)")
	fs.Bool(&o.check, "check", "DEMO_CHECK", false, "smaller workload; exit 1 unless the checks above pass (make e2e)")
	fs.Bool(&o.keep, "keep", "DEMO_KEEP", false, "leave the stack running after the summary until Ctrl-C and print its URLs")
	fs.Int(&o.sessions, "sessions", "DEMO_SESSIONS", 0, "multi-turn sessions to run (0 = 224, about a minute on 2 cores, or 48 with --check)")
	fs.Int(&o.turns, "turns", "DEMO_TURNS", 0, "turns per session (0 = 6, or 4 with --check)")
	fs.Int(&o.workers, "workers", "DEMO_WORKERS", 16, "closed-loop clients sending at once")
	fs.Uint64(&o.seed, "seed", "DEMO_SEED", 1, "workload seed")
	fs.String(&o.algorithm, "algorithm", "DEMO_ALGORITHM", "pulsar-wait-and-widen", "the hub's algorithm for the model (e.g. power-of-n to see routing without session affinity)")
	fs.Int(&o.waitMs, "affinity-wait-ms", "DEMO_AFFINITY_WAIT_MS", 200, "cache_affinity_wait_ms of the (pulsar-)wait-and-widen algorithms")
	fs.Bool(&o.prefixAffinity, "prefix-affinity", "DEMO_PREFIX_AFFINITY", false,
		"prefix_affinity on the (pulsar-)wait-and-widen algorithms: the prompt's prefix holders lead the affinity order (the routing page then shows the prefix index)")
	fs.Bool(&o.queueAdmission, "pylon-queue-admission", "DEMO_PYLON_QUEUE_ADMISSION", true,
		"the pylons' queue admission (429 queue_estimate_mismatch when their queue is longer than the hub expected)")
	fs.Duration(&o.deadline, "deadline", "DEMO_DEADLINE", 0, "bound of the workload; requests still running are aborted (0 = 3m, or 30s with --check)")
	if err := fs.Parse(args, getenv); err != nil {
		return nil, err
	}
	switch {
	case o.sessions < 0 || o.turns < 0 || o.workers < 1 || o.waitMs < 0 || o.deadline < 0:
		return nil, errors.New("--sessions, --turns, --affinity-wait-ms and --deadline must be >= 0, --workers >= 1")
	case o.check:
		o.sessions, o.turns, o.deadline = orDefault(o.sessions, 48), orDefault(o.turns, 4), orDefault(o.deadline, 30*time.Second)
	default:
		o.sessions, o.turns, o.deadline = orDefault(o.sessions, 224), orDefault(o.turns, 6), orDefault(o.deadline, 3*time.Minute)
	}
	return &o, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		if cli.IsHelp(err) {
			return exitOK
		}
		fmt.Fprintln(stderr, "demo:", err)
		return exitUsage
	}
	fail := func(err error) int {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "demo: interrupted; stopping everything it started")
			return exitInterrupted
		}
		fmt.Fprintln(stderr, "demo:", err)
		return exitFailed
	}
	started := time.Now()
	f := stack.DemoFleet()
	f.QueueAdmission = o.queueAdmission
	lb, err := lbConfig(f.Model, o.algorithm, o.waitMs, o.prefixAffinity)
	if err != nil {
		return fail(err)
	}
	dir := filepath.Join(o.resultsDir, "demo-"+started.UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return fail(err)
	}
	lbPath := filepath.Join(dir, "lb-config.json")
	if err := os.WriteFile(lbPath, lb, 0o600); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "stargate demo: starting a gateway, a hub and %d clusters on loopback (logs in %s)\n", len(f.ClusterIDs()), filepath.Join(dir, "logs"))
	// Credentials stay out of the results folder, in a private temporary
	// one the stack removes once every child has stopped.
	st, err := stack.Start(ctx, stack.Options{BinDir: o.binDir, LogDir: filepath.Join(dir, "logs"), Fleet: f,
		LBConfigPath: lbPath, Principal: "demo"})
	if err != nil {
		return fail(err)
	}
	defer st.Stop()
	ep := st.Endpoints()
	wl, err := workload.Generate(workload.SuiteSessions, workload.SuiteParams{Seed: o.seed, Model: f.Model,
		Workers: o.workers, Sessions: o.sessions, Turns: o.turns})
	if err != nil {
		return fail(err)
	}
	printBanner(stdout, o, f, ep, wl, time.Since(started))

	rep, runErr := drive(ctx, o, ep, wl, dir, stderr)
	if rep == nil {
		return fail(runErr)
	}
	var sel selections
	var selErr error
	classifies := affinityAlgorithms[o.algorithm]
	if classifies {
		// The stack is still up after a Ctrl-C: read it anyway, briefly.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		sel, selErr = scrapeSelections(sctx, ep.HubMetrics, f.Model)
		cancel()
	}
	sum := newSummary(rep.Stats, sel, selErr, f)
	fmt.Fprintln(stdout)
	if runErr != nil {
		fmt.Fprintln(stdout, "interrupted: the summary covers the requests sent so far")
	}
	sum.write(stdout)
	fmt.Fprintf(stdout, "\nresults    %s (report.md, run.json, requests.jsonl, ttft-cdf.svg, cluster-share.svg, logs/)\n", dir)
	fmt.Fprintf(stdout, "total      %.1f s including startup\n", time.Since(started).Seconds())
	if runErr != nil {
		return fail(runErr)
	}
	code := exitOK
	if o.check {
		if problems := sum.problems(classifies); len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(stderr, "demo: check failed:", p)
			}
			code = exitFailed
		} else {
			fmt.Fprintln(stdout, "check      passed")
		}
	}
	if o.keep {
		printKeep(stdout, ep, f.Model)
		<-ctx.Done()
		fmt.Fprintln(stdout, "\nstopping everything the demo started")
	}
	return code
}

// clientRetries is how often a request refused before its first byte
// (429, 502, 503) is sent again, as OpenAI's client libraries do by
// default. The summary counts them.
const clientRetries = 2

// drive replays the workload through the gateway, streaming, with a
// progress bar on a terminal and a line every few seconds otherwise. It
// returns the run's report (partial when interrupted, with an error).
func drive(ctx context.Context, o *options, ep stack.Endpoints, wl *workload.Workload, dir string, progress io.Writer) (*loadgen.RunReport, error) {
	path := filepath.Join(dir, "workload.jsonl")
	fp, err := wl.WriteFile(path)
	if err != nil {
		return nil, err
	}
	clk := clock.Real{}
	every := 10 * time.Second
	if o.check {
		every = 5 * time.Second
	}
	return loadgen.Execute(ctx, loadgen.RunSpec{
		Workload: wl, Path: path, Fingerprint: fp, Dir: dir,
		Client: loadgen.Client{HTTP: loadgen.NewHTTPClient(), BaseURL: ep.Gateway, Target: loadgen.TargetGateway,
			APIKey: ep.APIKey, Stream: true, Clock: clk, Retries: clientRetries, RetryBackoff: 250 * time.Millisecond},
		Config:         loadgen.Config{Deadline: o.deadline, Clock: clk},
		Meta:           loadgen.Meta{Arm: o.algorithm, Loadgen: loadgen.ReadBuildInfo(version)},
		ProgressOut:    progress,
		ProgressTTY:    loadgen.IsTerminal(progress),
		ProgressEvery:  every,
		DefaultTimeout: 60 * time.Second,
	})
}

// printBanner says what runs where and what the workload is.
func printBanner(w io.Writer, o *options, f stack.Fleet, ep stack.Endpoints, wl *workload.Workload, startup time.Duration) {
	fmt.Fprintf(w, "stack up in %.1f s: gateway %s/v1 -> hub %s -> %d clusters\n", startup.Seconds(), ep.Gateway, ep.Hub, len(f.ClusterIDs()))
	alg := o.algorithm
	if affinityAlgorithms[alg] {
		alg += fmt.Sprintf(" (cache_affinity_wait_ms %d, last_cluster_affinity on", o.waitMs)
		if o.prefixAffinity {
			alg += ", prefix_affinity on"
		}
		alg += ")"
	}
	fmt.Fprintf(w, "  hub routes %s with %s\n", f.Model, alg)
	for _, line := range f.Describe() {
		fmt.Fprintln(w, "  "+line)
	}
	fmt.Fprintf(w, "  every engine runs %d requests at once; prefill rates are cold/cached prompt tokens per second\n", f.Slots)
	sources := map[string]map[string]bool{}
	requests := map[string]int{}
	for _, r := range wl.Requests {
		requests[r.Source]++
		if r.Session != "" {
			if sources[r.Source] == nil {
				sources[r.Source] = map[string]bool{}
			}
			sources[r.Source][r.Session] = true
		}
	}
	fmt.Fprintf(w, "workload: %d requests, %s suite (seed %d) through the gateway, streamed, %d clients at once:\n",
		len(wl.Requests), wl.Header.Suite, wl.Header.Seed, wl.Header.Workers)
	fmt.Fprintf(w, "  %d sessions of %d turns: %d by prompt_cache_key, %d by Responses conversation id, %d by x-multi-turn-session-id; %d anonymous requests\n",
		o.sessions, o.turns, len(sources[workload.SourcePromptCacheKey]), len(sources[workload.SourceConversation]),
		len(sources[workload.SourceHeader]), requests[workload.SourceNone])
}

// printKeep lists the running stack's URLs.
func printKeep(w io.Writer, ep stack.Endpoints, model string) {
	fmt.Fprintf(w, "\nDEMO_KEEP: the stack stays up until Ctrl-C\n")
	fmt.Fprintf(w, "  gateway        %s/v1  (API key %s, in %s)\n", ep.Gateway, ep.APIKey, ep.APIKeysFile)
	fmt.Fprintf(w, "  hub            %s  (gateway token %s; routing state %s)\n", ep.Hub, ep.GatewayToken, ep.HubState)
	fmt.Fprintf(w, "  metrics        gateway %s  hub %s\n", ep.GatewayMetrics, ep.HubMetrics)
	for _, id := range slices.Sorted(maps.Keys(ep.PylonMetrics)) {
		fmt.Fprintf(w, "                 pylon %s %s\n", id, ep.PylonMetrics[id])
	}
	fmt.Fprintf(w, "  try            curl -sN %s/v1/chat/completions -H 'Authorization: Bearer %s' \\\n", ep.Gateway, ep.APIKey)
	fmt.Fprintf(w, "                   -d '{\"model\":\"%s\",\"stream\":true,\"prompt_cache_key\":\"s1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n", model)
}
