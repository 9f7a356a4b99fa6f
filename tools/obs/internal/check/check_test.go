package check

import (
	"strings"
	"testing"

	"github.com/stargate-router/stargate/tools/obs/internal/metricsdoc"
	"github.com/stargate-router/stargate/tools/obs/internal/promql"
	"github.com/stargate-router/stargate/tools/obs/internal/scrape"
)

const live = `# TYPE hub_requests_total counter
hub_requests_total{model="m",status="200"} 1
# TYPE hub_duration_seconds histogram
hub_duration_seconds_bucket{model="m",le="+Inf"} 1
hub_duration_seconds_sum{model="m"} 1
hub_duration_seconds_count{model="m"} 1
# TYPE go_goroutines gauge
go_goroutines 7
`

const doc = "Every registry has the `go_*` collector.\n\n| metric | type |\n| --- | --- |\n" +
	"| `hub_requests_total` | counter |\n| `hub_duration_seconds` | histogram |\n| `hub_rare_total` | counter |\n"

func input(t *testing.T, exprs ...string) Input {
	t.Helper()
	reg := scrape.Registry{}
	if err := reg.Parse("hub", strings.NewReader(live)); err != nil {
		t.Fatal(err)
	}
	in := Input{Live: reg, Doc: metricsdoc.Parse(doc), Records: map[string]bool{"job:hub_requests:rate5m": true},
		EventOnly: map[string]string{"hub_rare_total": "only when rare things happen"}}
	for _, e := range exprs {
		refs, err := promql.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		in.Uses = append(in.Uses, Use{Where: e, Refs: refs})
	}
	return in
}

func TestRunAcceptsWhatIsExported(t *testing.T) {
	r := Run(input(t,
		`sum by (model, cluster) (rate(hub_requests_total{status="200", region=~".*"}[5m]))`,
		`histogram_quantile(0.9, sum by (le) (rate(hub_duration_seconds_bucket{model="m"}[5m])))`,
		`hub_duration_seconds_count / hub_duration_seconds_sum`,
		`job:hub_requests:rate5m > 1 and up == 1`,
		`sum by (model) (rate(hub_rare_total[5m]))`,
	))
	if len(r.Problems) != 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	if strings.Join(r.Used, ",") != "hub_duration_seconds,hub_requests_total" {
		t.Errorf("Used = %v", r.Used)
	}
	if len(r.Notes) != 2 || !strings.Contains(r.Notes[0], "hub_rare_total: used, not seen live") ||
		!strings.Contains(r.Notes[1], "docs/metrics.md: hub_rare_total documented, not seen live") {
		t.Errorf("Notes = %v", r.Notes)
	}
}

func TestRunFindsEachKindOfProblem(t *testing.T) {
	in := input(t,
		`rate(hub_requets_total[5m])`,                 // misspelt metric
		`rate(hub_requests_total{stauts="200"}[5m])`,  // misspelt label
		`sum by (mdl) (rate(hub_requests_total[5m]))`, // grouping by a label nobody carries
		`hub_requests_total_count`,                    // a counter has no _count series
		`rate(hub_duration_seconds_bucket{le="0.1", model="m"}[5m]) + rate(hub_requests_total{le="1"}[5m])`, // le only on buckets
		`{__name__=~"hub_.*"}`, // no literal name to check
	)
	in.Live["hub_undocumented_total"] = &scrape.Family{Name: "hub_undocumented_total", Labels: map[string]bool{}, Sources: []string{"hub"}}
	in.Doc.Names = append(in.Doc.Names, "hub_gone_total")
	r := Run(in)
	want := []string{
		"hub_requets_total is not exported",
		`has no label "stauts"`,
		`groups by "mdl"`,
		"hub_requests_total_count is not exported",
		`hub_requests_total has no label "le"`,
		"selects no literal metric name",
		"hub_undocumented_total (exported by hub) is not documented",
		"hub_gone_total is documented but no scraped binary exports it",
	}
	if len(r.Problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(r.Problems), len(want), strings.Join(r.Problems, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(r.Problems[i], w) {
			t.Errorf("problem %d = %q, want it to say %q", i, r.Problems[i], w)
		}
	}
}

func TestRunReportsARepeatedProblemOnce(t *testing.T) {
	r := Run(input(t, `rate(hub_nope_total[5m]) / rate(hub_nope_total[1h])`))
	if len(r.Problems) != 1 {
		t.Fatalf("problems: %v", r.Problems)
	}
}
