package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// rowResult is one path measured at one row in one round, as written to
// rows/<round>-<path>-<row>.json.
type rowResult struct {
	Round int    `json:"round"`
	Path  string `json:"path"`
	row
	// Order is the path's place in its round's order (from 0).
	Order      int       `json:"order"`
	Start      time.Time `json:"start"`
	Seconds    float64   `json:"seconds"`
	Requests   int       `json:"requests"`
	Errors     int       `json:"errors"`
	FirstError string    `json:"first_error,omitempty"`
	RPS        float64   `json:"req_per_s"`
	Latency    summary   `json:"latency"`
	// FirstEvent and Gap are a streamed row's time to the first event
	// and the gaps between events.
	FirstEvent *summary `json:"first_event,omitempty"`
	Gap        *summary `json:"gap,omitempty"`
	// Procs are the path's processes' counters over the row, by tier;
	// Client is this command's own (the load generator's).
	Procs  map[string]procDelta `json:"procs"`
	Client procDelta            `json:"client"`
	// LatenciesUs is every request's latency in microseconds, sorted.
	LatenciesUs []int64 `json:"latencies_us"`
}

// bench is one run: every round, then the Go benchmarks and the report.
type bench struct {
	o       options
	paths   []path
	rows    []row
	lbPath  string
	results []rowResult
	// profiled says where the profiles were taken ("" when none were).
	profiled string
	checks   []gatewayCheck
	// versions are the binaries' build_info versions, as the report
	// prints them: the commit they were built from.
	versions string
	stdout   io.Writer
}

// fleet is one cluster of one pylon in front of one mock engine whose
// every modelled cost is zero (set through extraArgs), so what is
// measured is the relaying; tokenDelayMs paces its output only when asked. The capacities are far above what two cores
// can drive: the hub never waits or refuses, and the pylon's queue
// admission is off, so no request is turned away by a lagging estimate.
func fleet(tokenDelayMs int) stack.Fleet {
	return stack.Fleet{Model: model, Slots: 256, TokenDelayMs: tokenDelayMs, Regions: []stack.Region{{Name: "local", Clusters: []stack.Cluster{
		{ID: cluster, ColdTPS: 100_000_000, WarmTPS: 100_000_000}}}}}
}

// extraArgs are the flags the bench adds to the stack's: a free engine
// (prefill at rate 0 is free) with enough output tokens; the gateway's
// rate limits on at limits no run reaches, so every request pays the
// Olric counters as in production; the profiler when asked for.
func (b *bench) extraArgs() map[string][]string {
	cfg, _ := json.Marshal(map[string]map[string]int64{model: {"requests_per_minute": 1_000_000_000, "tokens_per_minute": 1_000_000_000_000}})
	extra := map[string][]string{
		"mock-engine": {"--prefill-tokens-per-s", "0", "--cached-prefill-tokens-per-s", "0", "--num-tokens", strconv.Itoa(b.o.outTokens)},
		"gateway":     {"--model-config-json", string(cfg)},
	}
	if b.o.profile {
		for _, t := range []string{"gateway", "hub", "pylon"} {
			extra[t] = append(extra[t], "--pprof")
		}
	}
	return extra
}

// floorHops is how many relay-floor hops the chosen paths need.
func (b *bench) floorHops() int {
	n := 0
	for _, p := range b.paths {
		if k, ok := strings.CutPrefix(p.Name, "floor-"); ok {
			v, _ := strconv.Atoi(k)
			n = max(n, v)
		}
	}
	return n
}

// runRound starts a fresh stack, checks every path answers, measures
// every row of every path (paths in this round's order) and stops the
// stack.
func (b *bench) runRound(ctx context.Context, round int) error {
	st, err := stack.Start(ctx, stack.Options{BinDir: b.o.bin, LogDir: filepath.Join(b.o.out, "logs", "round-"+strconv.Itoa(round)),
		Fleet: fleet(b.o.tokenDelayMs), LBConfigPath: b.lbPath, Principal: "benchpath", FloorHops: b.floorHops(), ExtraArgs: b.extraArgs()})
	if err != nil {
		return err
	}
	defer st.Stop()
	ep := st.Endpoints()
	pids := map[string]int{}
	for _, p := range b.paths {
		for _, t := range p.Tiers {
			if pids[t], err = st.PID(childOf(t)); err != nil {
				return err
			}
		}
	}
	if err := b.check(ctx, ep); err != nil {
		return err
	}
	if round == 1 {
		vpath := filepath.Join(b.o.out, "versions.txt")
		if err := st.WriteVersions(ctx, vpath); err != nil {
			return err
		}
		if v, err := os.ReadFile(vpath); err == nil { //nolint:gosec // G304: the run's own output folder
			b.versions = binaryVersions(v)
		}
	}
	order := rotate(b.paths, round-1)
	fmt.Fprintf(b.stdout, "bench-path: round %d/%d, path order %s\n", round, b.o.rounds, strings.Join(names(order), " "))
	for _, r := range b.rows {
		for i, p := range order {
			res, err := b.measure(ctx, round, i, p, r, ep, pids)
			if err != nil {
				return fmt.Errorf("%s at %s: %w", p.Name, r, err)
			}
			b.results = append(b.results, res)
			if err := writeJSON(filepath.Join(b.o.out, "rows", fmt.Sprintf("%d-%s-%s.json", round, p.Name, r.file())), res); err != nil {
				return err
			}
			fmt.Fprintf(b.stdout, "  %-26s %-10s %6.0f req/s  p50 %6.2f ms  p99 %6.2f ms  relays %5.0f µs/req  errors %d\n",
				r, p.Name, res.RPS, res.Latency.P50, res.Latency.P99, relayCPU(res, p), res.Errors)
		}
	}
	if b.o.profile && round == 1 {
		if err := b.profile(ctx, ep); err != nil {
			return err
		}
	}
	return b.recordMetrics(ctx, round, ep)
}

// recordMetrics saves every tier's /metrics at the end of a round and
// notes the gateway counters that show its session store and rate
// limits were in the path: a run whose chain never looked a session up
// would measure less than it claims.
func (b *bench) recordMetrics(ctx context.Context, round int, ep stack.Endpoints) error {
	dir := filepath.Join(b.o.out, "metrics", "round-"+strconv.Itoa(round))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for tier, u := range map[string]string{"gateway": ep.GatewayMetrics, "hub": ep.HubMetrics, "pylon": ep.PylonMetrics[cluster],
		"engine": ep.Engines[cluster] + "/metrics"} {
		if err := fetchProfile(ctx, c, u, filepath.Join(dir, tier+".prom"), 0); err != nil {
			return fmt.Errorf("%s metrics: %w", tier, err)
		}
	}
	fams, err := promscrape.Scrape(ctx, c, ep.GatewayMetrics)
	if err != nil {
		return err
	}
	b.checks = append(b.checks, gatewayCheck{Round: round,
		Lookups:   fams.CounterByLabel("llm_api_gateway_last_cluster_lookups_total", "result"),
		Writes:    fams.CounterByLabel("llm_api_gateway_last_cluster_writes_total", "result"),
		RateLimit: fams.CounterByLabel("llm_api_gateway_rate_limit_decisions_total", "result")})
	return nil
}

// binaryVersions reads stack.WriteVersions' lines
// (`hub hub_build_info{version="abc"} 1`) as "hub abc, gateway abc, ...".
func binaryVersions(b []byte) string {
	var parts []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		_, v, ok := strings.Cut(rest, `version="`)
		v, _, _ = strings.Cut(v, `"`)
		if ok && name != "" {
			parts = append(parts, name+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// gatewayCheck is one round's gateway counters by result.
type gatewayCheck struct {
	Round                      int
	Lookups, Writes, RateLimit map[string]float64
}

// relayCPU is a result's relay CPU per request in microseconds.
func relayCPU(res rowResult, p path) float64 {
	if res.Requests == 0 {
		return 0
	}
	s := 0.0
	for _, t := range p.relays() {
		s += res.Procs[t].CPUSeconds
	}
	return s * 1e6 / float64(res.Requests)
}

func names(ps []path) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// check sends one request per path and mode at the smallest size, so a
// path that cannot answer stops the run at once with its error instead
// of after every row. A path gets three tries: the relay-floor hop cuts
// a few sequential streams short (see docs/performance/path.md), which
// the rows count as errors but must not stop the run.
func (b *bench) check(ctx context.Context, ep stack.Endpoints) error {
	for _, p := range b.paths {
		for _, stream := range []bool{false, true} {
			q := newRequester(p, row{Size: b.rows[0].Size, Clients: 1, Stream: stream}, ep, b.o.outTokens)
			client := newClient(1)
			var err error
			for range 3 {
				if _, err = oneRequest(ctx, client, loadSpec{sse: q.sse, request: q.request}, 0, 0); err == nil {
					break
				}
			}
			client.CloseIdleConnections()
			if err != nil {
				return fmt.Errorf("checking %s (stream %v): %w", p.Name, stream, err)
			}
		}
	}
	return nil
}

// measure warms p up at r, then runs the measured row with the path's
// processes sampled from /proc before and after.
func (b *bench) measure(ctx context.Context, round, order int, p path, r row, ep stack.Endpoints, pids map[string]int) (rowResult, error) {
	q := newRequester(p, r, ep, b.o.outTokens)
	client := newClient(r.Clients)
	defer client.CloseIdleConnections()
	spec := loadSpec{clients: r.Clients, duration: b.o.warmup, sse: q.sse, request: q.request}
	if w := runLoad(ctx, client, spec); w.OK == 0 {
		if err := ctx.Err(); err != nil {
			return rowResult{}, err
		}
		return rowResult{}, fmt.Errorf("warm-up: no request succeeded: %s", w.FirstError)
	}
	before, err := sampleTiers(p.Tiers, pids)
	if err != nil {
		return rowResult{}, err
	}
	self0, err := readProc("/proc", os.Getpid())
	if err != nil {
		return rowResult{}, err
	}
	start := time.Now()
	spec.duration = b.o.duration
	lr := runLoad(ctx, client, spec)
	after, err := sampleTiers(p.Tiers, pids)
	if err != nil {
		return rowResult{}, err
	}
	self1, err := readProc("/proc", os.Getpid())
	if err != nil {
		return rowResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return rowResult{}, err
	}
	res := rowResult{Round: round, Path: p.Name, row: r, Order: order, Start: start.UTC(), Seconds: lr.Elapsed.Seconds(),
		Requests: lr.OK, Errors: lr.Failed, FirstError: lr.FirstError, Latency: summarize(lr.Latencies),
		Procs: map[string]procDelta{}, Client: self1.sub(self0)}
	if lr.Elapsed > 0 {
		res.RPS = float64(lr.OK) / lr.Elapsed.Seconds()
	}
	if r.Stream {
		fe, gap := summarize(lr.FirstEvents), summarize(lr.Gaps)
		res.FirstEvent, res.Gap = &fe, &gap
	}
	for t, s := range after {
		res.Procs[t] = s.sub(before[t])
	}
	for _, d := range lr.Latencies {
		res.LatenciesUs = append(res.LatenciesUs, d.Microseconds())
	}
	return res, nil
}

// sampleTiers reads every tier's process counters.
func sampleTiers(tiers []string, pids map[string]int) (map[string]procSample, error) {
	out := map[string]procSample{}
	for _, t := range tiers {
		s, err := readProc("/proc", pids[t])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		out[t] = s
	}
	return out, nil
}

// lbConfig is the hub's lb-config: the algorithm that honours the
// gateway's last-cluster hint (pulsar-wait-and-widen with
// last_cluster_affinity), as a deployment that tracks sessions runs.
func lbConfig() []byte {
	b, _ := json.Marshal(map[string]any{"models": map[string]any{model: map[string]any{
		"algorithm": "pulsar-wait-and-widen", "last_cluster_affinity": true}}})
	return b
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644) //nolint:gosec // G306: results, not secrets
}

// run is the whole command once its flags are parsed: every round, then
// the Go benchmarks, then the report. An interrupted run still writes
// the report of the rows it measured.
func (b *bench) run(ctx context.Context) error {
	if err := os.MkdirAll(b.o.out, 0o750); err != nil {
		return err
	}
	b.lbPath = filepath.Join(b.o.out, "lb-config.json")
	if err := os.WriteFile(b.lbPath, lbConfig(), 0o600); err != nil {
		return err
	}
	m := newMeta(b.o)
	var runErr error
	for round := 1; round <= b.o.rounds && runErr == nil; round++ {
		runErr = b.runRound(ctx, round)
	}
	var benches []benchStat
	if runErr == nil && b.o.benchCount > 0 {
		fmt.Fprintf(b.stdout, "bench-path: Go benchmarks, -count %d\n", b.o.benchCount)
		benches, runErr = runGoBenches(ctx, b.o, filepath.Join(b.o.out, "gobench.txt"))
	}
	m.finish()
	if len(b.results) > 0 {
		rep := report{meta: m, paths: b.paths, rows: b.rows, cells: aggregate(b.results), benches: benches, checks: b.checks, versions: b.versions,
			profiled: b.profiled, profiles: readProfileTops(filepath.Join(b.o.out, "profiles"), b.o.topN)}
		if runErr != nil {
			rep.incomplete = runErr.Error()
		}
		var sb strings.Builder
		rep.write(&sb)
		if err := os.WriteFile(filepath.Join(b.o.out, "report.md"), []byte(sb.String()), 0o644); err != nil { //nolint:gosec // G306: a report
			return errors.Join(runErr, err)
		}
		rep.headline(b.stdout)
		fmt.Fprintf(b.stdout, "bench-path: report in %s\n", filepath.Join(b.o.out, "report.md"))
	}
	return runErr
}
