package loadgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/workload"
)

// recordingStack is a fakeStack that also records counter files around
// every run: each run evicts 5 blocks per engine, and the hub of arm p2
// counts one "retry" escape per run while ww's hub exports no escapes.
type recordingStack struct {
	*fakeStack
	mu      sync.Mutex
	arm     string
	runs    int
	records []string
}

var _ RunRecorder = (*recordingStack)(nil)

func (r *recordingStack) Up(ctx context.Context, arm Arm, armDir string) (ArmTarget, error) {
	r.mu.Lock()
	r.arm = arm.Name
	r.mu.Unlock()
	return r.fakeStack.Up(ctx, arm, armDir)
}

func (r *recordingStack) RecordRun(_ context.Context, runDir, phase string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, phase+" "+filepath.Base(filepath.Dir(runDir)))
	if phase == PhaseAfter {
		r.runs++
	}
	evicted := 5 * r.runs
	engines := fmt.Sprintf("near-a %s{model_name=\"m\"} %d\nfar-a %s{model_name=\"m\"} %d\n", evictedBlocksSeries, evicted, evictedBlocksSeries, evicted)
	hub := "hub stargate_requests_total 1\n"
	if r.arm == "p2" {
		hub += fmt.Sprintf("hub %s{model=\"m\",reason=\"retry\"} %d\n", EscapesSeries, r.runs)
	}
	name, hubName := EnginesBeforeFile, HubBeforeFile
	if phase == PhaseAfter {
		name, hubName = EnginesAfterFile, HubAfterFile
	}
	if err := os.WriteFile(filepath.Join(runDir, name), []byte(engines), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(runDir, hubName), []byte(hub), 0o600)
}

// sweepCampaign is a campaign of the open-loop sessions suite (and smoke,
// which has no rate) at 0.5x, 1x and 2x of capacity, on two arms, each
// with its own real mock engine.
func sweepCampaign(t *testing.T, capacity float64) (*Campaign, *recordingStack) {
	t.Helper()
	urlP2, _ := startMock(t)
	urlWW, _ := startMock(t)
	st := &recordingStack{fakeStack: &fakeStack{targets: map[string]ArmTarget{"p2": {URL: urlP2}, "ww": {URL: urlWW}}}}
	c := stackCampaign(t, st, nil)
	c.Suites = nil
	points, err := ParseRates("0.5x, 1x,2x")
	if err != nil {
		t.Fatal(err)
	}
	c.Sweep = &Sweep{Names: []string{"sessions", "smoke"}, Points: points, Capacity: capacity, Probe: Probe{Workers: 2, Requests: 6},
		Base: workload.SuiteParams{Seed: 3, Model: "m", Sessions: 4, Turns: 3, AnonShare: -1,
			// Turns are sent after their previous turn's answer anyway;
			// a think time this short lets 4 sessions carry any rate the
			// probe may measure on an in-process engine.
			ThinkTime: time.Microsecond}}
	return c, st
}

// TestCampaignSweep runs a sweep end to end: one workload per rate, the
// same for both arms; per-run counters; the sweep table with each arm's
// saturation point; measured cache never above the run's ceiling.
func TestCampaignSweep(t *testing.T) {
	c, st := sweepCampaign(t, 200)
	rep, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range rep.Suites {
		keys = append(keys, s.Key)
	}
	if want := []string{"sessions-0.5x", "sessions-1x", "sessions-2x", "smoke"}; !slices.Equal(keys, want) {
		t.Fatalf("suites %v, want %v", keys, want)
	}
	if rep.Capacity == nil || rep.Capacity.ReqPerS != 200 || rep.Capacity.Source != CapacityGiven {
		t.Fatalf("capacity %+v", rep.Capacity)
	}
	for i, want := range []float64{100, 200, 400} {
		if s := rep.Suites[i]; s.TargetRate != want || s.Sweep != "sessions" || s.CeilingTokens == 0 || s.PromptTokens <= s.CeilingTokens || s.BlockTokens != 16 {
			t.Fatalf("suite %+v, want rate %v", s, want)
		}
	}
	for _, arm := range []string{"p2", "ww"} {
		for _, s := range rep.Suites {
			st := rep.Results[arm][s.Key]
			if st.OK != st.Requests || st.All.CachedTokens == 0 {
				t.Fatalf("%s %s: %+v", arm, s.Key, st)
			}
			// No arm finds more than the ceiling of what it sent.
			if st.All.CachedTokens > st.All.CacheableTokens || st.All.CeilingPct <= 0 || st.All.CeilingPct > 100 {
				t.Fatalf("%s %s: cached %d of a ceiling of %d (%.1f %%)", arm, s.Key, st.All.CachedTokens, st.All.CacheableTokens, st.All.CeilingPct)
			}
			if st.Counters == nil || st.Counters.EvictedBlocks != 10 {
				t.Fatalf("%s %s: run counters %+v, want 10 evicted blocks (5 on each of 2 engines)", arm, s.Key, st.Counters)
			}
			if (arm == "p2") != (st.Counters.Escapes != nil) {
				t.Fatalf("%s %s: escapes %v", arm, s.Key, st.Counters.Escapes)
			}
		}
		// The run salt comes from the workload's seed, the same for every arm.
		run, _, err := ReadRun(runDir(filepath.Join(c.Out, "arms", arm), "sessions-1x", 1))
		if err != nil || run.Meta.Salt != workload.NameTag(3, "")+"-sessions-1x-r1" || run.Meta.BlockTokens != 16 {
			t.Fatalf("%s run meta %+v, %v", arm, run.Meta, err)
		}
	}
	if got := len(st.records); got != 2*2*4 {
		t.Fatalf("RecordRun calls %v, want before and after each of 8 runs", st.records)
	}
	md, err := os.ReadFile(filepath.Join(c.Out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Sweep: sessions", "Rates as multiples of a capacity of 200.0 req/s (given with --capacity)",
		"| 0.5x (100.0 req/s) | p2 |", "| 2x (400.0 req/s) | ww |", "Saturation point", "- p2: ", "- ww: ",
		"cached % of ceiling", "cache ceiling", "| hub escapes (all reasons) | 1 | n/a |", "| engine evicted blocks | 10 | 10 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
}

// TestCampaignSweepMeasuresCapacity: --capacity auto runs the probe on
// the first arm's stack before any workload is generated, and a resumed
// campaign keeps the figure (and so its workloads' rates).
func TestCampaignSweepMeasuresCapacity(t *testing.T) {
	c, st := sweepCampaign(t, 0)
	rep, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	capRec := rep.Capacity
	if capRec == nil || capRec.Source != CapacityMeasured || !(capRec.ReqPerS > 0) || capRec.Arm != "p2" || capRec.Workers != 2 ||
		capRec.OK != 6 || capRec.Fingerprint == "" {
		t.Fatalf("capacity %+v", capRec)
	}
	if got := st.calls(); len(got) < 2 || got[0] != "up p2" || got[1] != "down "+probeDir {
		t.Fatalf("stack calls %v: want the probe's up and down first", got)
	}
	if _, err := os.Stat(filepath.Join(c.Out, probeDir, "lb-config.json")); err != nil {
		t.Fatalf("the probe's lb config: %v", err)
	}
	if rep.Suites[1].TargetRate != capRec.ReqPerS {
		t.Fatalf("1x is %v req/s, capacity %v", rep.Suites[1].TargetRate, capRec.ReqPerS)
	}
	md, _ := os.ReadFile(filepath.Join(c.Out, "summary.md"))
	if !strings.Contains(string(md), "measured: 6 of 6 requests ok") || !strings.Contains(string(md), "on arm p2's stack") {
		t.Fatalf("summary.md does not say how capacity was measured:\n%s", md)
	}
	// Resume: no probe, the same capacity.
	before := len(st.calls())
	c.Resume = true
	again, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.calls()[before:]; len(got) != 0 || again.Capacity.ReqPerS != capRec.ReqPerS {
		t.Fatalf("resume: calls %v, capacity %+v", got, again.Capacity)
	}
}

func TestParseRatesAndExpand(t *testing.T) {
	pts, err := ParseRates("0.5x,40, 2x")
	if err != nil || len(pts) != 3 || pts[0] != (RatePoint{Multiple: 0.5}) || pts[1] != (RatePoint{Rate: 40}) {
		t.Fatalf("%+v %v", pts, err)
	}
	for _, in := range []string{"", "x", "-1x", "0", "fast", "1x,1x", "2e7"} {
		if _, err := ParseRates(in); err == nil || !strings.Contains(err.Error(), "--rates") {
			t.Errorf("%q: err = %v", in, err)
		}
	}
	sw := &Sweep{Names: []string{"capacity", "high-context", "mixed"}, Points: pts}
	specs, err := sw.Expand(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s@%g", s.Key, s.Params.Rate))
	}
	want := []string{"capacity-0.5x@5", "capacity-40@40", "capacity-2x@20", "high-context@0", "mixed-0.5x@5", "mixed-40@40", "mixed-2x@20"}
	if !slices.Equal(got, want) {
		t.Fatalf("expanded %v, want %v", got, want)
	}
	if _, err := sw.Expand(0); err == nil || !strings.Contains(err.Error(), "--capacity") {
		t.Fatalf("multiples without a capacity: %v", err)
	}
	sw.Names = []string{"capacity@8"}
	if _, err := sw.Expand(10); err == nil || !strings.Contains(err.Error(), "--suites") {
		t.Fatalf("capacity@8 in a sweep: %v", err)
	}
}

// TestSaturation: the lowest rate whose TTFT p99 is at least twice the
// lowest rate's, per arm, else not reached.
func TestSaturation(t *testing.T) {
	p99 := func(v float64) Stats { return Stats{All: Class{TTFT: Dist{N: 10, P99: v}}} }
	points := []CampaignSuite{{Key: "s-0.5x", Sweep: "s", Multiple: 0.5, TargetRate: 5}, {Key: "s-1x", Sweep: "s", Multiple: 1, TargetRate: 10},
		{Key: "s-2x", Sweep: "s", Multiple: 2, TargetRate: 20}}
	rep := &CampaignReport{Arms: []Arm{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Suites: []CampaignSuite{points[2], points[0], points[1]},
		Results: map[string]map[string]Stats{
			"a": {"s-0.5x": p99(100), "s-1x": p99(199), "s-2x": p99(200)},
			"b": {"s-0.5x": p99(100), "s-1x": p99(150), "s-2x": p99(190)},
			"c": {"s-1x": p99(500)},
		}}
	names, groups := sweepGroups(rep)
	if len(names) != 1 || groups["s"][0].Key != "s-0.5x" || groups["s"][2].Key != "s-2x" {
		t.Fatalf("groups %v %+v", names, groups)
	}
	if k, ok := Saturation(rep, "a", groups["s"]); !ok || k != "s-2x" {
		t.Errorf("a: %q %v, want s-2x", k, ok)
	}
	for _, arm := range []string{"b", "c"} {
		if k, ok := Saturation(rep, arm, groups["s"]); ok {
			t.Errorf("%s: saturated at %q", arm, k)
		}
	}
	var md strings.Builder
	WriteSweeps(&md, rep)
	for _, want := range []string{"- a: 2x (20.0 req/s)", "- b: not reached", "- c: not reached", "| 0.5x (5.0 req/s) | c | - |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("sweep table lacks %q:\n%s", want, md.String())
		}
	}
}

// failingRecorder fails the phase it is told to.
type failingRecorder struct{ fail string }

func (f failingRecorder) RecordRun(_ context.Context, runDir, phase string) error {
	if phase == f.fail {
		return fmt.Errorf("engine %s unreachable", phase)
	}
	return os.WriteFile(filepath.Join(runDir, EnginesBeforeFile), nil, 0o600)
}

// TestExecuteRecorderFailures: counters that cannot be recorded before a
// run stop it before anything is sent; after it, the run is written and
// the error returned.
func TestExecuteRecorderFailures(t *testing.T) {
	w, err := workload.Generate(workload.SuiteSmoke, workload.SuiteParams{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	send := func(context.Context, *Job) Result { sent.Add(1); return Result{Status: 200} }
	spec := RunSpec{Workload: w, Client: Client{Clock: clock.Real{}}, Send: send}
	spec.Dir, spec.Recorder = t.TempDir(), failingRecorder{fail: PhaseBefore}
	if _, err := Execute(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "before the run: engine before unreachable") || sent.Load() != 0 {
		t.Fatalf("err = %v, %d sent", err, sent.Load())
	}
	spec.Dir, spec.Recorder = t.TempDir(), failingRecorder{fail: PhaseAfter}
	rep, err := Execute(t.Context(), spec)
	if err == nil || !strings.Contains(err.Error(), "after the run: engine after unreachable") || rep == nil || rep.Stats.OK != 32 {
		t.Fatalf("err = %v, report %v", err, rep)
	}
	if _, complete, _ := ReadRun(spec.Dir); !complete {
		t.Fatal("the run was not written")
	}
}
