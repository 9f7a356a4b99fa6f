package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/check"
	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
	"github.com/stargate-router/stargate/tools/obs/internal/exprs"
	"github.com/stargate-router/stargate/tools/obs/internal/promapi"
	"github.com/stargate-router/stargate/tools/obs/internal/promql"
)

// Options configure a run.
type Options struct {
	// Bin holds the built binaries; Prometheus is the prometheus binary.
	Bin, Prometheus string
	// Chart is the observability chart (dashboards/ and rules/).
	Chart string
	// Out receives the report and the pictures (docs/operations).
	Out string
	// Command is how the run was started, for the report.
	Command string
	// Interval is the scrape and rule evaluation interval; Window what
	// $__rate_interval becomes (Grafana makes it at least 4 intervals).
	Interval, Window time.Duration
	// Step is the resolution of the range queries.
	Step time.Duration
	Load Load
	// Log receives the children's output and progress.
	Log io.Writer
}

// Outcome of one expression.
type Outcome struct {
	Expr exprs.Expr
	// Series returned, and how many of their samples are numbers.
	Series, Samples int
	// Expected is why an empty result is fine (an event-only family the
	// run did not produce); empty when data was required.
	Expected string
	Err      error
	// Result is the range query's answer (panels and records).
	Result []promapi.Series
}

// OK reports whether the outcome passes.
func (o Outcome) OK() bool { return o.Err == nil && (o.Samples > 0 || o.Expected != "") }

// Result is a whole run.
type Result struct {
	Started                    time.Time
	LoadStart, LoadEnd         time.Time
	StackUp, PrometheusUp      time.Duration
	Targets                    []promapi.Target
	Outcomes                   []Outcome
	Rules                      []promapi.Rule
	Problems                   []string
	Finished                   time.Time
	Options                    Options
	VariableValues             map[string][]string
	Families, EventOnlyMissing []string
}

// Run starts the demo stack and Prometheus, drives the load, evaluates
// every expression and writes the report and pictures.
func Run(ctx context.Context, o Options) (*Result, error) {
	r := &Result{Started: time.Now(), Options: o, VariableValues: map[string][]string{}}
	es, rs, err := exprs.Chart(o.Chart, model(o.Window))
	if err != nil {
		return nil, err
	}
	ruleFiles := make([]string, 0, len(rs))
	for _, ru := range rs {
		f, err := filepath.Abs(filepath.Join(o.Chart, "rules", ru.File))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ruleFiles, f) {
			ruleFiles = append(ruleFiles, f)
		}
	}
	dir, err := os.MkdirTemp("", "obs-e2e-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	st, ep, err := demostack.Start(ctx, demostack.Options{BinDir: o.Bin,
		ResultsDir: filepath.Join(dir, "demo"), Args: []string{"--sessions", "8", "--turns", "2", "--deadline", "30s"}, Output: o.Log})
	if err != nil {
		return nil, err
	}
	defer func() {
		// A demo that had to be killed, or failed, is a finding too.
		if err := st.Stop(); err != nil {
			r.Problems = append(r.Problems, "stopping the demo stack: "+err.Error())
		}
	}()
	r.StackUp = time.Since(r.Started)
	c := &http.Client{Timeout: 30 * time.Second}
	targets, err := ep.Targets(ctx, c)
	if err != nil {
		return nil, err
	}
	cfg, err := Config(targets, ruleFiles, o.Interval)
	if err != nil {
		return nil, err
	}
	promStart := time.Now()
	srv, err := startPrometheus(ctx, o.Prometheus, dir, cfg, o.Log)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := waitScraped(ctx, srv.api, len(targets)); err != nil {
		return nil, err
	}
	r.PrometheusUp = time.Since(promStart)

	r.LoadStart = time.Now()
	if err := drive(ctx, o.Bin, dir, ep, o.Load, o.Log); err != nil {
		return nil, err
	}
	// Two more evaluations, so the last requests are in every rate.
	sleep(ctx, 2*o.Interval+o.Interval/2)
	r.LoadEnd = time.Now()

	if r.Targets, err = srv.api.Targets(ctx); err != nil {
		return nil, err
	}
	if r.Families, err = srv.api.Names(ctx); err != nil {
		return nil, err
	}
	r.evaluate(ctx, srv.api, es)
	if r.Rules, err = srv.api.Rules(ctx); err != nil {
		return nil, err
	}
	r.judge()
	r.Finished = time.Now()
	return r, ctx.Err()
}

// waitScraped waits until Prometheus has scraped every target once.
func waitScraped(ctx context.Context, api *promapi.Client, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss, err := api.Query(ctx, "sum(up)", time.Now())
		if err == nil && len(ss) == 1 && int(ss[0].Samples[0].V) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prometheus did not scrape all %d targets within 30 s (last answer %v): %w", n, ss, err)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// evaluate runs every panel query and recording rule over the load
// window and every variable's label_values at its end.
func (r *Result) evaluate(ctx context.Context, api *promapi.Client, es []exprs.Expr) {
	present := map[string]bool{}
	for _, f := range r.Families {
		present[f] = true
	}
	events := check.EventOnly()
	for name := range events {
		if !present[name] && !present[name+"_count"] {
			r.EventOnlyMissing = append(r.EventOnlyMissing, name)
		}
	}
	slices.Sort(r.EventOnlyMissing)
	for _, e := range es {
		out := Outcome{Expr: e}
		switch e.Kind {
		case exprs.Alert:
			continue // judged by their rule's health
		case exprs.Variable:
			ss, err := api.Query(ctx, fmt.Sprintf("count by (%s) (%s)", e.Label, e.Query), r.LoadEnd)
			out.Err = err
			for _, s := range ss {
				if v := s.Labels[e.Label]; v != "" {
					r.VariableValues[e.Where] = append(r.VariableValues[e.Where], v)
				}
			}
			slices.Sort(r.VariableValues[e.Where])
			out.Series, out.Samples = len(r.VariableValues[e.Where]), len(r.VariableValues[e.Where])
		default:
			query := e.Query
			if e.Kind == exprs.Record {
				query = e.Rule
			}
			ss, err := api.QueryRange(ctx, query, r.LoadStart, r.LoadEnd, r.Options.Step)
			out.Err, out.Result, out.Series = err, ss, len(ss)
			for _, s := range ss {
				out.Samples += s.Finite()
			}
		}
		if out.Samples == 0 && out.Err == nil {
			out.Expected = expectedEmpty(e, present, events)
			if e.Kind == exprs.Variable && e.Label == "routing_key" {
				out.Expected = emptyRoutingKey
			}
		}
		r.Outcomes = append(r.Outcomes, out)
	}
}

// emptyRoutingKey is why a routing_key variable may list nothing.
const emptyRoutingKey = `the hub exports routing_key="" for targets without a routing key (the demo has none) and Prometheus drops empty labels; All (".*") still matches them`

// expectedEmpty names the event-only families e uses that the run did
// not produce, or "" when e had to return data.
func expectedEmpty(e exprs.Expr, present map[string]bool, events map[string]string) string {
	refs, err := promql.Parse(e.Query)
	if err != nil {
		return ""
	}
	var why []string
	for _, m := range refs.Metrics() {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		if reason, ok := events[base]; ok && !present[m] {
			why = append(why, base+": "+reason)
		}
	}
	return strings.Join(why, "; ")
}

// judge collects the problems: expressions without data or failing,
// rules not healthy, targets down.
func (r *Result) judge() {
	for _, t := range r.Targets {
		if t.Health != "up" {
			r.Problems = append(r.Problems, fmt.Sprintf("target %s %s is %s: %s", t.Job, t.Instance, t.Health, t.LastError))
		}
	}
	for _, o := range r.Outcomes {
		switch {
		case o.Err != nil:
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %v", o.Expr.Where, o.Err))
		case !o.OK():
			r.Problems = append(r.Problems, fmt.Sprintf("%s: no data", o.Expr.Where))
		}
	}
	for _, ru := range r.Rules {
		if ru.Health != "ok" {
			r.Problems = append(r.Problems, fmt.Sprintf("rule %s: health %q %s", ru.Name, ru.Health, ru.LastError))
		}
	}
}

// Err is the run's verdict.
func (r *Result) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(r.Problems, "\n"))
}

// Counts summarises the outcomes per kind: passed with data, empty as
// expected, failed.
func (r *Result) Counts(k exprs.Kind) (data, expected, failed int) {
	for _, o := range r.Outcomes {
		if o.Expr.Kind != k {
			continue
		}
		switch {
		case !o.OK():
			failed++
		case o.Samples > 0:
			data++
		default:
			expected++
		}
	}
	return data, expected, failed
}

// alertStates counts alerts per state over the run's end.
func (r *Result) alertStates() map[string][]string {
	out := map[string][]string{}
	for _, ru := range r.Rules {
		if ru.Type == "alerting" {
			out[ru.State] = append(out[ru.State], ru.Name)
		}
	}
	for k := range maps.Keys(out) {
		slices.Sort(out[k])
	}
	return out
}
