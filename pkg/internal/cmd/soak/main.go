// Command soak runs the whole stack on loopback (stack.DemoFleet: a
// gateway with embedded Olric, a hub routing with pulsar-wait-and-widen and
// last_cluster_affinity, 2 regions x 2 clusters of pylon and mock engine)
// under the mixed workload for a long time, samples every process's
// resident memory and goroutines, and judges them with package soak. make
// soak runs it for 30 minutes; it is not part of make test.
//
// Exit status: 0 when every request succeeded and every process stayed
// flat, 1 otherwise, 2 for bad flags.
package main

import (
	"bytes"
	"cmp"
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/soak"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	bin, out, report string
	duration, every  time.Duration
	seed             uint64
	bounds           soak.Bounds
	// profileEvery > 0 starts the gateway with --pprof and saves its heap
	// profile that often (and once before the load), for go tool pprof
	// -base diffs.
	profileEvery time.Duration
	// gatewayArgs are extra gateway flags, e.g. a shorter
	// --last-cluster-ttl to make a store's steady state come sooner.
	gatewayArgs string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := options{bounds: soak.DefaultBounds()}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin", "folder of the built binaries (make build)")
	fs.StringVar(&o.out, "out", "", "results folder (default results/soak-<UTC time>)")
	fs.StringVar(&o.report, "report", "", "also copy report.md here (e.g. docs/reliability/soak.md)")
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the mixed workload sends")
	fs.DurationVar(&o.bounds.Warmup, "warmup", o.bounds.Warmup, "start of the measured window")
	fs.DurationVar(&o.every, "interval", 30*time.Second, "sampling interval")
	fs.DurationVar(&o.bounds.IdleWait, "idle-wait", o.bounds.IdleWait, "pause after the load before the idle goroutine counts")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed (also salts session names)")
	fs.DurationVar(&o.profileEvery, "profile-every", 0, "save the gateway's heap profile this often into <out>/profiles (starts it with --pprof); 0: none")
	fs.StringVar(&o.gatewayArgs, "gateway-args", "", "extra gateway flags, space-separated (e.g. \"--last-cluster-ttl 2m\")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.out == "" {
		o.out = filepath.Join("results", "soak-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := soakRun(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	return 0
}

// engineCacheTokens is the mock engines' prefix-cache capacity in the
// soak. Their default (1.6M tokens) takes the mixed workload about 20
// minutes to fill, and an engine's memory grows until it is full, so the
// engines, the fixture rather than the product, were still growing after
// a 5-minute warm-up. A quarter of a million tokens filled within 2 to 4
// minutes in a 20-minute run, after which every engine stayed within
// 0.7 MiB, and still holds several times the prompts of the sessions in
// flight at once (about 17 hot sessions of up to 6,600 tokens over 4
// engines): returning turns hit the cache for 92.8 % of their prompt
// tokens in that run, 94.7 % with the full-size cache.
const engineCacheTokens = 256_000

// errNotFlat marks a run that finished but failed its verdict.
var errNotFlat = errors.New("not flat or not every request succeeded: see the report")

func soakRun(ctx context.Context, o options, stdout io.Writer) error {
	if err := os.MkdirAll(filepath.Join(o.out, "logs"), 0o750); err != nil {
		return err
	}
	f := stack.DemoFleet()
	// The layout the soak's published run used (docs/reliability/soak.md):
	// one pylon and one engine of six slots per cluster, before the demo
	// fleet grew two pylons of two engines.
	f.PylonsPerCluster, f.EnginesPerPylon, f.Slots, f.KVCapacityTokens = 1, 1, 6, 0
	lb, _ := json.Marshal(map[string]any{"models": map[string]any{f.Model: map[string]any{
		"algorithm": "pulsar-wait-and-widen", "cache_affinity_wait_ms": 300, "last_cluster_affinity": true}}})
	lbPath := filepath.Join(o.out, "lb-config.json")
	if err := os.WriteFile(lbPath, lb, 0o600); err != nil {
		return err
	}
	extra := strings.Fields(o.gatewayArgs)
	if o.profileEvery > 0 {
		extra = append(extra, "--pprof")
	}
	st, err := stack.Start(ctx, stack.Options{BinDir: o.bin, LogDir: filepath.Join(o.out, "logs"), Fleet: f,
		LBConfigPath: lbPath, Principal: "soak", ExtraArgs: map[string][]string{"gateway": extra,
			"mock-engine": {"--kv-cache-capacity-tokens", strconv.Itoa(engineCacheTokens)}}})
	if err != nil {
		return err
	}
	defer st.Stop()
	ep := st.Endpoints()
	targets := metricsURLs(ep)
	scraper := &http.Client{Timeout: 5 * time.Second}

	idleBefore, err := goroutines(ctx, scraper, targets)
	if err != nil {
		return err
	}
	wl, err := workload.Generate(workload.SuiteMixed, workload.SuiteParams{Seed: o.seed, Model: f.Model, Duration: o.duration})
	if err != nil {
		return err
	}
	path := filepath.Join(o.out, "workload.jsonl")
	fp, err := wl.WriteFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "soak: %d requests of the mixed suite over %s through %s; samples every %s into %s\n",
		len(wl.Requests), o.duration, ep.Gateway, o.every, o.out)

	started := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	var samples []soak.Sample
	var wg sync.WaitGroup
	wg.Go(func() { samples = sample(sctx, scraper, targets, started, o.every, stdout) })
	if o.profileEvery > 0 {
		wg.Go(func() {
			profile(sctx, ep.GatewayMetrics, filepath.Join(o.out, "profiles"), started, o.profileEvery, stdout)
		})
	}
	client := loadgen.NewHTTPClient()
	clk := clock.Real{}
	rep, runErr := loadgen.Execute(ctx, loadgen.RunSpec{
		Workload: wl, Path: path, Fingerprint: fp, Dir: filepath.Join(o.out, "run"),
		Client: loadgen.Client{HTTP: client, BaseURL: ep.Gateway, Target: loadgen.TargetGateway,
			APIKey: ep.APIKey, Stream: true, Clock: clk, Retries: 2, RetryBackoff: 250 * time.Millisecond},
		Config:         loadgen.Config{Clock: clk},
		Meta:           loadgen.Meta{Arm: "soak"},
		ProgressOut:    stdout,
		ProgressEvery:  time.Minute,
		DefaultTimeout: 60 * time.Second,
	})
	stopSampling()
	wg.Wait()
	if rep == nil {
		return runErr
	}
	client.CloseIdleConnections()
	select {
	case <-time.After(o.bounds.IdleWait):
	case <-ctx.Done():
		return ctx.Err()
	}
	idleAfter, err := goroutines(ctx, scraper, targets)
	if err != nil {
		return err
	}
	if o.profileEvery > 0 {
		// What the gateway's idle goroutines are, next to their count.
		url := strings.TrimSuffix(ep.GatewayMetrics, "/metrics") + "/debug/pprof/goroutine?debug=1"
		if err := fetchTo(ctx, scraper, url, filepath.Join(o.out, "profiles", "gateway-goroutines-idle.txt")); err != nil {
			fmt.Fprintf(stdout, "soak: goroutine dump: %v\n", err)
		}
	}
	if err := writeSamples(filepath.Join(o.out, "samples.csv"), samples); err != nil {
		return err
	}
	s := rep.Stats
	load := soak.Load{Suite: "mixed", Duration: o.duration, Requests: s.Requests, OK: s.OK, Failed: s.Failed,
		Aborted: s.Aborted, Retries: s.Retries, AchievedRate: s.AchievedRate, TTFTp50Ms: s.All.TTFT.P50,
		TTFTp99Ms: s.All.TTFT.P99, ReturningCacheHitPct: s.Returning.CacheHitPct}
	verdicts := soak.Judge(samples, idleBefore, idleAfter, o.bounds)
	var report bytes.Buffer
	ok := soak.WriteReport(&report, fmt.Sprintf("soak: %s of the mixed workload (seed %d), %s", o.duration, o.seed,
		started.UTC().Format("2006-01-02 15:04 UTC")), load, verdicts, o.bounds)
	for _, path := range []string{filepath.Join(o.out, "report.md"), o.report} {
		if path == "" {
			continue
		}
		if err := os.WriteFile(path, report.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a report, not a secret
			return err
		}
	}
	_, _ = stdout.Write(report.Bytes())
	if runErr != nil {
		return runErr
	}
	if !ok {
		return errNotFlat
	}
	return nil
}

// metricsURLs names every process's /metrics.
func metricsURLs(ep stack.Endpoints) map[string]string {
	out := map[string]string{"gateway": ep.GatewayMetrics, "hub": ep.HubMetrics}
	for id, u := range ep.PylonMetrics {
		out["pylon "+id] = u
	}
	for id, u := range ep.Engines {
		out["engine "+id] = u + "/metrics"
	}
	return out
}

// sample scrapes every target every interval until ctx ends. A failed
// scrape is reported and skipped: the verdict needs enough samples anyway.
func sample(ctx context.Context, c *http.Client, targets map[string]string, started time.Time, every time.Duration, log io.Writer) []soak.Sample {
	var out []soak.Sample
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		at := time.Since(started)
		for name, u := range targets {
			fams, err := promscrape.Scrape(ctx, c, u)
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(log, "soak: scrape %s: %v\n", name, err)
				}
				continue
			}
			out = append(out, soak.Sample{At: at, Process: name,
				RSSBytes: fams.Gauge("process_resident_memory_bytes"), Goroutines: fams.Gauge("go_goroutines"),
				HeapInuseBytes: fams.Gauge("go_memstats_heap_inuse_bytes"), HeapReleasedBytes: fams.Gauge("go_memstats_heap_released_bytes"),
				SysBytes: fams.Gauge("go_memstats_sys_bytes"), OlricEntries: fams.SumGauge("olric_storage_entries"),
				OlricAllocatedBytes: fams.SumGauge("olric_storage_allocated_bytes")})
		}
	}
}

// profile saves the gateway's heap profile at once and then every
// interval until ctx ends, named by the minute of the load it was taken
// at. gc=1 makes the profile follow a collection, so inuse_space is what
// is live, not what awaits the next cycle. A failed fetch is reported and
// skipped.
func profile(ctx context.Context, metricsURL, dir string, started time.Time, every time.Duration, log io.Writer) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		fmt.Fprintf(log, "soak: profiles: %v\n", err)
		return
	}
	url := strings.TrimSuffix(metricsURL, "/metrics") + "/debug/pprof/heap?gc=1"
	c := &http.Client{Timeout: 30 * time.Second}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		name := fmt.Sprintf("gateway-heap-%03.0fm.pb.gz", time.Since(started).Minutes())
		if err := fetchTo(ctx, c, url, filepath.Join(dir, name)); err != nil && ctx.Err() == nil {
			fmt.Fprintf(log, "soak: heap profile: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func fetchTo(ctx context.Context, c *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644) //nolint:gosec // G306: a profile for the operator, not a secret
}

func goroutines(ctx context.Context, c *http.Client, targets map[string]string) (map[string]float64, error) {
	out := map[string]float64{}
	for name, u := range targets {
		fams, err := promscrape.Scrape(ctx, c, u)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", name, err)
		}
		out[name] = fams.Gauge("go_goroutines")
	}
	return out, nil
}

func writeSamples(path string, samples []soak.Sample) error {
	f, err := os.Create(path) //nolint:gosec // G304: the results folder the operator named
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "seconds,process,rss_bytes,goroutines,heap_inuse_bytes,heap_released_bytes,go_sys_bytes,olric_entries,olric_allocated_bytes")
	slices.SortStableFunc(samples, func(a, b soak.Sample) int { return cmp.Compare(a.At, b.At) })
	for _, s := range samples {
		fmt.Fprintf(f, "%.0f,%s,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", s.At.Seconds(), s.Process, s.RSSBytes, s.Goroutines,
			s.HeapInuseBytes, s.HeapReleasedBytes, s.SysBytes, s.OlricEntries, s.OlricAllocatedBytes)
	}
	return f.Close()
}
