package loadgen

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/workload"
)

// wellFormedSVG parses s as XML and checks the root is an svg element.
func wellFormedSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q", path, root)
	}
}

func sampleOutput() *Output {
	recs := []Record{
		ok("a", 1, "c1", 1000, 0, 10),
		ok("a", 2, "c2", 1200, 0, 20),
		ok("a", 3, "c2", 1400, 1200, 5),
		ok("", 1, "c1", 100, 0, 50),
		{Index: 4, Session: "b<&>", Turn: 1, Outcome: OutcomeError, Status: 503, Error: "HTTP 503: a | b"},
	}
	for i := range recs {
		recs[i].Index = i
		recs[i].StartMs = float64(i * 100)
	}
	return &Output{Records: recs, Started: epoch, Finished: epoch.Add(2 * time.Second), SendWindow: time.Second}
}

func TestWriteRunOutputsParse(t *testing.T) {
	dir := t.TempDir()
	meta := Meta{Suite: "sessions", Workload: "w.jsonl", Fingerprint: "abc", Mode: "open", Params: map[string]any{"target_rate": 8.0},
		Target: TargetHub, URL: "http://x", Model: "m", Stream: true, Arm: "p2<x>"}
	rep, err := WriteRun(dir, meta, sampleOutput())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if err != nil {
		t.Fatal(err)
	}
	var back RunReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("run.json: %v", err)
	}
	if !back.Meta.Complete || back.Stats.OK != 4 || back.Stats.Failed != 1 || back.Stats.TargetRate != 8 || back.Stats.Escaped != 1 || back.Stats.Followed != 1 {
		t.Fatalf("run.json read back: %+v", back.Stats)
	}
	if back.Meta.DurationMs != 2000 || back.Meta.SendWindowMs != 1000 || back.Stats.AchievedRate != 5 {
		t.Fatalf("meta %+v achieved %v", back.Meta, back.Stats.AchievedRate)
	}
	recs, err := ReadRecords(dir)
	if err != nil || len(recs) != 5 || recs[4].Session != "b<&>" {
		t.Fatalf("records: %v %+v", err, recs)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	for _, want := range []string{"# loadgen run: p2<x> / sessions", "| all | 5 | 4 |", "returning (turn > 1)", "| c1 | 2 | 50.0 |", "escaped", `HTTP 503: a \| b`} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	wellFormedSVG(t, filepath.Join(dir, TTFTPlot))
	wellFormedSVG(t, filepath.Join(dir, ClusterPlot))
	// Re-rendering from requests.jsonl gives the same statistics.
	again, err := Rerender(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(again.Stats)
	r, _ := json.Marshal(rep.Stats)
	if string(a) != string(r) {
		t.Fatalf("re-render changed the stats:\n%s\n%s", a, r)
	}
}

// TestRunReportCeilingAndCounters: a run folder with counter files gets
// the engines' and the hub's differences in run.json and report.md, and
// the escapes read n/a when the hub does not export them.
func TestRunReportCeilingAndCounters(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{EnginesBeforeFile: enginesBefore, EnginesAfterFile: enginesAfter, HubAfterFile: "hub stargate_requests_total 3\n"})
	out := sampleOutput()
	out.Records[1].CacheableTokens = 100
	out.Records[2].CacheableTokens = 1500
	rep, err := WriteRun(dir, Meta{Suite: "sessions", Mode: "closed", BlockTokens: 16}, out)
	if err != nil {
		t.Fatal(err)
	}
	// 1200 tokens cached of a ceiling of 1600.
	if c := rep.Stats.Counters; c == nil || c.EvictedBlocks != 22 || c.Escapes != nil || rep.Stats.All.CeilingPct != 75 {
		t.Fatalf("stats %+v counters %+v", rep.Stats.All, c)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	for _, want := range []string{"cached % of ceiling", "| all | 5 | 4 | 32.4 | 75.0 |", "Cache ceiling: 1600 of the 3700", "engines evicted 22 KV blocks",
		"found 200 of the 600 prompt tokens", "Session escapes by reason: n/a"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

func TestPlotsOfEmptyAndDegenerateData(t *testing.T) {
	dir := t.TempDir()
	for name, svg := range map[string]string{
		"empty-cdf.svg":   TTFTCDF("empty", map[string][]float64{"a": nil}),
		"zero-cdf.svg":    TTFTCDF("zeros", map[string][]float64{"a": {0, 0}}),
		"no-records.svg":  ClusterShareOverTime("none", nil, 10),
		"bars.svg":        BarChart("bars", "%", []string{"s1", "s2"}, []string{"a", "b"}, [][]float64{{10, 20}, {30}}, 100),
		"zero-bars.svg":   BarChart("bars", "%", nil, nil, nil, 0),
		"cdf-escape.svg":  TTFTCDF(`<"&>`, map[string][]float64{"x&y": {1, 2, 3}}),
		"share-small.svg": ClusterShareOverTime("one", []Record{ok("s", 1, "c", 1, 0, 1)}, 5),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(svg), 0o600); err != nil {
			t.Fatal(err)
		}
		wellFormedSVG(t, p)
		if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
			t.Errorf("%s has NaN or Inf coordinates", name)
		}
	}
}

func writeArms(t *testing.T, dir string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "p2.json"), []byte(`{"models":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "arms.json")
	arms := `[{"name":"p2","lb_config":"p2.json","info":{"hub":"v1"}},{"name":"ww","description":"wait and widen"}]`
	if err := os.WriteFile(path, []byte(arms), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCampaignHooksResumeAndSummary(t *testing.T) {
	dir := t.TempDir()
	arms, err := ReadArms(writeArms(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ExpandSuites([]string{"smoke", "capacity@4"}, workload.SuiteParams{Seed: 1, Duration: 2 * time.Second})
	if err != nil || len(specs) != 2 || specs[1].Key != "capacity-4" {
		t.Fatalf("specs %+v %v", specs, err)
	}
	var calls atomic.Int64
	send := func(_ context.Context, j *Job) Result {
		calls.Add(1)
		cached := 0
		if j.Request.Turn > 1 {
			cached = 10
		}
		return Result{Status: 200, Reply: "r", Usage: true, PromptTokens: 20, CachedTokens: cached, OutputTokens: 2, Cluster: "c" + fmt.Sprint(j.Request.Index%2)}
	}
	// A fake clock that is never advanced would stall the open-loop
	// suite, so the campaign runs on the real clock with a fake sender.
	out := filepath.Join(dir, "results")
	c := &Campaign{Out: out, Arms: arms, Suites: specs, Repeats: 2, Log: io.Discard,
		BeforeArm: `echo "$ARM_NAME $ARM_LB_CONFIG" > "$RESULTS_DIR/before.txt"`, AfterArm: `touch "$RESULTS_DIR/after.txt"`,
		Template: RunSpec{Client: Client{Clock: clock.Real{}}, Send: send}, Build: BuildInfo{Version: "test"}}
	// Open-loop capacity@4 for 2 s has offsets up to 1.75 s; keep the test
	// fast by shrinking it to the first request.
	c.Template.Config.MaxRequests = 0
	specs[1].Params.Duration = 300 * time.Millisecond
	rep, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	perArm := int64(2 * (32 + 1))
	if calls.Load() != 2*perArm {
		t.Fatalf("%d sends, want %d", calls.Load(), 2*perArm)
	}
	before, err := os.ReadFile(filepath.Join(out, "arms", "p2", "before.txt"))
	if err != nil || !strings.HasPrefix(string(before), "p2 ") || !strings.Contains(string(before), "p2.json") {
		t.Fatalf("before hook: %q %v", before, err)
	}
	if _, err := os.Stat(filepath.Join(out, "arms", "ww", "after.txt")); err != nil {
		t.Fatal("after hook did not run")
	}
	if _, err := os.Stat(filepath.Join(out, "arms", "p2", "lb-config.json")); err != nil {
		t.Fatal("lb config not copied")
	}
	var ar ArmRecord
	b, _ := os.ReadFile(filepath.Join(out, "arms", "p2", "arm.json"))
	if err := json.Unmarshal(b, &ar); err != nil || ar.Fingerprints["smoke"] != rep.Suites[0].Fingerprint || ar.Arm.Info["hub"] != "v1" || ar.Loadgen.Version != "test" {
		t.Fatalf("arm.json %s: %v", b, err)
	}
	// Both arms got the same workload bytes; results are per arm.
	if s := rep.Results["ww"]["smoke"]; s.Runs != 2 || s.Requests != 64 || s.Returning.CacheHitPct != 50 {
		t.Fatalf("ww smoke %+v", s)
	}
	var back CampaignReport
	b, _ = os.ReadFile(filepath.Join(out, "campaign.json"))
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results) != 2 || back.Finished.IsZero() {
		t.Fatalf("campaign.json: %v", err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	if !strings.Contains(string(md), "| metric | p2 | ww |") || !strings.Contains(string(md), "## capacity-4") {
		t.Fatalf("summary.md:\n%s", md)
	}
	for _, p := range []string{"cache-hit.svg", "ttft-cdf-smoke.svg", "ttft-cdf-capacity-4.svg"} {
		wellFormedSVG(t, filepath.Join(out, p))
	}

	// Resume: everything is complete, nothing is sent and no hook runs.
	_ = os.Remove(filepath.Join(out, "arms", "p2", "before.txt"))
	calls.Store(0)
	c.Resume = true
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 0 {
		t.Fatalf("resume sent %d requests", calls.Load())
	}
	if _, err := os.Stat(filepath.Join(out, "arms", "p2", "before.txt")); err == nil {
		t.Fatal("resume ran the hook of a complete arm")
	}
	// An incomplete run (run.json without complete) is run again, alone.
	runJSON := filepath.Join(out, "arms", "ww", "smoke", "r2", RunFile)
	b, _ = os.ReadFile(runJSON)
	_ = os.WriteFile(runJSON, []byte(strings.Replace(string(b), `"complete": true`, `"complete": false`, 1)), 0o600)
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 32 {
		t.Fatalf("resume re-sent %d requests, want the 32 of one smoke run", calls.Load())
	}
}

func TestCampaignHookFailureStops(t *testing.T) {
	dir := t.TempDir()
	arms, _ := ReadArms(writeArms(t, dir))
	specs, _ := ExpandSuites([]string{"smoke"}, workload.SuiteParams{})
	c := &Campaign{Out: dir, Arms: arms, Suites: specs, Log: io.Discard, BeforeArm: "exit 3",
		Template: RunSpec{Client: Client{Clock: clock.Real{}}, Send: func(context.Context, *Job) Result { t.Error("sent"); return Result{} }}}
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "--before-arm") {
		t.Fatalf("err = %v", err)
	}
}

func TestReadArmsAndExpandSuitesReject(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty":      `[]`,
		"bad name":   `[{"name":"a/b"}]`,
		"dup":        `[{"name":"a"},{"name":"a"}]`,
		"missing lb": `[{"name":"a","lb_config":"nope.json"}]`,
		"not json":   `{`,
	} {
		p := filepath.Join(dir, "arms.json")
		_ = os.WriteFile(p, []byte(body), 0o600)
		if _, err := ReadArms(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p := filepath.Join(dir, "wrapped.json")
	_ = os.WriteFile(p, []byte(`{"arms":[{"name":"a"}]}`), 0o600)
	if arms, err := ReadArms(p); err != nil || len(arms) != 1 {
		t.Fatalf("wrapped arms: %v", err)
	}
	for _, in := range [][]string{{"nope"}, {"sessions@8"}, {"capacity@x"}, {""}} {
		if _, err := ExpandSuites(in, workload.SuiteParams{}); err == nil || !strings.Contains(err.Error(), "--suites") {
			t.Errorf("%v: err = %v", in, err)
		}
	}
	specs, err := ExpandSuites([]string{"capacity", "mixed"}, workload.SuiteParams{})
	if err != nil || len(specs) != len(workload.CapacityRates)+1 || specs[4].Key != "capacity-48" {
		t.Fatalf("capacity expands to %+v", specs)
	}
}

func TestInterruptedRunIsNeverComplete(t *testing.T) {
	w, err := workload.Generate(workload.SuiteSmoke, workload.SuiteParams{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 64)
	send := func(rctx context.Context, _ *Job) Result {
		started <- struct{}{}
		<-rctx.Done()
		return Result{Err: context.Cause(rctx).Error()}
	}
	dir := t.TempDir()
	go func() { <-started; cancel() }()
	_, err = Execute(ctx, RunSpec{Workload: w, Dir: dir, Client: Client{Clock: clock.Real{}}, Send: send})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v", err)
	}
	rep, complete, err := ReadRun(dir)
	if err != nil || complete || !rep.Meta.Interrupted || rep.Stats.Aborted == 0 || rep.Stats.Failed != 0 {
		t.Fatalf("complete %v, meta %+v, stats %+v, err %v", complete, rep.Meta, rep.Stats, err)
	}
	if _, err := Rerender(dir); err != nil {
		t.Fatal(err)
	}
	if _, complete, _ := ReadRun(dir); complete {
		t.Fatal("re-rendering made an interrupted run complete")
	}
}
