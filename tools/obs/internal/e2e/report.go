package e2e

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/exprs"
	"github.com/stargate-router/stargate/tools/obs/internal/plot"
)

// ReportFile is the report's name in Options.Out.
const ReportFile = "observe-e2e.md"

// PictureFile is a dashboard's picture in Options.Out.
func PictureFile(dashboard string) string { return strings.TrimSuffix(dashboard, ".json") + ".svg" }

// Write writes the report and one picture per dashboard into o.Out.
func (r *Result) Write(version string) error {
	if err := os.MkdirAll(r.Options.Out, 0o750); err != nil {
		return err
	}
	for _, d := range r.dashboards() {
		svg := plot.Dashboard(r.title(d), r.subtitle(), r.panels(d))
		if err := os.WriteFile(filepath.Join(r.Options.Out, PictureFile(d)), []byte(svg), 0o644); err != nil { //nolint:gosec // G306: documentation
			return err
		}
	}
	f, err := os.Create(filepath.Join(r.Options.Out, ReportFile))
	if err != nil {
		return err
	}
	r.report(f, version)
	return f.Close()
}

// dashboards lists the dashboard files in expression order.
func (r *Result) dashboards() []string {
	var out []string
	for _, o := range r.Outcomes {
		if o.Expr.Kind == exprs.Panel && !slices.Contains(out, o.Expr.Dashboard) {
			out = append(out, o.Expr.Dashboard)
		}
	}
	return out
}

// title is a dashboard's title.
func (r *Result) title(file string) string {
	for _, o := range r.Outcomes {
		if o.Expr.Dashboard == file && o.Expr.DashboardTitle != "" {
			return o.Expr.DashboardTitle
		}
	}
	return file
}

func (r *Result) subtitle() string {
	return fmt.Sprintf("make observe-e2e, %s: the demo stack under %.0f s of load, scraped every %s by Prometheus; [$__rate_interval] = %s, all variables at All",
		r.LoadStart.UTC().Format("2006-01-02 15:04 UTC"), r.LoadEnd.Sub(r.LoadStart).Seconds(), model(r.Options.Interval), model(r.Options.Window))
}

// panels turns a dashboard's outcomes into plot panels, one per panel.
func (r *Result) panels(file string) []plot.Panel {
	var out []plot.Panel
	index := map[int]int{}
	for _, o := range r.Outcomes {
		e := o.Expr
		if e.Kind != exprs.Panel || e.Dashboard != file {
			continue
		}
		i, ok := index[e.PanelID]
		if !ok {
			i = len(out)
			index[e.PanelID] = i
			out = append(out, plot.Panel{Title: e.PanelTitle, Unit: e.Unit, Ratio: e.Unit == "percentunit"})
		}
		p := &out[i]
		if o.Samples == 0 {
			if p.Note == "" {
				p.Note = "no data: " + firstClause(o.Expected)
			}
			continue
		}
		for _, s := range o.Result {
			l := plot.Line{Name: legend(e.Legend, s.Labels)}
			for _, pt := range s.Samples {
				l.Points = append(l.Points, plot.Point{X: pt.T.Sub(r.LoadStart).Seconds(), Y: pt.V})
			}
			p.Lines = append(p.Lines, l)
		}
	}
	for i := range out {
		slices.SortStableFunc(out[i].Lines, func(a, b plot.Line) int { return strings.Compare(a.Name, b.Name) })
		if len(out[i].Lines) > 0 {
			out[i].Note = ""
		}
	}
	return out
}

func firstClause(s string) string {
	if s == "" {
		return "nothing returned"
	}
	s, _, _ = strings.Cut(s, ";")
	if _, reason, ok := strings.Cut(s, ": "); ok {
		return reason
	}
	return s
}

var legendVar = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// legend fills a Grafana legend template with a series' labels.
func legend(format string, labels map[string]string) string {
	if format == "" {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			parts = append(parts, k+"="+labels[k])
		}
		if len(parts) == 0 {
			return "value"
		}
		return strings.Join(parts, ", ")
	}
	return legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
}

func (r *Result) report(w io.Writer, version string) {
	o := r.Options
	verdict := "PASS"
	if len(r.Problems) > 0 {
		verdict = fmt.Sprintf("FAIL (%d problems)", len(r.Problems))
	}
	fmt.Fprintf(w, "# observe-e2e: the dashboards and rules against a live stack\n\n")
	fmt.Fprintf(w, "Written by `%s` on %s at version %s. A real Prometheus\n", o.Command, r.Started.UTC().Format("2006-01-02 15:04 UTC"), version)
	fmt.Fprintf(w, "scraped the demo stack while load ran through it, with the chart's\n")
	fmt.Fprintf(w, "rules loaded; every panel query and recording rule had to return data.\n")
	fmt.Fprintf(w, "[docs/operations.md](../operations.md) explains the dashboards and alerts.\n\n")
	fmt.Fprintf(w, "| | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| result | **%s** |\n", verdict)
	fmt.Fprintf(w, "| stack | `bin/demo --keep`: a gateway (embedded Olric), a hub and 4 clusters in 2 regions, each a pylon and a mock engine; up in %.1f s |\n", r.StackUp.Seconds())
	fmt.Fprintf(w, "| Prometheus | `%s`, on loopback, scraping %d targets every %s (pylons and engines labelled `cluster` and `region`), rules evaluated every %s; ready and all targets scraped in %.1f s |\n",
		o.Prometheus, len(r.Targets), model(o.Interval), model(o.Interval), r.PrometheusUp.Seconds())
	bursts := make([]string, 0, len(o.Load.Bursts))
	for _, b := range o.Load.Bursts {
		bursts = append(bursts, "+"+b.String())
	}
	fmt.Fprintf(w, "| load | loadgen's sessions suite through the gateway (%d sessions of %d turns, 16 clients, bounded by %s), and %d bursts of %d requests of %d output tokens straight to the hub at %s (more than the 24 engine slots: admission rejections, retries, escapes), each followed by a request with a bad API key and one for an unknown model |\n",
		o.Load.Sessions, o.Load.Turns, o.Load.Deadline, len(o.Load.Bursts), o.Load.BurstSize, o.Load.BurstTokens, strings.Join(bursts, ", "))
	fmt.Fprintf(w, "| queries | each panel query over the %.0f s of load at %s steps, `$__rate_interval` = %s, every variable at All |\n",
		r.LoadEnd.Sub(r.LoadStart).Seconds(), model(o.Step), model(o.Window))
	fmt.Fprintf(w, "| total | %.0f s |\n\n", r.Finished.Sub(r.Started).Seconds())

	pd, pe, pf := r.Counts(exprs.Panel)
	rd, re, rf := r.Counts(exprs.Record)
	vd, ve, vf := r.Counts(exprs.Variable)
	fmt.Fprintf(w, "## Summary\n\n")
	fmt.Fprintf(w, "- panel queries: %d returned data, %d empty as expected, %d failed\n", pd, pe, pf)
	fmt.Fprintf(w, "- recording rules: %d returned data, %d empty as expected, %d failed\n", rd, re, rf)
	fmt.Fprintf(w, "- variables: %d listed values, %d empty as expected, %d failed\n", vd, ve, vf)
	states := r.alertStates()
	for _, s := range []string{"firing", "pending", "inactive"} {
		if len(states[s]) > 0 {
			fmt.Fprintf(w, "- alerts %s at the end: %s\n", s, strings.Join(states[s], ", "))
		}
	}
	healthy := 0
	for _, ru := range r.Rules {
		if ru.Health == "ok" {
			healthy++
		}
	}
	fmt.Fprintf(w, "- rule health: %d of %d rules evaluated without error\n", healthy, len(r.Rules))
	if len(r.EventOnlyMissing) > 0 {
		fmt.Fprintf(w, "- event-only families this run did not produce: %s\n", strings.Join(code(r.EventOnlyMissing), ", "))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "- **problem**: %s\n", p)
	}

	fmt.Fprintf(w, "\n## Panels\n")
	for _, d := range r.dashboards() {
		fmt.Fprintf(w, "\n### %s\n\n`%s`\n\n![%s](%s)\n\n", r.title(d), d, r.title(d), PictureFile(d))
		fmt.Fprintf(w, "| panel | query | series | samples | result |\n| --- | --- | --- | --- | --- |\n")
		for _, oc := range r.Outcomes {
			if oc.Expr.Kind == exprs.Panel && oc.Expr.Dashboard == d {
				fmt.Fprintf(w, "| %s | %s | %d | %d | %s |\n", cell(oc.Expr.PanelTitle), oc.Expr.RefID, oc.Series, oc.Samples, result(oc))
			}
		}
	}
	fmt.Fprintf(w, "\n## Recording rules\n\n| rule | series | samples | result |\n| --- | --- | --- | --- |\n")
	for _, oc := range r.Outcomes {
		if oc.Expr.Kind == exprs.Record {
			fmt.Fprintf(w, "| `%s` | %d | %d | %s |\n", oc.Expr.Rule, oc.Series, oc.Samples, result(oc))
		}
	}
	fmt.Fprintf(w, "\n## Variables\n\n| variable | values at the end |\n| --- | --- |\n")
	for _, oc := range r.Outcomes {
		if oc.Expr.Kind == exprs.Variable {
			vals := r.VariableValues[oc.Expr.Where]
			text := strings.Join(code(vals), ", ")
			if len(vals) == 0 {
				text = result(oc)
			}
			fmt.Fprintf(w, "| %s | %s |\n", cell(oc.Expr.Where), text)
		}
	}
}

func result(o Outcome) string {
	switch {
	case o.Err != nil:
		return "**error**: " + cell(o.Err.Error())
	case o.Samples > 0:
		return "data"
	case o.Expected != "":
		return "empty, expected: " + cell(o.Expected)
	}
	return "**no data**"
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }

func code(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "`" + s + "`"
	}
	return out
}

// Elapsed is the run's wall time.
func (r *Result) Elapsed() time.Duration { return r.Finished.Sub(r.Started) }
