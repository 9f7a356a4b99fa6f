package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Paths from this package to the chart and the docs.
var (
	chartDir = filepath.Join("..", "..", "..", "..", "charts", "observability", "dashboards")
	opsDoc   = filepath.Join("..", "..", "..", "..", "docs", "operations.md")
)

func TestCommittedJSONIsCurrent(t *testing.T) {
	stale, err := Stale(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Fatal(StaleError(stale))
	}
}

func TestStaleNoticesAnEditedFile(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	if stale, err := Stale(dir); err != nil || len(stale) != 0 {
		t.Fatalf("fresh files reported stale: %v %v", stale, err)
	}
	path := filepath.Join(dir, All()[1].File)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, ' '), 0o600); err != nil {
		t.Fatal(err)
	}
	stale, err := Stale(dir)
	if err != nil || len(stale) != 1 || stale[0] != All()[1].File {
		t.Fatalf("Stale after an edit = %v, %v", stale, err)
	}
}

func TestEveryPanelIsExplainedInTheOperationsDoc(t *testing.T) {
	doc, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range All() {
		if !strings.Contains(string(doc), d.Title) {
			t.Errorf("docs/operations.md does not name dashboard %q", d.Title)
		}
		for _, r := range d.Rows {
			for _, p := range r.Panels {
				if !strings.Contains(string(doc), p.Title) {
					t.Errorf("docs/operations.md does not explain panel %q of %s", p.Title, d.Title)
				}
			}
		}
	}
}

var (
	varRef    = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	rangeVec  = regexp.MustCompile(`\[([^\]]*)\]`)
	varInExpr = regexp.MustCompile(`=~"\$[a-z_]+"`)
)

// Variables are used where All (".*") is right: only in =~ matchers; every
// defined variable is used and every used one defined; rate windows are
// Grafana's $__rate_interval, never a fixed window.
func TestQueriesUseTheirVariablesAndRateInterval(t *testing.T) {
	for _, d := range All() {
		defined := map[string]bool{}
		for _, v := range d.Vars {
			defined[v.Name] = true
		}
		used := map[string]bool{}
		check := func(where, expr string) {
			for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
				name := m[1]
				if strings.HasPrefix(name, "__") {
					continue
				}
				used[name] = true
				if !defined[name] {
					t.Errorf("%s: %s uses $%s, which the dashboard does not define", d.UID, where, name)
				}
			}
			bare := varInExpr.ReplaceAllString(expr, "")
			if strings.Contains(strings.ReplaceAll(bare, "$__rate_interval", ""), "$") {
				t.Errorf("%s: %s uses a variable outside a =~ matcher: %s", d.UID, where, expr)
			}
			for _, m := range rangeVec.FindAllStringSubmatch(expr, -1) {
				if m[1] != "$__rate_interval" {
					t.Errorf("%s: %s has range [%s], want [$__rate_interval]", d.UID, where, m[1])
				}
			}
		}
		for _, r := range d.Rows {
			for _, p := range r.Panels {
				for _, qu := range p.Queries {
					check("panel "+p.Title, qu.Expr)
				}
			}
		}
		for _, v := range d.Vars {
			check("variable "+v.Name, v.Metric)
		}
		for name := range defined {
			if !used[name] {
				t.Errorf("%s: variable $%s is defined but no query uses it", d.UID, name)
			}
		}
	}
}

func TestDashboardsAreDistinct(t *testing.T) {
	var uids, files []string
	for _, d := range All() {
		uids, files = append(uids, d.UID), append(files, d.File)
		titles := map[string]bool{}
		for _, r := range d.Rows {
			for _, p := range r.Panels {
				if titles[p.Title] {
					t.Errorf("%s: two panels are titled %q", d.UID, p.Title)
				}
				titles[p.Title] = true
				if p.Kind != Text && len(p.Queries) == 0 {
					t.Errorf("%s: panel %q has no query", d.UID, p.Title)
				}
			}
		}
	}
	slices.Sort(uids)
	slices.Sort(files)
	if len(slices.Compact(uids)) != len(All()) || len(slices.Compact(files)) != len(All()) {
		t.Errorf("uids %v or files %v repeat", uids, files)
	}
}

func TestBuildRefusesAPanelWithoutDescription(t *testing.T) {
	d := Dashboard{File: "x.json", UID: "x", Title: "x", Rows: []Row{{Title: "r", Panels: []Panel{{Title: "p", Queries: []Query{q("up", "")}}}}}}
	if _, err := Build(d); err == nil || !strings.Contains(err.Error(), "description") {
		t.Fatalf("Build = %v, want a missing-description error", err)
	}
}
