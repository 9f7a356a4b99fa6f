package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// cellKey is one path at one row.
type cellKey struct {
	path string
	row  row
}

// cell is one path at one row over every round: each figure is the
// median over the rounds of that round's figure.
type cell struct {
	rounds, requests, errors int
	rps, p50, p99            float64
	// first* and gap* are streamed rows' first event and gaps, ms.
	firstP50, firstP99, gapP50, gapP99 float64
	// cpu (µs), sys (read/write-class syscalls) and sw (context
	// switches) per request, by tier.
	cpu, sys, sw map[string]float64
}

// aggregate takes, per path and row, the median over rounds of each
// figure. Rounds in which no request succeeded add their errors only.
func aggregate(results []rowResult) map[cellKey]*cell {
	type acc struct {
		c                                                 cell
		rps, p50, p99, firstP50, firstP99, gapP50, gapP99 []float64
		cpu, sys, sw                                      map[string][]float64
	}
	accs := map[cellKey]*acc{}
	var keys []cellKey
	for _, r := range results {
		k := cellKey{r.Path, r.row}
		a := accs[k]
		if a == nil {
			a = &acc{cpu: map[string][]float64{}, sys: map[string][]float64{}, sw: map[string][]float64{}}
			accs[k] = a
			keys = append(keys, k)
		}
		a.c.errors += r.Errors
		if r.Requests == 0 {
			continue
		}
		a.c.rounds++
		a.c.requests += r.Requests
		a.rps, a.p50, a.p99 = append(a.rps, r.RPS), append(a.p50, r.Latency.P50), append(a.p99, r.Latency.P99)
		if r.FirstEvent != nil && r.Gap != nil {
			a.firstP50, a.firstP99 = append(a.firstP50, r.FirstEvent.P50), append(a.firstP99, r.FirstEvent.P99)
			a.gapP50, a.gapP99 = append(a.gapP50, r.Gap.P50), append(a.gapP99, r.Gap.P99)
		}
		n := float64(r.Requests)
		for t, d := range r.Procs {
			a.cpu[t] = append(a.cpu[t], d.CPUSeconds*1e6/n)
			a.sys[t] = append(a.sys[t], float64(d.syscalls())/n)
			a.sw[t] = append(a.sw[t], float64(d.switches())/n)
		}
	}
	out := map[cellKey]*cell{}
	for _, k := range keys {
		a := accs[k]
		c := a.c
		c.rps, c.p50, c.p99 = median(a.rps), median(a.p50), median(a.p99)
		c.firstP50, c.firstP99, c.gapP50, c.gapP99 = median(a.firstP50), median(a.firstP99), median(a.gapP50), median(a.gapP99)
		c.cpu, c.sys, c.sw = medians3(a.cpu), medians3(a.sys), medians3(a.sw)
		out[k] = &c
	}
	return out
}

func medians3(m map[string][]float64) map[string]float64 {
	out := map[string]float64{}
	for k, xs := range m {
		out[k] = median(xs)
	}
	return out
}

// sum is the total over tiers of m.
func sum(m map[string]float64, tiers []string) float64 {
	s := 0.0
	for _, t := range tiers {
		v, ok := m[t]
		if !ok {
			return math.NaN()
		}
		s += v
	}
	return s
}

// ratios are the figures the targets are stated in, for one row:
// each tier's CPU per request against one relay-floor hop's, and the
// chain's added latency against one hop's. NaN where a path is missing.
type ratios struct {
	// Hub, Pylon and Gateway are each tier's CPU per request in the
	// chain (no session key) over one floor hop's; GatewayKey with a key.
	Hub, Pylon, Gateway, GatewayKey float64
	// Chain and ChainKey are gateway+hub+pylon CPU over one floor hop's.
	Chain, ChainKey float64
	// Added and AddedKey are the chain's added p50 over one floor hop's.
	Added, AddedKey float64
	// SpineTwoFloors is hub+pylon CPU (the spine path) over two floor
	// hops' at the same body size, so per request is also per KiB.
	SpineTwoFloors float64
	// First and FirstKey are the chain's added first-event p50 over one
	// floor hop's (streamed rows).
	First, FirstKey float64
}

func ratiosOf(cells map[cellKey]*cell, r row) ratios {
	get := func(p string) *cell {
		if c := cells[cellKey{p, r}]; c != nil && c.rounds > 0 {
			return c
		}
		return &cell{p50: math.NaN(), firstP50: math.NaN(), cpu: map[string]float64{}}
	}
	direct, f1, f2, spine, chain, key := get("direct"), get("floor-1"), get("floor-2"), get("spine"), get("chain"), get("chain-key")
	hop := sum(f1.cpu, []string{"floor-1"})
	tiers := []string{"gateway", "hub", "pylon"}
	added := func(c *cell) float64 { return (c.p50 - direct.p50) / (f1.p50 - direct.p50) }
	first := func(c *cell) float64 {
		if !r.Stream {
			return math.NaN()
		}
		return (c.firstP50 - direct.firstP50) / (f1.firstP50 - direct.firstP50)
	}
	return ratios{
		Hub: sum(chain.cpu, []string{"hub"}) / hop, Pylon: sum(chain.cpu, []string{"pylon"}) / hop,
		Gateway: sum(chain.cpu, []string{"gateway"}) / hop, GatewayKey: sum(key.cpu, []string{"gateway"}) / hop,
		Chain: sum(chain.cpu, tiers) / hop, ChainKey: sum(key.cpu, tiers) / hop,
		Added: added(chain), AddedKey: added(key),
		SpineTwoFloors: sum(spine.cpu, []string{"hub", "pylon"}) / sum(f2.cpu, []string{"floor-2", "floor-1"}),
		First:          first(chain), FirstKey: first(key),
	}
}

// report is the markdown report of a run.
type report struct {
	meta       meta
	paths      []path
	rows       []row
	cells      map[cellKey]*cell
	benches    []benchStat
	profiled   string
	profiles   []profileTop
	checks     []gatewayCheck
	versions   string
	incomplete string
}

// num prints a figure with the given decimals, or "–" when it is not a
// number (a path or row that was not measured, a ratio over zero).
func num(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}

func (rep *report) write(w io.Writer) {
	m := rep.meta
	fmt.Fprintf(w, "# bench-path: %s\n\n", m.Started.Format("2006-01-02 15:04 UTC"))
	if rep.incomplete != "" {
		fmt.Fprintf(w, "**Incomplete run** (%s): the tables hold the rows measured before it stopped.\n\n", rep.incomplete)
	}
	dirty := ""
	if m.Dirty {
		dirty = " (with uncommitted changes)"
	}
	tree := "`" + m.Commit + "`" + dirty
	if m.Commit == "" {
		tree = "not a git checkout"
	}
	fmt.Fprintf(w, "- command: `%s`\n- source tree: %s; binaries' build_info versions: %s\n", m.Command, tree, rep.versions)
	fmt.Fprintf(w, "- machine: %d CPUs, %s, Linux %s, %s; load average %s at the start, %s at the end\n",
		m.CPUs, m.CPUModel, m.Kernel, m.GoVersion, m.LoadStart, m.LoadEnd)
	pace := "all at once"
	if m.o.tokenDelayMs > 0 {
		pace = fmt.Sprintf("%d ms apart", m.o.tokenDelayMs)
	}
	fmt.Fprintf(w, "- %d round(s), each on fresh processes with the path order rotated by one; per path and row %s of warm-up, then %s measured; %d output tokens per answer, %s; %s\n\n",
		m.o.rounds, m.o.warmup, m.o.duration, m.o.outTokens, pace, m.Finished.Sub(m.Started).Round(1e9))
	fmt.Fprintln(w, "Every figure is the median over rounds. Latency is from sending the request to the end of the answer; "+
		"\"added\" is the path's figure minus engine direct's in the same row. CPU is utime+stime from /proc/<pid>/stat over the row "+
		"divided by the requests served; syscalls are /proc/<pid>/io syscr+syscw (read- and write-class calls only: epoll, futex and "+
		"the like are not counted); switches are voluntary and involuntary context switches of the process's threads. "+
		"Relays are every process on the path but the engine. hub + pylon is always asked to stream (the pylon refuses an unstreamed chat; "+
		"the gateway always streams from the hub), so in non-streaming rows it and the chain read an engine SSE answer where the other paths read JSON.")
	fmt.Fprintln(w)
	rep.writeChecks(w)
	rep.writeRatios(w)
	for _, r := range rep.rows {
		rep.writeRow(w, r)
	}
	rep.writeBenches(w)
	rep.writeProfiles(w)
}

// writeChecks shows, per round, that the chain's gateway looked sessions
// up in its store, wrote their clusters and ran its rate limits: its
// counters by result at the end of the round (metrics/ holds every tier's).
func (rep *report) writeChecks(w io.Writer) {
	if len(rep.checks) == 0 {
		return
	}
	fmt.Fprintln(w, "The gateway's counters at the end of each round, by result: its session store and rate limits were in the chain's path.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| round | gateway last-cluster lookups | writes | rate-limit decisions |")
	fmt.Fprintln(w, "| ---: | --- | --- | --- |")
	for _, c := range rep.checks {
		fmt.Fprintf(w, "| %d | %s | %s | %s |\n", c.Round, byResult(c.Lookups), byResult(c.Writes), byResult(c.RateLimit))
	}
	fmt.Fprintln(w)
}

// byResult prints the non-zero counts of a counter by result, sorted.
func byResult(m map[string]float64) string {
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeRatios is the table of the ratios, one line per row.
func (rep *report) writeRatios(w io.Writer) {
	fmt.Fprintln(w, "## Ratios against one relay-floor hop")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU per request of each chain tier (no session key; gateway also with one) over one relay-floor hop's; "+
		"the whole chain's (gateway + hub + pylon); the chain's added p50 over one hop's; hub + pylon (alone) over two hops' CPU "+
		"at the same size (so also per KiB); streamed rows: the chain's added first-event p50 over one hop's.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| row | hub | pylon | gateway | gateway, key | chain | chain, key | added p50 chain | added p50 chain, key | hub+pylon / 2 hops | first event chain | first event chain, key |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rep.rows {
		x := ratiosOf(rep.cells, r)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r,
			num(x.Hub, 2), num(x.Pylon, 2), num(x.Gateway, 2), num(x.GatewayKey, 2), num(x.Chain, 2), num(x.ChainKey, 2),
			num(x.Added, 1), num(x.AddedKey, 1), num(x.SpineTwoFloors, 2), num(x.First, 1), num(x.FirstKey, 1))
	}
	fmt.Fprintln(w)
}

// perTier prints a per-request figure of each tier: "hub 120 · pylon 95".
func perTier(m map[string]float64, tiers []string, decimals int) string {
	parts := make([]string, 0, len(tiers))
	for _, t := range tiers {
		parts = append(parts, t+" "+num(valueOr(m, t), decimals))
	}
	return strings.Join(parts, " · ")
}

func valueOr(m map[string]float64, k string) float64 {
	if v, ok := m[k]; ok {
		return v
	}
	return math.NaN()
}

// writeRow is one row's table: a line per path.
func (rep *report) writeRow(w io.Writer, r row) {
	fmt.Fprintf(w, "## %s\n\n", r)
	head := "| path | req/s | p50 ms | p99 ms | added p50 / p99 ms | p99/p50 | relays CPU µs/req | per tier | engine CPU µs/req | relays syscalls/req | per tier | relays switches/req |"
	rule := "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |"
	if r.Stream {
		head += " first event p50 / p99 ms | added first event p50 ms | gap p50 / p99 ms |"
		rule += " ---: | ---: | ---: |"
	}
	fmt.Fprintln(w, head+" errors |")
	fmt.Fprintln(w, rule+" ---: |")
	direct := rep.cells[cellKey{"direct", r}]
	for _, p := range rep.paths {
		c := rep.cells[cellKey{p.Name, r}]
		if c == nil {
			continue
		}
		if c.rounds == 0 {
			fmt.Fprintf(w, "| %s | no request succeeded |%s %d |\n", p.Label, strings.Repeat(" |", 10), c.errors)
			continue
		}
		added := "–"
		if direct != nil && direct.rounds > 0 && p.Name != "direct" {
			added = num(c.p50-direct.p50, 2) + " / " + num(c.p99-direct.p99, 2)
		}
		relays := p.relays()
		relayCPU, relaySys, relaySw, cpuTiers, sysTiers := "–", "–", "–", "–", "–"
		if len(relays) > 0 {
			relayCPU, relaySys, relaySw = num(sum(c.cpu, relays), 0), num(sum(c.sys, relays), 1), num(sum(c.sw, relays), 1)
			cpuTiers, sysTiers = perTier(c.cpu, relays, 0), perTier(c.sys, relays, 1)
		}
		line := fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", p.Label, num(c.rps, 0),
			num(c.p50, 2), num(c.p99, 2), added, num(c.p99/c.p50, 1), relayCPU, cpuTiers, num(valueOr(c.cpu, "engine"), 0),
			relaySys, sysTiers, relaySw)
		if r.Stream {
			addedFirst := "–"
			if direct != nil && direct.rounds > 0 && p.Name != "direct" {
				addedFirst = num(c.firstP50-direct.firstP50, 2)
			}
			line += fmt.Sprintf(" %s / %s | %s | %s / %s |", num(c.firstP50, 2), num(c.firstP99, 2), addedFirst,
				num(c.gapP50, 3), num(c.gapP99, 3))
		}
		fmt.Fprintf(w, "%s %d |\n", line, c.errors)
	}
	fmt.Fprintln(w)
}

func (rep *report) writeBenches(w io.Writer) {
	if len(rep.benches) == 0 {
		return
	}
	fmt.Fprintf(w, "## Allocations per request (Go benchmarks, -benchmem, median of %d)\n\n", rep.benches[0].Runs)
	fmt.Fprintln(w, "| tier | benchmark | ns/op | B/op | allocs/op | one op |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | --- |")
	for _, b := range rep.benches {
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s |\n", b.Tier, b.Name, num(b.NsPerOp, 0), num(b.BytesPerOp, 0),
			num(b.AllocsPerOp, 0), b.What)
	}
	fmt.Fprintln(w, "\nThe relay-floor hop (bin/baseline-proxy, the standard library's reverse proxy) has no benchmark of its own; raw output in gobench.txt.")
	fmt.Fprintln(w)
}

func (rep *report) writeProfiles(w io.Writer) {
	if rep.profiled == "" {
		return
	}
	fmt.Fprintf(w, "## Profiles\n\nTaken under %s, after the measured rows; profiles/ holds each tier's CPU and allocation profile "+
		"(`go tool pprof` reads them) and their `-top` views. The flat CPU top of each tier:\n\n", rep.profiled)
	for _, p := range rep.profiles {
		fmt.Fprintf(w, "### %s\n\n```\n%s\n```\n\n", p.Tier, strings.Join(p.Lines, "\n"))
	}
}

// headline prints the ratios the issue states its targets in, at the rows
// it names: 1 KiB with the most clients (CPU, added latency; first event
// streamed) and 256 KiB for hub + pylon per KiB.
func (rep *report) headline(w io.Writer) {
	most := 0
	for _, r := range rep.rows {
		most = max(most, r.Clients)
	}
	small, big, stream := ratiosOf(rep.cells, row{1024, most, false}), ratiosOf(rep.cells, row{256 << 10, most, false}),
		ratiosOf(rep.cells, row{1024, most, true})
	fmt.Fprintf(w, "bench-path: CPU/req over one floor hop at 1 KiB, %d clients: hub %s, pylon %s, gateway %s (key %s), chain %s (key %s)\n",
		most, num(small.Hub, 2), num(small.Pylon, 2), num(small.Gateway, 2), num(small.GatewayKey, 2), num(small.Chain, 2), num(small.ChainKey, 2))
	fmt.Fprintf(w, "bench-path: added p50 chain / one hop %s (key %s); hub+pylon / two hops CPU at 256 KiB %s; first event added chain / one hop %s (key %s)\n",
		num(small.Added, 1), num(small.AddedKey, 1), num(big.SpineTwoFloors, 2), num(stream.First, 1), num(stream.FirstKey, 1))
}
