package promql

import (
	"reflect"
	"testing"
)

func TestParseListsSelectorsAndGroupings(t *testing.T) {
	r, err := Parse(`sum by (cluster) (rate(vllm:prefix_cache_hits_total{model_name=~".*", cluster=~".*"}[5m]))
		/ ignoring (cluster) group_left () sum(rate(b_total{status="complete"}[5m])) or vector(0)`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Selector{
		{Metric: "vllm:prefix_cache_hits_total", Labels: []string{"cluster", "model_name"}},
		{Metric: "b_total", Labels: []string{"status"}},
	}
	if !reflect.DeepEqual(r.Selectors, want) {
		t.Errorf("Selectors = %+v, want %+v", r.Selectors, want)
	}
	if len(r.Groupings) != 1 || !reflect.DeepEqual(r.Groupings[0], Grouping{Labels: []string{"cluster"}, Metrics: []string{"vllm:prefix_cache_hits_total"}}) {
		t.Errorf("Groupings = %+v", r.Groupings)
	}
	if got := r.Metrics(); !reflect.DeepEqual(got, []string{"b_total", "vllm:prefix_cache_hits_total"}) {
		t.Errorf("Metrics = %v", got)
	}
}

func TestParseForms(t *testing.T) {
	for _, c := range []struct {
		expr      string
		metrics   []string
		groupings []Grouping
	}{
		// by after the body, nested aggregations, histogram_quantile's le.
		{`histogram_quantile(0.99, sum(rate(x_bucket{a="b"}[5m])) by (le, route))`, []string{"x_bucket"},
			[]Grouping{{Labels: []string{"le", "route"}, Metrics: []string{"x_bucket"}}}},
		// without keeps nothing to check; keywords and numbers are not metrics.
		{`sum without (instance) (up == bool 1) > 0.5 and on (job) y offset 5m`, []string{"up", "y"}, nil},
		// a bare name, a name matcher, set operators and a 1e3 number.
		{`{__name__="up", job="x"} unless z * 1e3`, []string{"up", "z"}, nil},
		// topk's parameter; count by with the by first.
		{`topk(5, count by (model) (a) + count by (model) (b))`, []string{"a", "b"},
			[]Grouping{{Labels: []string{"model"}, Metrics: []string{"a"}}, {Labels: []string{"model"}, Metrics: []string{"b"}}}},
		// strings with escapes and commas inside matchers.
		{`m{path=~"a,\"b}", x!~'c'}`, []string{"m"}, nil},
	} {
		r, err := Parse(c.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.expr, err)
			continue
		}
		if got := r.Metrics(); !reflect.DeepEqual(got, c.metrics) {
			t.Errorf("Parse(%q) metrics = %v, want %v", c.expr, got, c.metrics)
		}
		if !reflect.DeepEqual(r.Groupings, c.groupings) {
			t.Errorf("Parse(%q) groupings = %+v, want %+v", c.expr, r.Groupings, c.groupings)
		}
	}
}

func TestParseNameMatcher(t *testing.T) {
	r, err := Parse(`sum without (instance) ({__name__="up", job="x"})`)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Selectors) != 1 || r.Selectors[0].Metric != "up" || !reflect.DeepEqual(r.Selectors[0].Labels, []string{"job"}) {
		t.Errorf("Selectors = %+v", r.Selectors)
	}
	r, err = Parse(`{__name__=~"hub_.*"}`)
	if err != nil || len(r.Selectors) != 1 || r.Selectors[0].Metric != "" {
		t.Errorf("a regex name matcher: %+v, %v", r.Selectors, err)
	}
}

func TestParseRefusesWhatItCannotRead(t *testing.T) {
	for _, expr := range []string{
		`sum(rate(x[5m])`,                        // unclosed
		`sum(rate(x[5m])))`,                      // one too many
		`rate(x{a=~"$model"}[$__rate_interval])`, // an unexpanded variable
		`x{a=}`,                                  // a matcher without a value
		`x{a="b" c="d"}`,                         // no comma
		`x{a>"b"}`,                               // not a matcher operator
		`x{a="b}`,                                // unterminated string
		`(x]`,                                    // crossed brackets
	} {
		if _, err := Parse(expr); err == nil {
			t.Errorf("Parse(%q) succeeded", expr)
		}
	}
}
