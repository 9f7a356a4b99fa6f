package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

const exposition = `# HELP stargate_routing_session_selections_total Classified selections.
# TYPE stargate_routing_session_selections_total counter
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="",selection="primary",session_state="new"} 40
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="",selection="fallback",session_state="new"} 2
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="",selection="primary",session_state="returning"} 140
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="t\"1\\",selection="fallback",session_state="returning"} 3
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="",selection="primary",session_state="stale"} 0
stargate_routing_session_selections_total{algorithm="pulsar-wait-and-widen",model="other",routing_key="",selection="primary",session_state="returning"} 99
stargate_routing_selections_total{algorithm="pulsar-wait-and-widen",model="demo-model",routing_key="",selection="primary"} 1000
`

func TestParseSelections(t *testing.T) {
	sel, err := parseSelections(strings.NewReader(exposition), "demo-model")
	if err != nil {
		t.Fatal(err)
	}
	want := selections{{"new", "primary"}: 40, {"new", "fallback"}: 2, {"returning", "primary"}: 140, {"returning", "fallback"}: 3, {"stale", "primary"}: 0}
	if len(sel) != len(want) {
		t.Fatalf("got %v, want %v", sel, want)
	}
	for k, v := range want {
		if sel[k] != v {
			t.Errorf("%v = %d, want %d", k, sel[k], v)
		}
	}
	if sel.total("returning") != 143 || sel.total("stale") != 0 {
		t.Errorf("totals: returning %d stale %d", sel.total("returning"), sel.total("stale"))
	}
	for _, bad := range []string{
		`stargate_routing_session_selections_total{model="demo-model" 1`,
		`stargate_routing_session_selections_total{model=demo-model} 1`,
		`stargate_routing_session_selections_total{model="demo-model} 1`,
		`stargate_routing_session_selections_total{model="demo-model"}`,
		`stargate_routing_session_selections_total{model="demo-model"} x`,
	} {
		if _, err := parseSelections(strings.NewReader(bad), "demo-model"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// goodStats is a run the check passes: every request ok, returning turns
// warm, both regions used.
func goodStats() loadgen.Stats {
	return loadgen.Stats{Requests: 200, OK: 200, DurationS: 8.5, ThroughputRPS: 23.5, Retries: 1,
		All:       loadgen.Class{OK: 200, UsageRequests: 200, CacheHitPct: 67.1, TTFT: loadgen.Dist{P50: 57.4, P99: 230}},
		New:       loadgen.Class{OK: 60, UsageRequests: 60, TTFT: loadgen.Dist{P50: 62.1, P99: 220.8}},
		Returning: loadgen.Class{OK: 140, UsageRequests: 140, CacheHitPct: 91.1, TTFT: loadgen.Dist{P50: 54.8, P99: 254.5}},
		Clusters: []loadgen.ClusterShare{{Cluster: "far-a", Requests: 30, SharePct: 15}, {Cluster: "far-b", Requests: 70, SharePct: 35},
			{Cluster: "near-a", Requests: 60, SharePct: 30}, {Cluster: "near-b", Requests: 40, SharePct: 20}},
		Sessions: 48, Escaped: 3, FollowEligible: 2, Followed: 2, Moves: 4}
}

func goodSelections() selections {
	return selections{{"new", "primary"}: 55, {"new", "fallback"}: 5, {"returning", "primary"}: 139, {"returning", "fallback"}: 1}
}

func TestSummaryWrite(t *testing.T) {
	var b bytes.Buffer
	newSummary(goodStats(), goodSelections(), nil, stack.DemoFleet()).write(&b)
	out := b.String()
	for _, want := range []string{
		"requests   200: 200 ok, 0 failed, 0 skipped, 0 aborted in 8.5 s (23.5 ok req/s); 1 client retries",
		"all  200   57.4 ms  230.0 ms     67.1 %",
		"returning (later turns)  140   54.8 ms  254.5 ms     91.1 %",
		"returning      139         1",
		"stale        0         0",
		"region near       100  50.0 %",
		"near-a        60  30.0 %",
		"region far       100  50.0 %",
		"48 multi-turn sessions; 3 escaped their cluster",
		"2 of the 2 escaped sessions with a later turn followed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "errors") || strings.Contains(out, "unknown") {
		t.Errorf("a clean run shows errors or unknown clusters:\n%s", out)
	}

	st := goodStats()
	st.OK, st.Failed, st.Errors = 197, 3, map[string]int{"HTTP 503: overloaded": 2, "HTTP 502: bad gateway": 1}
	st.Clusters = append(st.Clusters, loadgen.ClusterShare{Cluster: "", Requests: 5, SharePct: 2.5})
	b.Reset()
	newSummary(st, nil, errors.New("connection refused"), stack.DemoFleet()).write(&b)
	out = b.String()
	for _, want := range []string{"errors\n      2 x HTTP 503: overloaded\n      1 x HTTP 502: bad gateway\n",
		`unknown ("")`, "hub session states: not available (connection refused)"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestProblems(t *testing.T) {
	if p := newSummary(goodStats(), goodSelections(), nil, stack.DemoFleet()).problems(true); len(p) != 0 {
		t.Fatalf("a good run fails: %v", p)
	}
	for _, c := range []struct {
		name   string
		change func(*loadgen.Stats, *selections)
		want   string
	}{
		{"failed request", func(s *loadgen.Stats, _ *selections) { s.OK, s.Failed = 199, 1 }, "1 of 200 requests did not succeed"},
		{"nothing sent", func(s *loadgen.Stats, _ *selections) { s.Requests, s.OK = 0, 0 }, "0 of 0 requests"},
		{"cold returning turns", func(s *loadgen.Stats, _ *selections) { s.Returning.CacheHitPct = 41.3 }, "41.3 %"},
		{"one region", func(s *loadgen.Stats, _ *selections) { s.Clusters = s.Clusters[2:] }, "region far served no request"},
		{"unnamed cluster", func(s *loadgen.Stats, _ *selections) {
			s.Clusters = append(s.Clusters, loadgen.ClusterShare{Cluster: "", Requests: 3})
		}, `unknown cluster ""`},
		{"no hints", func(_ *loadgen.Stats, sel *selections) { *sel = selections{{"new", "primary"}: 200} }, "classified 0 of 140"},
	} {
		st, sel := goodStats(), goodSelections()
		c.change(&st, &sel)
		p := newSummary(st, sel, nil, stack.DemoFleet()).problems(true)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one saying %q", c.name, p, c.want)
		}
	}
	// Without classification (power-of-n) the hub's states are not
	// required; with it, a failed scrape fails the check.
	if p := newSummary(goodStats(), nil, nil, stack.DemoFleet()).problems(false); len(p) != 0 {
		t.Errorf("unclassified run fails: %v", p)
	}
	if p := newSummary(goodStats(), nil, errors.New("refused"), stack.DemoFleet()).problems(true); len(p) != 1 {
		t.Errorf("failed scrape: %v", p)
	}
}

func TestParseOptions(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var out bytes.Buffer
	o, err := parseOptions(nil, env(map[string]string{"DEMO_KEEP": "1"}), &out)
	if err != nil || !o.keep || o.check || o.sessions != 224 || o.turns != 6 || o.binDir != "bin" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	o, err = parseOptions([]string{"--check", "--bin-dir", "/b"}, env(nil), &out)
	if err != nil || !o.check || o.sessions != 48 || o.turns != 4 || o.deadline.Seconds() != 30 || o.binDir != "/b" {
		t.Fatalf("check: %+v %v", o, err)
	}
	o, err = parseOptions([]string{"--check", "--sessions", "10"}, env(nil), &out)
	if err != nil || o.sessions != 10 {
		t.Fatalf("--sessions: %+v %v", o, err)
	}
	if _, err := parseOptions([]string{"--workers", "0"}, env(nil), &out); err == nil {
		t.Error("--workers 0 accepted")
	}
	out.Reset()
	if code := run(t.Context(), []string{"--help"}, env(nil), &out, &out); code != exitOK ||
		!strings.Contains(out.String(), "DEMO_KEEP") || !strings.Contains(out.String(), "--check (make e2e)") {
		t.Errorf("--help: exit %d\n%s", code, out.String())
	}
}
