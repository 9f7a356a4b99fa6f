package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/sim"
	"github.com/stargate-router/stargate/pkg/workload"
)

func writeWorkload(t *testing.T, dir string) (string, string) {
	t.Helper()
	w := &workload.Workload{Header: workload.Header{Suite: "test", Seed: 3, Model: "m", Mode: workload.ModeClosed, Workers: 2}}
	for s := range 4 {
		for turn := 1; turn <= 3; turn++ {
			w.Requests = append(w.Requests, workload.Request{Index: len(w.Requests), Worker: s % 2,
				Session: "s" + string(rune('a'+s)), Turn: turn, Source: workload.SourceHeader, Endpoint: "chat",
				NewInputTokens: 500, OutputTokens: 8})
		}
	}
	path := filepath.Join(dir, "w.jsonl")
	fp, err := w.WriteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, fp
}

// A run prints the table with the workload fingerprint and seed, writes
// the same JSON twice, and --json/--md match stdout.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	path, fp := writeWorkload(t, dir)
	js1, js2, md := filepath.Join(dir, "1.json"), filepath.Join(dir, "2.json"), filepath.Join(dir, "t.md")
	var out, errb bytes.Buffer
	if code := run([]string{"--workload", path, "--seed", "9", "--json", js1, "--md", md}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{fp, "simulation seed: 9", "| metric | power-of-n | wait-and-widen | wait-and-widen+lca | pulsar-wait-and-widen+lca | greedy-ttft |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if b, _ := os.ReadFile(md); !bytes.Equal(b, out.Bytes()) {
		t.Error("--md differs from stdout")
	}
	if code := run([]string{"--workload", path, "--seed", "9", "--json", js2, "--quiet", "--parallel", "1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	a, _ := os.ReadFile(js1)
	b, _ := os.ReadFile(js2)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatal("two runs wrote different JSON")
	}
	var rep sim.Report
	if err := json.Unmarshal(a, &rep); err != nil || len(rep.Arms) != 5 || rep.Workload.Fingerprint != fp || rep.Arms[0].Requests != 12 {
		t.Fatalf("report %+v err %v", rep.Workload, err)
	}
	// Four sessions of three turns: turns 2 and 3 find their earlier turns
	// cached, so the ceiling is positive, and every arm's side-by-side
	// block carries it.
	if rep.Ceiling.CacheableTokens <= 0 || rep.Arms[0].SideBySide.CacheableTokens != rep.Ceiling.CacheableTokens {
		t.Errorf("ceiling %+v, side by side %+v", rep.Ceiling, rep.Arms[0].SideBySide)
	}
}

// --engine-affinity, --engine-affinity-load-factor and
// --engine-affinity-when-full override the fleet's pylon settings (shown
// in the header) and are validated.
func TestEngineAffinityFlags(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeWorkload(t, dir)
	var out, errb bytes.Buffer
	if code := run([]string{"--workload", path, "--arms", "power-of-n", "--engine-affinity", "on", "--engine-affinity-load-factor", "2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "engine affinity on (load factor 2)") {
		t.Errorf("affinity overrides not in the header:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"--workload", path, "--arms", "power-of-n", "--engine-affinity", "off"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "engine affinity off\n") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--workload", path, "--arms", "power-of-n", "--engine-affinity-when-full", "queue"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "engine affinity on (load factor 2); a full engine keeps its keys (engine_affinity_when_full queue)\n") {
		t.Errorf("--engine-affinity-when-full queue: exit %d:\n%s", code, out.String())
	}
	for _, args := range [][]string{{"--engine-affinity", "maybe"}, {"--engine-affinity-load-factor", "0.5"}, {"--engine-affinity-when-full", "wait"}} {
		errb.Reset()
		if code := run(append([]string{"--workload", path}, args...), &out, &errb); code != 1 || !strings.Contains(errb.String(), "engine_affinity") {
			t.Errorf("%v: exit %d, %s", args, code, errb.String())
		}
	}
}

// --print-fleet writes a fleet --fleet accepts; --print-arm a config.
func TestPrintFleetAndArm(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"--print-fleet"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	fleet := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(fleet, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	path, _ := writeWorkload(t, dir)
	out.Reset()
	if code := run([]string{"--workload", path, "--fleet", fleet, "--arms", "power-of-n,oracle", "--pylon-interval", "100ms", "--pylon-change-gap", "0"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "pylon reports every 100 ms;") {
		t.Errorf("pylon overrides not in the header:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"--print-arm", "pulsar-wait-and-widen+lca"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"last_cluster_affinity": true`) {
		t.Errorf("exit %d: %s", code, out.String())
	}
}

func TestErrors(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{}, {"--workload", "/nonexistent"}, {"--print-arm", "oracle"}, {"--workload", "x", "--arms", "nope"}} {
		if code := run(args, &out, &errb); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
	}
	if code := run([]string{"--bogus"}, &out, &errb); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
}

// The --prefix-* flags reach the prefix-aware arms' hub (a 1 ms TTL
// forgets every holder before the next turn asks, so no lookup hits) and
// are validated with the flag's name.
func TestPrefixFlags(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeWorkload(t, dir)
	hits := func(args ...string) uint64 {
		t.Helper()
		js := filepath.Join(dir, "p.json")
		var out, errb bytes.Buffer
		if code := run(append([]string{"--workload", path, "--arms", "prefix-affinity", "--quiet", "--json", js}, args...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rep sim.Report
		if err := json.Unmarshal(b, &rep); err != nil || rep.Arms[0].Prefix.Index == nil {
			t.Fatalf("report %s: %v", b, err)
		}
		return rep.Arms[0].Prefix.Index.Hits
	}
	if h := hits(); h == 0 {
		t.Error("default TTL: no lookup found a holder")
	}
	if h := hits("--prefix-index-ttl", "1ms"); h != 0 {
		t.Errorf("1 ms TTL: %d lookups found a holder", h)
	}
	if h := hits("--prefix-mark", "dispatch", "--prefix-index-max-holders", "1", "--prefix-index-max-nodes", "4096"); h == 0 {
		t.Error("marking at dispatch: no lookup found a holder")
	}
	for _, c := range []struct{ flag, value string }{
		{"--prefix-mark", "soon"}, {"--prefix-index-ttl", "0s"}, {"--prefix-index-max-nodes", "10"}, {"--prefix-index-max-holders", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run([]string{"--workload", path, c.flag, c.value}, &out, &errb); code != 1 || !strings.Contains(errb.String(), c.flag) {
			t.Errorf("%s %s: exit %d, %q", c.flag, c.value, code, errb.String())
		}
	}
}

// --warmup replays the listed workloads first on each arm's stack: the
// header and the JSON name them, the arm's numbers change with what its
// pylons learned, and a file that cannot be read is an error naming the
// flag.
func TestWarmupFlag(t *testing.T) {
	dir := t.TempDir()
	path, fp := writeWorkload(t, dir)
	report := func(args ...string) (sim.Report, string) {
		t.Helper()
		js := filepath.Join(dir, "w.json")
		var out, errb bytes.Buffer
		if code := run(append([]string{"--workload", path, "--arms", "power-of-n", "--json", js}, args...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rep sim.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep, out.String()
	}
	cold, out := report()
	if len(cold.Warmup) != 0 || strings.Contains(out, "warm-up") || !strings.Contains(out, "input TPS learned") {
		t.Errorf("without --warmup: warm-up %+v, header:\n%s", cold.Warmup, out)
	}
	warm, out := report("--warmup", path+","+path)
	if len(warm.Warmup) != 2 || warm.Warmup[1].Fingerprint != fp {
		t.Errorf("warm-up in the JSON: %+v", warm.Warmup)
	}
	if want := "- warm-up: each arm's pylons first learned their input rate from `test` (12 requests, `" + fp[:12] + "`), `test`"; !strings.Contains(out, want) {
		t.Errorf("header lacks %q:\n%s", want, out)
	}
	if warm.Arms[0].TTFTMs == cold.Arms[0].TTFTMs {
		t.Errorf("warm-up changed nothing: TTFT %+v both times", warm.Arms[0].TTFTMs)
	}
	var o, errb bytes.Buffer
	// Every default arm warms up at once (shared prepared workloads).
	if code := run([]string{"--workload", path, "--warmup", path, "--parallel", "4", "--quiet"}, &o, &errb); code != 0 {
		t.Errorf("all arms with a warm-up: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"--workload", path, "--warmup", "/nonexistent"}, &o, &errb); code != 1 || !strings.Contains(errb.String(), "--warmup") {
		t.Errorf("unreadable warm-up: exit %d, %q", code, errb.String())
	}
}
