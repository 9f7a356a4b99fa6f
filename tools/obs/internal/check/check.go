// Package check compares what the dashboards and rules use, and what
// docs/metrics.md documents, with what the binaries really export (a
// scrape.Registry of their live /metrics).
package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/stargate-router/stargate/tools/obs/internal/metricsdoc"
	"github.com/stargate-router/stargate/tools/obs/internal/promql"
	"github.com/stargate-router/stargate/tools/obs/internal/scrape"
)

// TargetLabels are the labels Prometheus adds to every series of a
// scrape, which no binary exports: job and instance always, cluster and
// region on the pylons' and engines' targets (docs/operations.md says how
// the charts set them).
func TargetLabels() []string { return []string{"job", "instance", "cluster", "region"} }

// synthetic reports whether Prometheus itself writes the series for
// every target (up), so no binary exports it.
func synthetic(name string) bool { return name == "up" }

// EventOnly lists families that exist only after an event a short demo
// run does not cause on its own, with the reason. Such a family may be
// missing from the live registries: the check then says so instead of
// failing, and relies on docs/metrics.md and the code for it.
func EventOnly() map[string]string {
	return map[string]string{
		"stargate_proxy_retries_total":                             "only when a pylon refuses or a tunnel fails; the overload burst usually causes a few",
		"pylon_retryable_responses_total":                          "only when a pylon refuses a request as retryable; the overload burst usually causes a few",
		"stargate_proxy_retry_exhausted_total":                     "only when a request runs out of retries",
		"stargate_admission_rejections_total":                      "only when a request is refused before any upstream (its routing wait ran out, or input-work admission); the overload burst usually causes a few",
		"stargate_backend_breaker_state":                           "only once a backend's error breaker has opened",
		"stargate_backend_breaker_transitions_total":               "only once a backend's error breaker has opened",
		"stargate_model_unavailable_waits_total":                   "only when a request waits for a known model's backends to come back",
		"stargate_model_unavailable_waiting":                       "only when a request waits for a known model's backends to come back",
		"stargate_deadline_exceeded_total":                         "only when a request's deadline passes",
		"pylon_deadline_exceeded_total":                            "only when a request's deadline passes",
		"stargate_routing_waiting_requests":                        "only once a request has waited for a cluster with room",
		"stargate_routing_waiting_room_refusals_total":             "only once a request has waited for a cluster with room",
		"stargate_routing_waiting_room_displacements_total":        "only once a request has waited for a cluster with room",
		"stargate_routing_returning_priority_yields_total":         "only once a request has waited for a cluster with room",
		"stargate_routing_kv_free_token_fallback_selections_total": "only with consider_kv_free_tokens and a full KV cache",
		"pylon_nonretryable_failures_total":                        "only when an engine fails a request for good",
		"pylon_model_calibration_duration_ms":                      "only when a pylon calibrates at startup; the demo's pylons start with --initial-input-tps",
		"pylon_engine_stats_stale_cleanups_total":                  "only after 30 s (stats) or 300 s (requests) without engine events",
		"pylon_engine_stats_source_transitions_total":              "only when the throughput source changes (an engine without a stats stream)",
		"stargate_prefix_summaries_total":                          "only for requests of a prefix-aware route (prefix-affinity, or prefix_affinity on wait-and-widen); the demo routes with pulsar-wait-and-widen (hub/e2e TestE2E/Suite/PrefixAffinity scrapes it)",
		"stargate_prefix_routed_total":                             "only for requests of a prefix-aware route answered 2xx; the demo routes with pulsar-wait-and-widen (hub/e2e TestE2E/Suite/PrefixAffinity scrapes it)",
	}
}

// Use is one expression a dashboard panel, variable or rule evaluates.
type Use struct {
	// Where names it for a reader: file, panel or rule, query.
	Where string
	Refs  promql.Refs
}

// Input is what Run compares.
type Input struct {
	Uses []Use
	// Records are the recording rules' names: expressions may select
	// them, and no binary exports them.
	Records map[string]bool
	Live    scrape.Registry
	Doc     metricsdoc.Doc
	// EventOnly is EventOnly() unless a test sets its own.
	EventOnly map[string]string
}

// Report is the outcome: Problems fail the check, Notes inform.
type Report struct {
	Problems, Notes []string
	// Used are the distinct exported families the expressions use.
	Used []string
}

// Run compares. The metric names of every expression must be exported
// (or be a recording rule, or synthetic, or an absent event-only family),
// their matchers and groupings must use labels the series carry, and
// docs/metrics.md must document exactly the exported families.
func Run(in Input) Report {
	var r Report
	used := map[string]bool{}
	absentEvent := map[string]bool{}
	target := map[string]bool{}
	for _, l := range TargetLabels() {
		target[l] = true
	}
	for _, u := range in.Uses {
		for _, s := range u.Refs.Selectors {
			if s.Metric == "" {
				r.Problems = append(r.Problems, fmt.Sprintf("%s: selects no literal metric name", u.Where))
				continue
			}
			if in.Records[s.Metric] || synthetic(s.Metric) {
				continue
			}
			f, extra, ok := in.Live.Lookup(s.Metric)
			if !ok {
				base := family(s.Metric)
				if _, ev := in.EventOnly[base]; ev {
					absentEvent[base] = true
					continue
				}
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s is not exported by any scraped binary", u.Where, s.Metric))
				continue
			}
			used[f.Name] = true
			for _, l := range s.Labels {
				if !f.Labels[l] && !target[l] && l != extra {
					r.Problems = append(r.Problems, fmt.Sprintf("%s: %s has no label %q (it has %s)", u.Where, s.Metric, l, labelList(f.Labels)))
				}
			}
		}
		for _, g := range u.Refs.Groupings {
			r.Problems = append(r.Problems, grouping(u.Where, g, in, target)...)
		}
	}
	r.Used = slices.Sorted(maps.Keys(used))
	for _, name := range slices.Sorted(maps.Keys(absentEvent)) {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: used, not seen live (%s)", name, in.EventOnly[name]))
	}
	r.docs(in)
	r.Problems = unique(r.Problems)
	return r
}

// unique drops repeated lines (an expression naming a metric twice),
// keeping the first of each in order.
func unique(lines []string) []string {
	seen := map[string]bool{}
	out := lines[:0]
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// grouping checks that every by (...) label comes from a series under
// the aggregation or from the scrape.
func grouping(where string, g promql.Grouping, in Input, target map[string]bool) []string {
	have := map[string]bool{}
	known := false
	for _, m := range g.Metrics {
		if in.Records[m] {
			return nil // a record's labels are its own rule's business
		}
		f, extra, ok := in.Live.Lookup(m)
		if !ok {
			continue
		}
		known = true
		for l := range f.Labels {
			have[l] = true
		}
		if extra != "" {
			have[extra] = true
		}
	}
	if !known {
		return nil
	}
	var out []string
	for _, l := range g.Labels {
		if !have[l] && !target[l] {
			out = append(out, fmt.Sprintf("%s: groups by %q, which none of %s carries", where, l, strings.Join(g.Metrics, ", ")))
		}
	}
	return out
}

// docs compares docs/metrics.md with the live families, both ways.
func (r *Report) docs(in Input) {
	for _, name := range in.Live.Names() {
		if !in.Doc.Covers(name) {
			r.Problems = append(r.Problems, fmt.Sprintf("docs/metrics.md: %s (exported by %s) is not documented",
				name, strings.Join(in.Live[name].Sources, ", ")))
		}
	}
	for _, name := range in.Doc.Names {
		if _, ok := in.Live[name]; ok {
			continue
		}
		if reason, ev := in.EventOnly[name]; ev {
			r.Notes = append(r.Notes, fmt.Sprintf("docs/metrics.md: %s documented, not seen live (%s)", name, reason))
			continue
		}
		r.Problems = append(r.Problems, fmt.Sprintf("docs/metrics.md: %s is documented but no scraped binary exports it", name))
	}
}

// family strips a histogram series suffix.
func family(series string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(series, s); ok {
			return b
		}
	}
	return series
}

func labelList(ls map[string]bool) string {
	if len(ls) == 0 {
		return "no labels"
	}
	return strings.Join(slices.Sorted(maps.Keys(ls)), ", ")
}
