package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"text/tabwriter"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// sessionMetric is the hub's count of classified routing decisions: each
// request with an affinity key is classified once as new (no hint),
// returning (the gateway hinted a cluster that can serve it) or stale (the
// hint named a cluster that cannot), and its selection is primary (a
// returning session went to its last cluster; a new or stale one stayed in
// its affinity group) or fallback.
const sessionMetric = "stargate_routing_session_selections_total"

// sessionStates are the hub's session_state labels, in the order printed.
var sessionStates = []string{"new", "returning", "stale"}

// selections counts the metric's series of one model by
// [session_state, selection].
type selections map[[2]string]int64

// total is the count of a session state over both selections.
func (s selections) total(state string) int64 {
	return s[[2]string{state, "primary"}] + s[[2]string{state, "fallback"}]
}

// parseSelections reads Prometheus text exposition and sums sessionMetric
// for model (over routing keys and algorithms).
func parseSelections(r io.Reader, model string) (selections, error) {
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the hub's metrics: %w", err)
	}
	out := selections{}
	fam := fams[sessionMetric]
	if fam == nil {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model"] == model {
			out[[2]string{labels["session_state"], labels["selection"]}] += int64(m.GetCounter().GetValue() + m.GetUntyped().GetValue())
		}
	}
	return out, nil
}

// scrapeSelections reads sessionMetric for model from the hub's /metrics.
func scrapeSelections(ctx context.Context, metricsURL, model string) (selections, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", metricsURL, resp.StatusCode)
	}
	return parseSelections(resp.Body, model)
}

// summary is what the demo reports after the run.
type summary struct {
	stats loadgen.Stats
	// sel is the hub's session classification; nil when it could not be
	// read (selErr says why) or the algorithm does not classify.
	sel    selections
	selErr error
	// regions lists region names in fleet order; regionOf maps a cluster
	// to its region.
	regions  []string
	regionOf map[string]string
}

func newSummary(st loadgen.Stats, sel selections, selErr error, f stack.Fleet) *summary {
	s := &summary{stats: st, sel: sel, selErr: selErr, regionOf: f.RegionOf()}
	for _, r := range f.Regions {
		s.regions = append(s.regions, r.Name)
	}
	return s
}

// regionShares counts successful requests per region, in fleet order;
// requests from unknown clusters are left out.
func (s *summary) regionShares() []loadgen.ClusterShare {
	counts := map[string]int{}
	for _, c := range s.stats.Clusters {
		if r, ok := s.regionOf[c.Cluster]; ok {
			counts[r] += c.Requests
		}
	}
	out := make([]loadgen.ClusterShare, 0, len(s.regions))
	for _, r := range s.regions {
		sh := loadgen.ClusterShare{Cluster: r, Requests: counts[r]}
		if s.stats.OK > 0 {
			sh.SharePct = 100 * float64(counts[r]) / float64(s.stats.OK)
		}
		out = append(out, sh)
	}
	return out
}

// write prints the summary as aligned tables.
func (s *summary) write(w io.Writer) {
	st := &s.stats
	fmt.Fprintf(w, "requests   %d: %d ok, %d failed, %d skipped, %d aborted in %.1f s (%.1f ok req/s); %d client retries\n",
		st.Requests, st.OK, st.Failed, st.Skipped, st.Aborted, st.DurationS, st.ThroughputRPS, st.Retries)
	if len(st.Errors) > 0 {
		msgs := make([]string, 0, len(st.Errors))
		for m := range st.Errors {
			msgs = append(msgs, m)
		}
		slices.SortFunc(msgs, func(a, b string) int { return st.Errors[b] - st.Errors[a] })
		fmt.Fprintln(w, "errors")
		for _, m := range msgs {
			fmt.Fprintf(w, "  %5d x %s\n", st.Errors[m], m)
		}
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "requests (client side)\tok\tTTFT p50\tTTFT p99\tcache hit\t")
	for _, c := range []struct {
		name string
		c    *loadgen.Class
	}{{"all", &st.All}, {"new (first turn, anonymous)", &st.New}, {"returning (later turns)", &st.Returning}} {
		fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%.1f ms\t%.1f %%\t\n", c.name, c.c.OK, c.c.TTFT.P50, c.c.TTFT.P99, c.c.CacheHitPct)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  cache hit = prompt tokens the engines found in their prefix cache / all prompt tokens")

	fmt.Fprintln(w)
	switch {
	case s.selErr != nil:
		fmt.Fprintf(w, "hub session states: not available (%v)\n", s.selErr)
	case s.sel == nil:
		fmt.Fprintln(w, "hub session states: none (the algorithm does not classify sessions)")
	default:
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "session state (hub)\tprimary\tfallback\t")
		for _, state := range sessionStates {
			fmt.Fprintf(tw, "%s\t%d\t%d\t\n", state, s.sel[[2]string{state, "primary"}], s.sel[[2]string{state, "fallback"}])
		}
		_ = tw.Flush()
		fmt.Fprintf(w, "  routing decisions from the hub's %s (a request the hub retries elsewhere counts again):\n", sessionMetric)
		fmt.Fprintln(w, "  returning = the gateway hinted the session's last cluster, stale = a cluster that cannot serve it;")
		fmt.Fprintln(w, "  primary = it went there (returning) or stayed in its affinity group (new, stale)")
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "served by\trequests\tshare\t")
	for _, r := range s.regionShares() {
		fmt.Fprintf(tw, "region %s\t%d\t%.1f %%\t\n", r.Cluster, r.Requests, r.SharePct)
		for _, c := range st.Clusters {
			if s.regionOf[c.Cluster] == r.Cluster {
				fmt.Fprintf(tw, "  %s\t%d\t%.1f %%\t\n", c.Cluster, c.Requests, c.SharePct)
			}
		}
	}
	for _, c := range st.Clusters {
		if _, ok := s.regionOf[c.Cluster]; !ok {
			fmt.Fprintf(tw, "unknown (%q)\t%d\t%.1f %%\t\n", c.Cluster, c.Requests, c.SharePct)
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nsessions   %d multi-turn sessions; %d escaped their cluster (changed it between two turns, %d moves in all);\n",
		st.Sessions, st.Escaped, st.Moves)
	fmt.Fprintf(w, "           %d of the %d escaped sessions with a later turn followed (stayed where they moved)\n",
		st.Followed, st.FollowEligible)
}

// Thresholds of --check.
const (
	// minReturningHitPct: a later turn re-sends its whole conversation, so
	// on the cluster of its previous turn almost all of it is cached. The
	// check workload measured about 91 % with pulsar-wait-and-widen (also
	// with six CPU burners beside it), 41 % with power-of-n and 36 % with
	// random, which ignore sessions.
	minReturningHitPct = 70
	// minClassifiedPct: the share of later turns the hub must classify
	// returning, i.e. that arrived with the gateway's last-cluster hint
	// (measured 99-100 %). Below 100 because a lookup over its 20 ms
	// deadline on a loaded machine sends no hint; a broken hint path
	// gives 0.
	minClassifiedPct = 80
)

// problems lists why a --check run fails; none means it passed.
// classifies says whether the algorithm classifies sessions.
func (s *summary) problems(classifies bool) []string {
	st := &s.stats
	var out []string
	if st.Requests == 0 || st.OK != st.Requests {
		out = append(out, fmt.Sprintf("%d of %d requests did not succeed (%d failed, %d skipped, %d aborted)",
			st.Requests-st.OK, st.Requests, st.Failed, st.Skipped, st.Aborted))
	}
	if st.Returning.UsageRequests == 0 || st.Returning.CacheHitPct < minReturningHitPct {
		out = append(out, fmt.Sprintf("returning turns hit the cache for %.1f %% of their prompt tokens, want >= %d %%: sessions are not kept on their cluster",
			st.Returning.CacheHitPct, minReturningHitPct))
	}
	for _, r := range s.regionShares() {
		if r.Requests == 0 {
			out = append(out, fmt.Sprintf("region %s served no request", r.Cluster))
		}
	}
	for _, c := range st.Clusters {
		if _, ok := s.regionOf[c.Cluster]; !ok {
			out = append(out, fmt.Sprintf("%d requests were served by unknown cluster %q (x-mock-engine-id lost on the way?)", c.Requests, c.Cluster))
		}
	}
	if !classifies {
		return out
	}
	if s.selErr != nil {
		return append(out, fmt.Sprintf("reading the hub's %s: %v", sessionMetric, s.selErr))
	}
	if got, want := s.sel.total("returning"), st.Returning.OK; want == 0 || float64(got) < float64(want)*minClassifiedPct/100 {
		out = append(out, fmt.Sprintf("the hub classified %d of %d later turns as returning, want >= %d %%: the gateway's last-cluster hints do not arrive",
			got, want, minClassifiedPct))
	}
	return out
}
