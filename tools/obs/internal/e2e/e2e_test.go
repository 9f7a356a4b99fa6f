package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
	"github.com/stargate-router/stargate/tools/obs/internal/exprs"
	"github.com/stargate-router/stargate/tools/obs/internal/promapi"
)

func TestConfigGroupsTargetsByJobWithTheirLabels(t *testing.T) {
	cfg, err := Config([]demostack.Target{
		{Job: "gateway", URL: "http://127.0.0.1:1/metrics"},
		{Job: "pylon", URL: "http://127.0.0.1:2/metrics", Labels: map[string]string{"cluster": "a", "region": "near"}},
		{Job: "pylon", URL: "http://127.0.0.1:3/metrics", Labels: map[string]string{"cluster": "b", "region": "far"}},
	}, []string{"/x/rules.yaml"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Global        map[string]string `yaml:"global"`
		RuleFiles     []string          `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
			Path    string `yaml:"metrics_path"`
			Statics []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	if c.Global["scrape_interval"] != "2s" || c.Global["evaluation_interval"] != "2s" || len(c.RuleFiles) != 1 {
		t.Fatalf("config = %s", cfg)
	}
	if len(c.ScrapeConfigs) != 2 || c.ScrapeConfigs[1].JobName != "pylon" || c.ScrapeConfigs[1].Path != "/metrics" ||
		len(c.ScrapeConfigs[1].Statics) != 2 || c.ScrapeConfigs[1].Statics[1].Targets[0] != "127.0.0.1:3" ||
		c.ScrapeConfigs[1].Statics[1].Labels["region"] != "far" {
		t.Fatalf("config = %s", cfg)
	}
}

func TestConfigRefusesWhatItCannotScrape(t *testing.T) {
	for _, ts := range [][]demostack.Target{
		{{Job: "x", URL: "https://127.0.0.1:1/metrics"}},
		{{Job: "x", URL: "http://127.0.0.1:1"}},
		{{Job: "x", URL: "http://127.0.0.1:1/metrics"}, {Job: "x", URL: "http://127.0.0.1:2/other"}},
	} {
		if _, err := Config(ts, nil, time.Second); err == nil {
			t.Errorf("Config(%v) succeeded", ts)
		}
	}
}

func TestLegend(t *testing.T) {
	labels := map[string]string{"cluster": "near-a", "state": "input_processing"}
	for format, want := range map[string]string{
		"{{cluster}} {{ state }}": "near-a input_processing",
		"{{cluster}} max":         "near-a max",
		"":                        "cluster=near-a, state=input_processing",
		"{{missing}}x":            "x",
	} {
		if got := legend(format, labels); got != want {
			t.Errorf("legend(%q) = %q, want %q", format, got, want)
		}
	}
	if got := legend("", nil); got != "value" {
		t.Errorf("legend of no labels = %q", got)
	}
}

func TestExpectedEmptyNamesAbsentEventOnlyFamilies(t *testing.T) {
	events := map[string]string{"rare_total": "only when rare", "hist": "only sometimes"}
	e := exprs.Expr{Query: `sum(rate(rare_total[1m])) / sum(rate(common_total[1m])) + sum(rate(hist_bucket[1m]))`}
	got := expectedEmpty(e, map[string]bool{"common_total": true}, events)
	if got != "hist: only sometimes; rare_total: only when rare" {
		t.Errorf("expectedEmpty = %q", got)
	}
	if got := expectedEmpty(e, map[string]bool{"rare_total": true, "hist_bucket": true}, events); got != "" {
		t.Errorf("present families still excuse: %q", got)
	}
	if got := expectedEmpty(exprs.Expr{Query: `common_total`}, nil, events); got != "" {
		t.Errorf("a plain family is excused: %q", got)
	}
}

func sampleRun() *Result {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	panel := func(id int, title, ref string) exprs.Expr {
		return exprs.Expr{Kind: exprs.Panel, Where: title, Dashboard: "hub.json", DashboardTitle: "stargate / Hub", PanelID: id,
			PanelTitle: title, RefID: ref, Legend: "{{status}}", Unit: "reqps"}
	}
	series := []promapi.Series{{Labels: map[string]string{"status": "200"},
		Samples: []promapi.Sample{{T: start, V: 1}, {T: start.Add(2 * time.Second), V: 2}}}}
	r := &Result{Started: start, LoadStart: start, LoadEnd: start.Add(60 * time.Second), Finished: start.Add(70 * time.Second),
		Options: Options{Command: "make observe-e2e", Prometheus: "prometheus", Interval: 2 * time.Second, Window: 30 * time.Second,
			Step: 2 * time.Second, Load: Load{Sessions: 8, Turns: 2, Deadline: time.Minute, Bursts: []time.Duration{10 * time.Second}}},
		Outcomes: []Outcome{
			{Expr: panel(2, "Requests", "A"), Series: 1, Samples: 2, Result: series},
			{Expr: panel(2, "Requests", "B"), Expected: "x_total: only when rare"},
			{Expr: panel(3, "Retries exhausted", "A"), Expected: "x_total: only when rare"},
			{Expr: panel(4, "Broken", "A"), Err: errors.New("bad | query")},
			{Expr: exprs.Expr{Kind: exprs.Record, Where: "rule a:b:c", Rule: "a:b:c"}},
			{Expr: exprs.Expr{Kind: exprs.Variable, Where: "hub.json: variable model", Label: "model"}, Series: 1, Samples: 1},
		},
		Rules:          []promapi.Rule{{Name: "A", Type: "alerting", Health: "ok", State: "inactive"}, {Name: "a:b:c", Type: "recording", Health: "err", LastError: "boom"}},
		VariableValues: map[string][]string{"hub.json: variable model": {"m"}},
	}
	r.judge()
	return r
}

func TestJudgeAndCounts(t *testing.T) {
	r := sampleRun()
	want := []string{"Broken: bad | query", "rule a:b:c: no data", `rule a:b:c: health "err" boom`}
	if strings.Join(r.Problems, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Problems = %q", r.Problems)
	}
	if d, e, f := r.Counts(exprs.Panel); d != 1 || e != 2 || f != 1 {
		t.Errorf("panel counts = %d %d %d", d, e, f)
	}
	if r.Err() == nil {
		t.Error("a run with problems has no error")
	}
}

func TestPanelsOnePerPanelWithNotes(t *testing.T) {
	ps := sampleRun().panels("hub.json")
	if len(ps) != 3 {
		t.Fatalf("panels = %+v", ps)
	}
	if ps[0].Title != "Requests" || len(ps[0].Lines) != 1 || ps[0].Lines[0].Name != "200" || ps[0].Note != "" ||
		ps[0].Lines[0].Points[1].X != 2 {
		t.Errorf("first panel = %+v", ps[0])
	}
	if ps[1].Note != "no data: only when rare" || len(ps[1].Lines) != 0 {
		t.Errorf("empty panel = %+v", ps[1])
	}
}

func TestWriteReportAndPictures(t *testing.T) {
	r := sampleRun()
	r.Options.Out = t.TempDir()
	if err := r.Write("abc123"); err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(filepath.Join(r.Options.Out, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`make observe-e2e`", "version abc123", "**FAIL (3 problems)**", "### stargate / Hub", "![stargate / Hub](hub.svg)",
		"| Broken | A | 0 | 0 | **error**: bad \\| query |", "empty, expected: x_total: only when rare", "| hub.json: variable model | `m` |",
		"- panel queries: 1 returned data, 2 empty as expected, 1 failed", "alerts inactive at the end: A"} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	svg, err := os.ReadFile(filepath.Join(r.Options.Out, "hub.svg"))
	if err != nil || !bytes.Contains(svg, []byte("stargate / Hub")) {
		t.Fatalf("picture: %v %.200s", err, svg)
	}
}
