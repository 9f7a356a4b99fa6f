package routepage

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

type fleet []state.ClusterView

func (f fleet) ClusterViews() []state.ClusterView { return f }

func target(model string) routing.Target { return routing.Target{Model: model} }

// twoRegions is a fleet of three clusters: near-a and near-b labelled
// "near" by their pylons, far unlabelled at 40 ms.
func twoRegions() fleet {
	return fleet{
		{Target: target("m"), ClusterID: "near-a", Region: "near", Backends: 2, RTT: time.Millisecond, UpdatedAt: now,
			Running: 8, MaxConcurrency: 8, QueuedInputTokens: 900, KVUsedTokens: 10, KVCapacityTokens: 100, InputTPS: 2000,
			Reservations: 1, ReservedTokens: 50},
		{Target: target("m"), ClusterID: "near-b", Region: "near", Backends: 2, RTT: 2 * time.Millisecond, UpdatedAt: now},
		{Target: target("m"), ClusterID: "far", Backends: 1, RTT: 40 * time.Millisecond, UpdatedAt: now.Add(-time.Minute)},
		{Target: target("other"), ClusterID: "near-b", Region: "near", Backends: 0, UpdatedAt: now},
	}
}

func build(t *testing.T, q Query, f fleet, entries ...routelog.Entry) View {
	t.Helper()
	l := routelog.New(0)
	for _, e := range entries {
		l.Append(e)
	}
	if q.WindowSeconds == 0 {
		q.WindowSeconds = 300
	}
	if q.Sessions == 0 {
		q.Sessions = DefaultSessions
	}
	if q.Turns == 0 {
		q.Turns = DefaultTurns
	}
	return Build(Input{HubID: "hub-a", Now: now, Query: q, Log: l, Fleet: f})
}

// turn is one request of session s served by cluster, at minute offset i.
func turn(s string, i int, cluster, hint, escape string) routelog.Entry {
	return routelog.Entry{Request: routelog.Request{At: now.Add(time.Duration(i-60) * time.Second), Duration: time.Second, Model: "m",
		Algorithm: "wait-and-widen", Cluster: cluster, Hint: hint, Escape: escape, Status: 200,
		Class: routing.SessionReturning, Selection: routelog.SelectionPrimary, RankDepth: 1}, Session: s}
}

func flowsOf(s Session) []string {
	var out []string
	for _, t := range s.Turns {
		out = append(out, t.Flow)
	}
	return out
}

func TestSessionFlows(t *testing.T) {
	v := build(t, Query{}, twoRegions(),
		// s1 escapes from near-a to far and follows; s2 escapes and comes back.
		turn("s1", 0, "near-a", "", ""), turn("s1", 1, "near-a", "near-a", ""),
		turn("s1", 2, "far", "near-a", "group_saturated"), turn("s1", 3, "far", "far", ""),
		turn("s2", 4, "near-b", "", ""), turn("s2", 5, "far", "near-b", "group_saturated"),
		turn("s2", 6, "near-b", "far", ""),
		// s3 moves without an escape (an algorithm without sessions), then
		// one turn is shed.
		turn("s3", 7, "near-a", "", ""), turn("s3", 8, "near-b", "", ""), turn("s3", 9, "", "", ""),
	)
	if v.Sessions.Total != 3 || v.Sessions.Shown != 3 || v.Sessions.Truncated {
		t.Fatalf("sessions %+v", v.Sessions)
	}
	byFirstCluster := map[string]Session{}
	for _, s := range v.Sessions.Items {
		byFirstCluster[s.Clusters[0]+"/"+strings.Join(s.Clusters, ",")] = s
	}
	want := map[string][]string{
		"near-a/near-a,far":    {FlowFirst, FlowStay, FlowEscape, FlowFollowed},
		"near-b/near-b,far":    {FlowFirst, FlowEscape, FlowBounced},
		"near-a/near-a,near-b": {FlowFirst, FlowMoved, FlowUnplaced},
	}
	for k, flows := range want {
		s, ok := byFirstCluster[k]
		if !ok {
			t.Fatalf("no session served by %s; have %v", k, v.Sessions.Items)
		}
		if got := flowsOf(s); !slices.Equal(got, flows) {
			t.Errorf("session %s flows %v, want %v", k, got, flows)
		}
	}
	if s := byFirstCluster["near-a/near-a,far"]; s.Escapes != 1 || s.Followed != 1 || s.Bounced != 0 || s.TurnsTotal != 4 {
		t.Errorf("escaped-and-followed counts %+v", s)
	}
	if s := byFirstCluster["near-b/near-b,far"]; s.Escapes != 1 || s.Bounced != 1 {
		t.Errorf("bounced counts %+v", s)
	}
	// Newest first: s3 ended last.
	if v.Sessions.Items[0].Clusters[0] != "near-a" || v.Sessions.Items[0].Turns[2].Flow != FlowUnplaced {
		t.Errorf("sessions not newest first: %+v", v.Sessions.Items[0])
	}
	for _, s := range v.Sessions.Items {
		if len(s.ID) != 16 || strings.Contains(s.ID, "s1") {
			t.Errorf("session id %q: want 16 hex digits of a keyed hash", s.ID)
		}
	}
}

func TestLimitsAndTruncation(t *testing.T) {
	var es []routelog.Entry
	for i := range 30 {
		es = append(es, turn("long", i, "near-a", "near-a", ""))
	}
	for i := range 5 {
		es = append(es, turn("s"+string(rune('a'+i)), 40+i, "near-b", "", ""))
	}
	v := build(t, Query{Sessions: 4, Turns: 10}, twoRegions(), es...)
	if v.Sessions.Total != 6 || v.Sessions.Shown != 4 || !v.Sessions.Truncated || len(v.Sessions.Items) != 4 {
		t.Fatalf("sessions total %d shown %d truncated %v", v.Sessions.Total, v.Sessions.Shown, v.Sessions.Truncated)
	}
	v = build(t, Query{Turns: 10}, twoRegions(), es...)
	long := v.Sessions.Items[len(v.Sessions.Items)-1]
	if long.TurnsTotal != 30 || len(long.Turns) != 10 || !long.TurnsTruncated {
		t.Fatalf("long session: total %d listed %d truncated %v", long.TurnsTotal, len(long.Turns), long.TurnsTruncated)
	}
	if !long.Turns[9].At.Equal(now.Add(-31 * time.Second)) {
		t.Fatalf("the newest turns are not the ones listed: last %v", long.Turns[9].At)
	}
}

func TestWindowAndCoverage(t *testing.T) {
	old := turn("s", 0, "near-a", "", "")
	old.At = now.Add(-20 * time.Minute)
	v := build(t, Query{WindowSeconds: 600}, twoRegions(), old, turn("s", 50, "near-a", "", ""))
	if v.Records.InWindow != 1 || v.Sessions.Items[0].TurnsTotal != 1 {
		t.Fatalf("a record from before the window counted: in window %d", v.Records.InWindow)
	}
	if !v.Records.WindowCovered || v.Records.Capacity != 1024 || v.Records.Total != 2 {
		t.Fatalf("coverage %+v", v.Records)
	}
	// A ring that went round inside the window says so.
	l := routelog.New(1024)
	for i := range 3000 {
		e := turn("s", 0, "near-a", "", "")
		e.At = now.Add(-time.Duration(3000-i) * 100 * time.Millisecond)
		l.Append(e)
	}
	v = Build(Input{HubID: "h", Now: now, Query: Query{WindowSeconds: 600, Sessions: 1, Turns: 1}, Log: l, Fleet: twoRegions()})
	if v.Records.WindowCovered || v.Records.InWindow != 1024 {
		t.Fatalf("wrapped ring: covered %v in window %d", v.Records.WindowCovered, v.Records.InWindow)
	}
}

func TestClustersAndRegions(t *testing.T) {
	v := build(t, Query{}, twoRegions(), turn("s", 1, "far", "near-a", "group_saturated"), turn("s", 2, "far", "far", ""))
	var got []string
	for _, c := range v.Clusters {
		got = append(got, c.Region+"/"+c.ClusterID+"/"+c.Model+"/"+c.Health+"/"+c.RegionSource)
	}
	want := []string{"near/near-a/m/full/pylon", "near/near-b/m/ok/pylon", "near/near-b/other/down/pylon", "rtt-1/far/m/stale/rtt"}
	if !slices.Equal(got, want) {
		t.Fatalf("clusters\n got %v\nwant %v", got, want)
	}
	far := v.Clusters[3]
	if far.Served != 2 || far.EscapesIn != 1 {
		t.Fatalf("far served %d escapes in %d", far.Served, far.EscapesIn)
	}
	a := v.Clusters[0]
	if a.Active != 8 || a.Capacity != 8 || a.QueuedInputTokens != 900 || a.KVUsedTokens != 10 || a.InputTPS != 2000 ||
		a.Reservations != 1 || a.ReservedTokens != 50 || a.RTTMs != 1 {
		t.Fatalf("near-a %+v", a)
	}
	if !slices.Equal(v.Options.Regions, []string{"near", "rtt-1"}) || !slices.Equal(v.Options.Models, []string{"m", "other"}) {
		t.Fatalf("options %+v", v.Options)
	}
	// The region filter keeps its clusters and the records they served.
	v = build(t, Query{Region: "rtt-1"}, twoRegions(), turn("s", 1, "far", "", ""), turn("t", 2, "near-a", "", ""))
	if len(v.Clusters) != 1 || v.Clusters[0].ClusterID != "far" || v.Records.InWindow != 1 {
		t.Fatalf("region filter: clusters %v in window %d", v.Clusters, v.Records.InWindow)
	}
	v = build(t, Query{Model: "other"}, twoRegions(), turn("s", 1, "far", "", ""))
	if len(v.Clusters) != 1 || v.Records.InWindow != 0 {
		t.Fatalf("model filter: clusters %v in window %d", v.Clusters, v.Records.InWindow)
	}
}

func TestRTTGroups(t *testing.T) {
	rtt := map[string]time.Duration{"a": time.Millisecond, "b": 1500 * time.Microsecond, "c": 30 * time.Millisecond,
		"d": 33 * time.Millisecond, "e": 90 * time.Millisecond}
	g := rttGroups([]string{"e", "d", "c", "b", "a"}, rtt)
	if g["a"] != "rtt-1" || g["b"] != "rtt-1" || g["c"] != "rtt-2" || g["d"] != "rtt-2" || g["e"] != "rtt-3" {
		t.Fatalf("groups %v", g)
	}
}

func TestDecisionsTimelineAndPrefixes(t *testing.T) {
	wait := turn("a", 10, "near-a", "", "")
	wait.Waits, wait.Retries, wait.Selection, wait.RankDepth, wait.Class = 3, 1, routelog.SelectionFallback, 5, routing.SessionNew
	shed := turn("b", 11, "", "", "")
	shed.Selection, shed.Status, shed.Class = routelog.SelectionNone, 503, routing.SessionStale
	p1 := turn("", 12, "near-a", "", "")
	p1.Prefix, p1.PrefixBlocks, p1.PrefixTier, p1.Class = 7, 10, routing.PrefixTierCache, routing.SessionUnclassified
	p2 := p1
	p2.Cluster, p2.PrefixBlocks, p2.PrefixTier = "near-b", 20, routing.PrefixTierSplit
	p3 := p1
	p3.Prefix = 8
	v := build(t, Query{WindowSeconds: 300}, twoRegions(), wait, shed, p1, p2, p3)
	if len(v.Decisions) != 1 {
		t.Fatalf("decisions %+v", v.Decisions)
	}
	d := v.Decisions[0]
	if d.Requests != 5 || d.Primary != 3 || d.Fallback != 1 || d.Unplaced != 1 || d.RankDepth["4+"] != 1 ||
		d.RankDepth["1"] != 3 || d.Waited != 1 || d.Waits != 3 || d.Retried != 1 || d.Retries != 1 ||
		d.SessionClasses["new"] != 1 || d.SessionClasses["stale"] != 1 || d.SessionClasses["unclassified"] != 3 ||
		d.Status["5xx"] != 1 || d.Status["2xx"] != 4 || d.PrefixTiers["cache"] != 2 || d.PrefixTiers["split"] != 1 {
		t.Fatalf("decision %+v", d)
	}
	tl := v.Timeline
	if tl.BucketSeconds != 10 || len(tl.Buckets) < 30 || len(tl.Buckets) > 31 {
		t.Fatalf("timeline: %d buckets of %d s", len(tl.Buckets), tl.BucketSeconds)
	}
	total := 0
	for _, b := range tl.Buckets {
		total += b.Requests
	}
	if total != 5 {
		t.Fatalf("timeline holds %d requests", total)
	}
	if v.Prefix.Tiers["cache"] != 2 || len(v.Prefix.Hottest) != 2 {
		t.Fatalf("prefix %+v", v.Prefix)
	}
	h := v.Prefix.Hottest[0]
	if h.Requests != 2 || h.MatchedBlocksMean != 15 || len(h.Clusters) != 2 || h.Tiers["split"] != 1 {
		t.Fatalf("hottest %+v", h)
	}
	if v.Sessions.Total != 2 {
		t.Fatalf("requests without a session key listed as sessions: %d", v.Sessions.Total)
	}
}

func TestEmptyView(t *testing.T) {
	v := build(t, Query{}, fleet{})
	if v.Schema != Schema || v.HubID != "hub-a" || !strings.Contains(v.Scope, "hub-a") || v.Clusters == nil ||
		v.Decisions == nil || v.Sessions.Items == nil || v.Prefix.Hottest == nil || v.Records.InWindow != 0 {
		t.Fatalf("empty view %+v", v)
	}
}

// The flow filter picks sessions before the limit: a bounced session
// listed after 40 newer ones is still found.
func TestFlowFilter(t *testing.T) {
	es := []routelog.Entry{
		turn("s2", 4, "near-b", "", ""), turn("s2", 5, "far", "near-b", "group_saturated"), turn("s2", 6, "near-b", "far", ""),
		turn("s1", 7, "near-a", "", ""), turn("s1", 8, "far", "near-a", "group_saturated"), turn("s1", 9, "far", "far", ""),
	}
	for i := range 40 {
		es = append(es, turn("n"+strconv.Itoa(i), 20+i, "near-a", "", ""))
	}
	v := build(t, Query{Flow: FlowBounced, Sessions: 5}, twoRegions(), es...)
	if v.Sessions.Total != 1 || len(v.Sessions.Items) != 1 || v.Sessions.Items[0].Bounced != 1 || v.Sessions.Truncated {
		t.Fatalf("bounced filter: %+v", v.Sessions)
	}
	v = build(t, Query{Flow: FlowEscape, Sessions: 1}, twoRegions(), es...)
	if v.Sessions.Total != 2 || v.Sessions.Shown != 1 || !v.Sessions.Truncated || v.Sessions.Items[0].Followed != 1 {
		t.Fatalf("escape filter: %+v", v.Sessions)
	}
	if s := v.Sessions.Items[0]; s.Algorithm != "wait-and-widen" || s.Model != "m" {
		t.Fatalf("session route %+v", s)
	}
	v = build(t, Query{Sessions: 5}, twoRegions(), es...)
	if v.Sessions.Total != 42 || v.Sessions.Shown != 5 {
		t.Fatalf("no filter: total %d shown %d", v.Sessions.Total, v.Sessions.Shown)
	}
}

func TestCoverageAndAges(t *testing.T) {
	shed := turn("s", 1, "", "", "")
	shed.Selection = routelog.SelectionNone
	v := build(t, Query{WindowSeconds: 300}, twoRegions(), shed)
	unplaced := 0
	for _, b := range v.Timeline.Buckets {
		unplaced += b.Unplaced
	}
	if unplaced != 1 || v.Records.CoveredSeconds != 300 {
		t.Fatalf("unplaced %d covered %v", unplaced, v.Records.CoveredSeconds)
	}
	for _, c := range v.Clusters {
		if c.ClusterID == "far" && c.StatsAgeSeconds != 60 {
			t.Fatalf("far's statistics are %v s old, want 60", c.StatsAgeSeconds)
		}
	}
	l := routelog.New(1024)
	for i := range 2048 {
		e := turn("s", 0, "near-a", "", "")
		e.At = now.Add(-time.Duration(2048-i) * 100 * time.Millisecond)
		l.Append(e)
	}
	v = Build(Input{HubID: "h", Now: now, Query: Query{WindowSeconds: 600, Sessions: 1, Turns: 1}, Log: l, Fleet: twoRegions()})
	if v.Records.WindowCovered || v.Records.CoveredSeconds < 102 || v.Records.CoveredSeconds > 103 {
		t.Fatalf("a ring holding 102.4 s of a 600 s window: covered %v, %v s", v.Records.WindowCovered, v.Records.CoveredSeconds)
	}
}
