package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// result is one round of one path at one row: the latency p50 and p99,
// requests, and CPU seconds and syscalls per tier.
func result(round int, p string, r row, p50, p99 float64, requests int, cpu map[string]float64, sys uint64) rowResult {
	res := rowResult{Round: round, Path: p, row: r, Requests: requests, RPS: float64(requests),
		Latency: summary{N: requests, P50: p50, P99: p99}, Procs: map[string]procDelta{}}
	for t, s := range cpu {
		res.Procs[t] = procDelta{CPUSeconds: s, SysR: sys, SysW: sys, Voluntary: uint64(requests)}
	}
	if r.Stream {
		res.FirstEvent, res.Gap = &summary{P50: p50 / 2, P99: p99 / 2}, &summary{P50: 0.01, P99: 0.2}
	}
	return res
}

func TestAggregateTakesMediansOverRounds(t *testing.T) {
	r := row{Size: 1024, Clients: 32}
	results := []rowResult{
		result(1, "floor-1", r, 1.0, 4.0, 1000, map[string]float64{"floor-1": 0.1, "engine": 0.05}, 4000),
		result(2, "floor-1", r, 3.0, 9.0, 2000, map[string]float64{"floor-1": 0.3, "engine": 0.1}, 8000),
		result(3, "floor-1", r, 2.0, 5.0, 1000, map[string]float64{"floor-1": 0.2, "engine": 0.05}, 4000),
		// A round where nothing succeeded adds its errors only.
		{Round: 4, Path: "floor-1", row: r, Errors: 7},
	}
	c := aggregate(results)[cellKey{"floor-1", r}]
	if c.rounds != 3 || c.errors != 7 || c.requests != 4000 || c.p50 != 2 || c.p99 != 5 || c.rps != 1000 {
		t.Errorf("cell %+v", c)
	}
	// CPU per request per round: 100, 150, 200 µs -> 150; syscalls 8 each.
	if c.cpu["floor-1"] != 150 || c.cpu["engine"] != 50 || c.sys["floor-1"] != 8 || c.sw["floor-1"] != 1 {
		t.Errorf("per tier: cpu %v sys %v sw %v", c.cpu, c.sys, c.sw)
	}
}

// cellsFor is one round of every path at r with CPU per request (µs, at
// 1000 requests) and p50 (ms) chosen so each ratio is a round number.
func cellsFor(r row) map[cellKey]*cell {
	us := func(v float64) float64 { return v * 1000 / 1e6 } // µs/req at 1000 requests -> seconds
	return aggregate([]rowResult{
		result(1, "direct", r, 1.0, 2, 1000, map[string]float64{"engine": us(50)}, 0),
		result(1, "floor-1", r, 1.5, 3, 1000, map[string]float64{"floor-1": us(100), "engine": us(50)}, 8000),
		result(1, "floor-2", r, 2.0, 4, 1000, map[string]float64{"floor-2": us(100), "floor-1": us(100), "engine": us(50)}, 8000),
		result(1, "spine", r, 3.0, 6, 1000, map[string]float64{"hub": us(250), "pylon": us(350), "engine": us(60)}, 8000),
		result(1, "chain", r, 4.0, 8, 1000, map[string]float64{"gateway": us(400), "hub": us(200), "pylon": us(300), "engine": us(60)}, 8000),
		result(1, "chain-key", r, 5.0, 9, 1000, map[string]float64{"gateway": us(500), "hub": us(200), "pylon": us(300), "engine": us(60)}, 8000),
	})
}

func TestRatios(t *testing.T) {
	r := row{Size: 1024, Clients: 32, Stream: true}
	x := ratiosOf(cellsFor(r), r)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for name, got := range map[string][2]float64{
		"hub": {x.Hub, 2}, "pylon": {x.Pylon, 3}, "gateway": {x.Gateway, 4}, "gateway key": {x.GatewayKey, 5},
		"chain": {x.Chain, 9}, "chain key": {x.ChainKey, 10},
		// Added p50: chain 3 ms, key 4 ms, one hop 0.5 ms.
		"added": {x.Added, 6}, "added key": {x.AddedKey, 8},
		"spine / two hops": {x.SpineTwoFloors, 3},
		// First event p50 is half the p50 here: chain 1.5, one hop 0.25.
		"first event": {x.First, 6}, "first event key": {x.FirstKey, 8},
	} {
		if !near(got[0], got[1]) {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
	// Unstreamed rows have no first event; a missing path gives NaN.
	plain := row{Size: 1024, Clients: 32}
	cells := cellsFor(plain)
	delete(cells, cellKey{"floor-2", plain})
	y := ratiosOf(cells, plain)
	if !math.IsNaN(y.First) || !math.IsNaN(y.SpineTwoFloors) || y.Chain != 9 {
		t.Errorf("first %v, spine/two hops %v, chain %v", y.First, y.SpineTwoFloors, y.Chain)
	}
}

func TestReportTables(t *testing.T) {
	rows := []row{{Size: 1024, Clients: 32}, {Size: 1024, Clients: 32, Stream: true}}
	cells := cellsFor(rows[0])
	for k, v := range cellsFor(rows[1]) {
		cells[k] = v
	}
	cells[cellKey{"floor-3", rows[0]}] = &cell{errors: 4}
	rep := report{meta: meta{Commit: "abc123", CPUs: 2, CPUModel: "Test CPU", o: options{rounds: 1, warmup: time.Second, duration: 2 * time.Second}},
		paths: allPaths, rows: rows, cells: cells, versions: binaryVersions([]byte("hub hub_build_info{version=\"v1\"} 1\ngateway gateway_build_info{version=\"v1\"} 1\n")),
		checks: []gatewayCheck{{Round: 1, Lookups: map[string]float64{"miss": 32, "hit": 900, "error": 0}, Writes: map[string]float64{"success": 932},
			RateLimit: map[string]float64{"fail_open": 0}}}}
	var sb strings.Builder
	rep.write(&sb)
	out := sb.String()
	for _, want := range []string{
		"source tree: `abc123`; binaries' build_info versions: hub v1, gateway v1",
		"| 1 | hit 900, miss 32 | success 932 | none |",
		"| 1KiB, 32 clients, non-streaming | 2.00 | 3.00 | 4.00 | 5.00 | 9.00 | 10.00 | 6.0 | 8.0 | 3.00 | – | – |",
		"| 1KiB, 32 clients, streaming | 2.00 | 3.00 | 4.00 | 5.00 | 9.00 | 10.00 | 6.0 | 8.0 | 3.00 | 6.0 | 8.0 |",
		"## 1KiB, 32 clients, non-streaming",
		// Chain: 3 ms added p50, 6 ms added p99, p99/p50 2, 900 µs over
		// three tiers, 16 syscalls per tier.
		"| gateway + hub + pylon | 1000 | 4.00 | 8.00 | 3.00 / 6.00 | 2.0 | 900 | gateway 400 · hub 200 · pylon 300 | 60 | 48.0 | gateway 16.0 · hub 16.0 · pylon 16.0 | 3.0 | 0 |",
		"| engine direct | 1000 | 1.00 | 2.00 | – | 2.0 | – | – | 50 | – | – | – | 0 |",
		"| 3 relay-floor hops | no request succeeded |",
		// Streamed: first event 2 / 4 ms, added 1.5 ms, gaps.
		"| 2.00 / 4.00 | 1.50 | 0.010 / 0.200 | 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var head strings.Builder
	rep.headline(&head)
	if h := head.String(); !strings.Contains(h, "hub 2.00, pylon 3.00, gateway 4.00 (key 5.00), chain 9.00 (key 10.00)") ||
		!strings.Contains(h, "first event added chain / one hop 6.0 (key 8.0)") {
		t.Errorf("headline:\n%s", h)
	}
}

func TestNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{1.234, "1.23"}, {math.NaN(), "–"}, {math.Inf(1), "–"}, {-0.5, "-0.50"}} {
		if got := num(tc.v, 2); got != tc.want {
			t.Errorf("num(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
