package exprs

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stargate-router/stargate/tools/obs/internal/panels"
	"github.com/stargate-router/stargate/tools/obs/internal/rules"
)

func board() panels.Dashboard {
	d := panels.Dashboard{File: "hub-routing.json", UID: "u"}
	d.Panels = []panels.Panel{{ID: 7, Title: "Routing duration", Targets: []panels.Target{
		{RefID: "A", Expr: `histogram_quantile(0.5, sum by (le) (rate(x_bucket{model=~"$model"}[$__rate_interval])))`, Legend: "p50"}}}}
	d.Templating.List = []panels.Variable{{Name: "model", Type: "query", Query: "label_values(x_count, model)"}}
	return d
}

func TestFromDashboards(t *testing.T) {
	es, err := FromDashboards([]panels.Dashboard{board()}, "1m")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("got %d expressions", len(es))
	}
	p, v := es[0], es[1]
	if p.Kind != Panel || p.Query != `histogram_quantile(0.5, sum by (le) (rate(x_bucket{model=~".*"}[1m])))` || p.PanelID != 7 || p.Legend != "p50" {
		t.Errorf("panel expression = %+v", p)
	}
	if v.Kind != Variable || v.Query != "x_count" || v.Label != "model" {
		t.Errorf("variable expression = %+v", v)
	}
}

func TestFromDashboardsRefusesOtherVariableQueries(t *testing.T) {
	d := board()
	d.Templating.List[0].Query = "query_result(x)"
	if _, err := FromDashboards([]panels.Dashboard{d}, "1m"); err == nil {
		t.Fatal("a query_result variable was accepted")
	}
}

func TestRuleFileNamesEachExpression(t *testing.T) {
	es, err := FromDashboards([]panels.Dashboard{board()}, "5m")
	if err != nil {
		t.Fatal(err)
	}
	es = append(es, FromRules([]rules.Rule{{Alert: "A", Expr: "x > 0\n", File: "r.yaml"}})...)
	out, err := RuleFile(es)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}
	rs := f.Groups[0].Rules
	if len(rs) != 3 || rs[0].Record != "obs_check:hub_routing:0_A" || rs[2].Record != "obs_check:rule:2_" || rs[2].Expr != "x > 0" {
		t.Fatalf("rules = %+v", rs)
	}
	if !strings.Contains(string(out), "[5m]") {
		t.Fatalf("the interval was not expanded:\n%s", out)
	}
}
