package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// goBench is one existing Go benchmark of a tier's request path.
type goBench struct {
	Tier, Module, Package, Pattern string
	// What says what one op is and what it leaves out.
	What string
}

// goBenches are the whole-request benchmarks of each tier, as close to
// what the load rows measure as each tier has. The relay-floor hop
// (baseline-proxy) has none: it is the standard library's reverse proxy.
var goBenches = []goBench{
	{Tier: "gateway", Module: "gateway", Package: "./internal/server/", Pattern: "^BenchmarkEndpoint$/^chat-",
		What: "one 1 KiB chat POST through the gateway's handler (rate limits on, last-cluster tracking on an in-process LRU instead of Olric) against a loopback fake hub; includes the HTTP client's allocations"},
	{Tier: "hub", Module: "hub", Package: "./internal/proxy/", Pattern: "^BenchmarkServe$",
		What: "one request through the hub's proxy: headers, body, routing pass, reservation, round trip over an in-memory tunnel, a 360 B answer copied back; no sockets"},
	{Tier: "pylon", Module: "pylon", Package: "./internal/engineproxy/", Pattern: "^BenchmarkServeCompletion$",
		What: "one non-streaming 1 KiB completion through the pylon's engine proxy: checks, stats observation, upstream request, answer; no sockets"},
	{Tier: "pylon", Module: "pylon", Package: "./internal/engineproxy/", Pattern: "^BenchmarkServeChatStream$",
		What: "one streamed 1 KiB chat through the pylon's engine proxy, as the spine and the chain send it: the mock engine's 19 events for 16 tokens, each in its own read (event-per-read) or all in one (burst); no sockets"},
	{Tier: "engine", Module: "pkg", Package: "./mockengine/", Pattern: "^BenchmarkRequestPath$",
		What: "the mock engine's handler for a 5 KiB chat, JSON and SSE answers"},
}

// benchStat is one benchmark's medians over its -count runs.
type benchStat struct {
	Tier, Name, What string
	Runs             int
	NsPerOp          float64
	BytesPerOp       float64
	AllocsPerOp      float64
}

// runGoBenches runs goBenches with -benchmem, writes their raw output to
// rawPath and returns each benchmark's medians. They run after the load
// rows, at the priority -bench-nice gives: their allocation counts do
// not depend on it, their times are indicative.
func runGoBenches(ctx context.Context, o options, rawPath string) ([]benchStat, error) {
	raw, err := os.Create(rawPath) //nolint:gosec // G304: the run's own output folder
	if err != nil {
		return nil, err
	}
	defer func() { _ = raw.Close() }()
	var out []benchStat
	for _, gb := range goBenches {
		args := []string{"test", "-run", "^$", "-bench", gb.Pattern, "-benchmem", "-count", strconv.Itoa(o.benchCount), gb.Package}
		name, argv := o.goCmd, args
		if o.benchNice > 0 {
			name, argv = "nice", append([]string{"-n", strconv.Itoa(o.benchNice), o.goCmd}, args...)
		}
		cmd := exec.CommandContext(ctx, name, argv...) //nolint:gosec // G204: the go tool on this repository's packages
		cmd.Dir = filepath.Join(o.src, gb.Module)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		fmt.Fprintf(raw, "# (cd %s && %s %s)\n", gb.Module, name, strings.Join(argv, " "))
		err := cmd.Run()
		_, _ = raw.Write(buf.Bytes())
		if err != nil {
			return out, fmt.Errorf("go test %s in %s: %w", gb.Pattern, gb.Module, err)
		}
		for _, s := range medians(parseBench(buf.Bytes())) {
			s.Tier, s.What = gb.Tier, gb.What
			out = append(out, s)
		}
	}
	return out, nil
}

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	Name   string
	Values map[string]float64 // by unit: "ns/op", "B/op", "allocs/op", ...
}

// parseBench reads the result lines of `go test -bench` output; the
// GOMAXPROCS suffix ("-2") is cut from each name so runs on different
// machines group together.
func parseBench(out []byte) []benchLine {
	var lines []benchLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // not a result line (a log line starting with the name)
		}
		l := benchLine{Name: f[0], Values: map[string]float64{}}
		if i := strings.LastIndexByte(l.Name, '-'); i > 0 {
			if _, err := strconv.Atoi(l.Name[i+1:]); err == nil {
				l.Name = l.Name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				l.Values[f[i+1]] = v
			}
		}
		lines = append(lines, l)
	}
	return lines
}

// medians groups lines by name, in order of first appearance, and takes
// each unit's median.
func medians(lines []benchLine) []benchStat {
	var order []string
	by := map[string][]benchLine{}
	for _, l := range lines {
		if _, ok := by[l.Name]; !ok {
			order = append(order, l.Name)
		}
		by[l.Name] = append(by[l.Name], l)
	}
	out := make([]benchStat, 0, len(order))
	for _, n := range order {
		med := func(unit string) float64 {
			var xs []float64
			for _, l := range by[n] {
				if v, ok := l.Values[unit]; ok {
					xs = append(xs, v)
				}
			}
			return median(xs)
		}
		out = append(out, benchStat{Name: n, Runs: len(by[n]), NsPerOp: med("ns/op"), BytesPerOp: med("B/op"), AllocsPerOp: med("allocs/op")})
	}
	return out
}
