package rules

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The chart's rules, their promtool tests and the runbooks, from here.
var (
	rulesDir = filepath.Join("..", "..", "..", "..", "charts", "observability", "rules")
	opsDoc   = filepath.Join("..", "..", "..", "..", "docs", "operations.md")
)

// runbookBase is the link prefix the chart's template can replace
// (charts/observability/templates/_helpers.tpl).
const runbookBase = "https://github.com/stargate-router/stargate/blob/main/docs/operations.md#"

// recordName is level:metric:operations, Prometheus' naming convention.
var recordName = regexp.MustCompile(`^[a-z_]+:[a-z_]+:[a-z0-9_]+$`)

func load(t *testing.T) ([]Rule, Tests) {
	t.Helper()
	rs, err := Load(rulesDir)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := LoadTests(filepath.Join(rulesDir, "tests"))
	if err != nil {
		t.Fatal(err)
	}
	return rs, ts
}

func TestEveryAlertHasARunbookAndBothKindsOfTest(t *testing.T) {
	rs, ts := load(t)
	anchors := docAnchors(t)
	alerts := 0
	for _, r := range rs {
		if r.Alert == "" {
			continue
		}
		alerts++
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[k] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, k)
			}
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, r.Annotations["runbook_url"], runbookBase)
		case !anchors[anchor]:
			t.Errorf("alert %s: docs/operations.md has no heading with anchor #%s", r.Alert, anchor)
		}
		if ts.Firing[r.Alert] == 0 {
			t.Errorf("alert %s: no promtool test expects it to fire", r.Alert)
		}
		if ts.Silent[r.Alert] == 0 {
			t.Errorf("alert %s: no promtool test expects it to stay silent", r.Alert)
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts found")
	}
}

func TestEveryRecordingRuleIsTested(t *testing.T) {
	rs, ts := load(t)
	for _, r := range rs {
		if r.Record == "" {
			continue
		}
		if !recordName.MatchString(r.Record) {
			t.Errorf("record %s is not level:metric:operations", r.Record)
		}
		word := regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(r.Record) + `($|[^a-zA-Z0-9_:])`)
		tested := false
		for _, e := range ts.Exprs {
			tested = tested || word.MatchString(e)
		}
		if !tested {
			t.Errorf("record %s: no promql_expr_test evaluates it", r.Record)
		}
	}
}

func TestLoadTestsCountsFiringAndSilentCases(t *testing.T) {
	dir := t.TempDir()
	const f = `tests:
  - alert_rule_test:
      - {alertname: A, eval_time: 1m, exp_alerts: []}
      - {alertname: A, eval_time: 5m, exp_alerts: [{exp_labels: {x: y}}]}
      - {alertname: B, eval_time: 5m}
    promql_expr_test:
      - {expr: 'a:b:c', eval_time: 1m}
`
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := LoadTests(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Firing["A"] != 1 || ts.Silent["A"] != 1 || ts.Firing["B"] != 0 || ts.Silent["B"] != 1 || len(ts.Exprs) != 1 {
		t.Fatalf("Tests = %+v", ts)
	}
}

// docAnchors returns the anchors GitHub gives the headings of
// docs/operations.md (lower case, punctuation dropped, spaces to '-').
func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
