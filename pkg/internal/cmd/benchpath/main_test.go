package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRowsOf(t *testing.T) {
	rows, err := rowsOf("1k, 256K,1047", "1,32", "off,on")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 || rows[0] != (row{1024, 1, false}) || rows[1] != (row{1024, 1, true}) ||
		rows[2] != (row{1024, 32, false}) || rows[4] != (row{256 << 10, 1, false}) || rows[11] != (row{1047, 32, true}) {
		t.Errorf("rows %v", rows)
	}
	for _, bad := range [][3]string{{"1x", "1", "on"}, {"0", "1", "on"}, {"1k", "0", "on"}, {"1k", "1", "yes"}} {
		if _, err := rowsOf(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("rowsOf%v succeeded", bad)
		}
	}
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "pkg", "internal")
	if err := os.MkdirAll(deep, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := findRoot(deep); err == nil {
		t.Error("found a root without go.work")
	}
	if err := os.WriteFile(filepath.Join(root, "go.work"), []byte("go 1.26\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := findRoot(deep); err != nil || got != root {
		t.Errorf("findRoot = %q, %v; want %q", got, err, root)
	}
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-rounds", "0"}, {"-paths", "floor-4"}, {"-sizes", "big"}, {"-profile", "-profile-time", "10ms"}, {"-nope"}} {
		stderr.Reset()
		if code := run(t.Context(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr.String())
		}
	}
	b, err := newBench(options{rounds: 1, warmup: time.Second, duration: time.Second, outTokens: 16, paths: "floor-3,direct",
		sizes: "1k", clients: "1", streams: "on", src: "/x"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if b.floorHops() != 3 || !slices.Equal(names(b.paths), []string{"direct", "floor-3"}) || !strings.HasPrefix(b.o.out, "results/bench-path-") {
		t.Errorf("floor hops %d, paths %v, out %q", b.floorHops(), names(b.paths), b.o.out)
	}
}

func TestCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nprocessor\t: 1\nmodel name\t: other\n"
	if m := cpuModel([]byte(info)); m != "Intel(R) Xeon(R) Processor" {
		t.Errorf("cpuModel = %q", m)
	}
	if m := cpuModel(nil); m != "unknown" {
		t.Errorf("cpuModel(nil) = %q", m)
	}
}

func TestFlatTop(t *testing.T) {
	summary := `$ go tool pprof -top -nodecount=20 hub-cpu.pb.gz
File: hub
Type: cpu
Duration: 10s, Total samples = 2.5s (25.00%)
Showing nodes accounting for 1.2s, 48% of 2.5s total
      flat  flat%   sum%        cum   cum%
     0.5s 20.00% 20.00%      0.5s 20.00%  internal/runtime/syscall/linux.Syscall6
     0.3s 12.00% 32.00%      0.3s 12.00%  runtime.futex
     0.2s  8.00% 40.00%      0.2s  8.00%  runtime.memmove

$ go tool pprof -top -cum -nodecount=20 hub-cpu.pb.gz
Showing nodes accounting for 1.2s, 48% of 2.5s total
      flat  flat%   sum%        cum   cum%
         0     0%     0%      2.0s 80.00%  net/http.(*conn).serve
`
	got := flatTop(summary, 2)
	want := []string{"Duration: 10s, Total samples = 2.5s (25.00%)", "Showing nodes accounting for 1.2s, 48% of 2.5s total",
		"      flat  flat%   sum%        cum   cum%",
		"     0.5s 20.00% 20.00%      0.5s 20.00%  internal/runtime/syscall/linux.Syscall6",
		"     0.3s 12.00% 32.00%      0.3s 12.00%  runtime.futex"}
	if !slices.Equal(got, want) {
		t.Errorf("flatTop =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A view shorter than n ends at its blank line: the next view is not read.
func TestFlatTopShortView(t *testing.T) {
	summary := "Showing nodes accounting for 1s\n      flat  flat%\n     1s 100%  main.f\n\nShowing nodes accounting for 1s\n      flat  flat%\n     1s 100%  main.g\n"
	if got := flatTop(summary, 5); len(got) != 3 || !strings.HasSuffix(got[2], "main.f") {
		t.Errorf("flatTop = %q", got)
	}
}
