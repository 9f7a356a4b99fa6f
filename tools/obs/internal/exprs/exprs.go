// Package exprs enumerates every PromQL expression the observability
// chart evaluates: each dashboard panel's queries, each variable's
// label_values selector and each rule, with a name a reader can find it
// by. The checks parse them, run them against Prometheus and compare the
// metrics they name with the binaries' registries.
package exprs

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/stargate-router/stargate/tools/obs/internal/panels"
	"github.com/stargate-router/stargate/tools/obs/internal/rules"
)

// Kind says where an expression comes from.
type Kind int

// The expression sources.
const (
	Panel Kind = iota
	Variable
	Record
	Alert
)

// Expr is one expression.
type Expr struct {
	Kind Kind
	// Where names it: "gateway.json: panel "Requests per second by
	// route" (A)", "rule llm_api_gateway:...".
	Where string
	// Raw is the expression as written (dashboard variables unexpanded).
	Raw string
	// Query is Raw with the dashboard's variables expanded, ready for
	// Prometheus.
	Query string
	// Dashboard, PanelID, PanelTitle, RefID and Legend locate a panel
	// query (Kind Panel).
	Dashboard, DashboardTitle string
	PanelID                   int
	PanelTitle                string
	RefID, Legend, Unit       string
	// Label is the label a variable lists (Kind Variable).
	Label string
	// Rule is the rule's name (Kind Record and Alert).
	Rule string
}

// FromDashboards lists the panel queries and variable selectors of ds,
// with variables at "All" and interval variables set to window.
func FromDashboards(ds []panels.Dashboard, window string) ([]Expr, error) {
	var out []Expr
	for _, d := range ds {
		for _, p := range d.QueryPanels() {
			for _, t := range p.Targets {
				out = append(out, Expr{Kind: Panel, Where: fmt.Sprintf("%s: panel %q (%s)", d.File, p.Title, t.RefID),
					Raw: t.Expr, Query: panels.Expand(t.Expr, window), Dashboard: d.File, DashboardTitle: d.Title, PanelID: p.ID, PanelTitle: p.Title,
					RefID: t.RefID, Legend: t.Legend, Unit: p.Unit()})
			}
		}
		vq := d.VariableQueries()
		for _, name := range slices.Sorted(maps.Keys(vq)) {
			q := vq[name]
			sel, label, ok := panels.LabelValuesQuery(q)
			if !ok {
				return nil, fmt.Errorf("%s: variable %s: only label_values(selector, label) queries are checked, got %q", d.File, name, q)
			}
			out = append(out, Expr{Kind: Variable, Where: fmt.Sprintf("%s: variable %s", d.File, name),
				Raw: sel, Query: panels.Expand(sel, window), Dashboard: d.File, Label: label})
		}
	}
	return out, nil
}

// Chart loads every expression of the observability chart at dir (its
// dashboards/ and rules/), with interval variables set to window, and
// the rules themselves.
func Chart(dir, window string) ([]Expr, []rules.Rule, error) {
	ds, err := panels.Load(filepath.Join(dir, "dashboards"))
	if err != nil {
		return nil, nil, err
	}
	es, err := FromDashboards(ds, window)
	if err != nil {
		return nil, nil, err
	}
	rs, err := rules.Load(filepath.Join(dir, "rules"))
	if err != nil {
		return nil, nil, err
	}
	return append(es, FromRules(rs)...), rs, nil
}

// FromRules lists the rules' expressions.
func FromRules(rs []rules.Rule) []Expr {
	out := make([]Expr, 0, len(rs))
	for _, r := range rs {
		k, what := Record, "record"
		if r.Alert != "" {
			k, what = Alert, "alert"
		}
		out = append(out, Expr{Kind: k, Where: fmt.Sprintf("%s: %s %s", r.File, what, r.Name()), Raw: r.Expr,
			Query: strings.TrimSpace(r.Expr), Rule: r.Name()})
	}
	return out
}

// nonName matches what a recording rule's name may not hold.
var nonName = regexp.MustCompile(`[^a-zA-Z0-9_:]`)

// RuleName is the record name RuleFile gives expression i: promtool's
// error then says which panel is wrong.
func RuleName(e Expr, i int) string {
	base := strings.TrimSuffix(e.Dashboard, ".json")
	if base == "" {
		base = "rule"
	}
	return nonName.ReplaceAllString(fmt.Sprintf("obs_check:%s:%d_%s", base, i, e.RefID), "_")
}

// RuleFile is a Prometheus rule file with every expression as a
// recording rule, for `promtool check rules`: promtool parses each one
// with the PromQL of the Prometheus that will run them.
func RuleFile(es []Expr) ([]byte, error) {
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	type group struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	}
	g := group{Name: "dashboard-expressions"}
	for i, e := range es {
		g.Rules = append(g.Rules, rule{Record: RuleName(e, i), Expr: e.Query})
	}
	return yaml.Marshal(map[string][]group{"groups": {g}})
}
