package main

import (
	"testing"
)

const benchOut = `goos: linux
goarch: amd64
pkg: github.com/stargate-router/stargate/pylon/internal/engineproxy
cpu: Intel(R) Xeon(R) Processor
BenchmarkServeCompletion-2   	   31461	     34917 ns/op	         0 flushes/op	   13406 B/op	      68 allocs/op
BenchmarkServeCompletion-2   	   30000	     36000 ns/op	         0 flushes/op	   13410 B/op	      69 allocs/op
BenchmarkServeCompletion-2   	   32000	     30000 ns/op	         0 flushes/op	   13400 B/op	      68 allocs/op
BenchmarkEndpoint/chat-stream-2         	    3496	    291466 ns/op	   66280 B/op	     335 allocs/op
BenchmarkEndpoint/chat-stream-2 says hello from a log line
BenchmarkRequestPath/json    	   10000	     78672 ns/op	  33697 B/op	     128 allocs/op
PASS
ok  	github.com/stargate-router/stargate/pylon/internal/engineproxy	1.121s
`

func TestParseBenchAndMedians(t *testing.T) {
	lines := parseBench([]byte(benchOut))
	if len(lines) != 5 {
		t.Fatalf("%d result lines, want 5: %+v", len(lines), lines)
	}
	if l := lines[0]; l.Name != "BenchmarkServeCompletion" || l.Values["flushes/op"] != 0 || l.Values["allocs/op"] != 68 {
		t.Errorf("first line %+v", l)
	}
	stats := medians(lines)
	want := []benchStat{
		{Name: "BenchmarkServeCompletion", Runs: 3, NsPerOp: 34917, BytesPerOp: 13406, AllocsPerOp: 68},
		{Name: "BenchmarkEndpoint/chat-stream", Runs: 1, NsPerOp: 291466, BytesPerOp: 66280, AllocsPerOp: 335},
		// No GOMAXPROCS suffix (a -cpu 1 run): the name is kept whole.
		{Name: "BenchmarkRequestPath/json", Runs: 1, NsPerOp: 78672, BytesPerOp: 33697, AllocsPerOp: 128},
	}
	if len(stats) != len(want) {
		t.Fatalf("medians %+v", stats)
	}
	for i := range want {
		if stats[i] != want[i] {
			t.Errorf("median %d = %+v, want %+v", i, stats[i], want[i])
		}
	}
}

// Every tier on the chain has a benchmark listed, and each names a
// module of the workspace.
func TestGoBenchesCoverTheTiers(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range goBenches {
		seen[b.Tier] = true
		switch b.Module {
		case "pkg", "gateway", "hub", "pylon":
		default:
			t.Errorf("%s: module %q", b.Pattern, b.Module)
		}
	}
	for _, tier := range []string{"gateway", "hub", "pylon", "engine"} {
		if !seen[tier] {
			t.Errorf("no benchmark for %s", tier)
		}
	}
}
