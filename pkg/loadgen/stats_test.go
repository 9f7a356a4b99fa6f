package loadgen

import (
	"math"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		vs   []float64
		p    float64
		want float64
	}{
		{ten, 50, 5},   // ceil(5) = 5th
		{ten, 90, 9},   // ceil(9) = 9th
		{ten, 99, 10},  // ceil(9.9) = 10th
		{ten, 10, 1},   // ceil(1) = 1st
		{ten, 11, 2},   // ceil(1.1) = 2nd: never interpolated
		{ten, 100, 10}, // the maximum
		{ten, 0, 1},    // rank clamps to 1
		{[]float64{7}, 99, 7},
		{nil, 50, 0},
		{[]float64{10, 20, 30, 40}, 50, 20}, // ceil(2) = 2nd, not 25
	} {
		if got := Percentile(c.vs, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.vs, c.p, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		vs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{5}, 5}, {nil, 0}} {
		if got := Median(c.vs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.vs, got, c.want)
		}
	}
	vs := []float64{3, 1, 2}
	Median(vs)
	if vs[0] != 3 {
		t.Fatal("Median sorted its argument")
	}
}

func ok(session string, turn int, cluster string, prompt, cached int, ttft float64) Record {
	return Record{Session: session, Turn: turn, Cluster: cluster, PromptTokens: prompt, CachedTokens: cached, Usage: true,
		TTFTMs: ttft, LatencyMs: ttft + 100, OutputTokens: 11, Status: 200, Outcome: OutcomeOK}
}

func TestComputeHandChecked(t *testing.T) {
	recs := []Record{
		ok("a", 1, "c1", 1000, 0, 10),
		ok("a", 2, "c1", 1200, 1000, 20),
		ok("b", 1, "c2", 500, 0, 30),
		ok("b", 2, "c2", 700, 600, 40),
		ok("", 1, "c1", 100, 0, 50),
		{Session: "c", Turn: 1, Outcome: OutcomeError, Status: 503, Error: "HTTP 503: overloaded"},
		{Session: "c", Turn: 2, Outcome: OutcomeSkipped},
		// Success without usage: not in the cache-hit figures.
		{Session: "d", Turn: 1, Cluster: "c2", TTFTMs: 60, LatencyMs: 160, OutputTokens: 11, Status: 200, Outcome: OutcomeOK},
	}
	s := Compute(recs, 10, 8, 0)
	if s.Requests != 8 || s.OK != 6 || s.Failed != 1 || s.Skipped != 1 || s.Errors["HTTP 503: overloaded"] != 1 {
		t.Fatalf("counts %+v", s)
	}
	// Cache hit over successful requests reporting usage:
	// (0+1000+0+600+0) / (1000+1200+500+700+100) = 1600/3500.
	if want := 100 * 1600.0 / 3500; math.Abs(s.All.CacheHitPct-want) > 1e-9 {
		t.Fatalf("cache hit %v, want %v", s.All.CacheHitPct, want)
	}
	if s.All.UsageRequests != 5 || s.All.HitSharePct != 40 {
		t.Fatalf("usage requests %d, hit share %v, want 5 and 40", s.All.UsageRequests, s.All.HitSharePct)
	}
	// Returning: 1600/1900; new: 0.
	if want := 100 * 1600.0 / 1900; math.Abs(s.Returning.CacheHitPct-want) > 1e-9 || s.New.CacheHitPct != 0 {
		t.Fatalf("returning %v new %v", s.Returning.CacheHitPct, s.New.CacheHitPct)
	}
	// New: a1, b1, anon, d1 ok plus c1 failed = 5 requests; returning: a2,
	// b2 plus the skipped c2 = 3.
	if s.New.Requests != 5 || s.New.OK != 4 || s.Returning.Requests != 3 || s.Returning.OK != 2 {
		t.Fatalf("new %+v returning %+v", s.New, s.Returning)
	}
	// TTFTs 10..60: p50 = 3rd of 6 = 30, p99 = 60.
	if s.All.TTFT.P50 != 30 || s.All.TTFT.P99 != 60 || s.All.TTFT.N != 6 {
		t.Fatalf("TTFT %+v", s.All.TTFT)
	}
	// Decode: 10 tokens after the first in 100 ms = 100 tokens/s.
	if s.DecodeTPS.P50 != 100 {
		t.Fatalf("decode %+v", s.DecodeTPS)
	}
	if s.ThroughputRPS != 0.6 || s.OutputTPS != 6.6 || s.AchievedRate != 7.0/8 {
		t.Fatalf("throughput %v, output tok/s %v, achieved %v", s.ThroughputRPS, s.OutputTPS, s.AchievedRate)
	}
	if len(s.Clusters) != 2 || s.Clusters[0].Cluster != "c1" || s.Clusters[0].Requests != 3 || s.Clusters[1].Requests != 3 || s.Clusters[0].SharePct != 50 {
		t.Fatalf("clusters %+v", s.Clusters)
	}
}

func TestEscapedAndFollowed(t *testing.T) {
	seq := func(name string, clusters ...string) []Record {
		var out []Record
		for i, c := range clusters {
			out = append(out, ok(name, i+1, c, 100, 0, 1))
		}
		return out
	}
	var recs []Record
	recs = append(recs, seq("stay", "A", "A", "A")...)            // never moves
	recs = append(recs, seq("follow", "A", "B", "B", "B")...)     // escapes, follows
	recs = append(recs, seq("bounce", "A", "B", "A", "A")...)     // escapes, returns: not followed
	recs = append(recs, seq("late", "A", "A", "B")...)            // escapes on its last turn: not eligible
	recs = append(recs, seq("twice", "A", "B", "B", "C", "C")...) // follows B, then moves again: not followed
	recs = append(recs, seq("single", "A")...)                    // one turn: not counted
	// Turn order, not record order, defines movement.
	recs = append(recs, ok("shuffled", 3, "B", 1, 0, 1), ok("shuffled", 1, "A", 1, 0, 1), ok("shuffled", 2, "B", 1, 0, 1))
	// A failed turn and a turn without a cluster are ignored.
	recs = append(recs, seq("gap", "A", "A")...)
	recs = append(recs, Record{Session: "gap", Turn: 3, Cluster: "B", Outcome: OutcomeError}, ok("gap", 4, "", 1, 0, 1))
	s := Compute(recs, 1, 1, 0)
	if s.Sessions != 7 || s.Escaped != 5 || s.FollowEligible != 4 || s.Followed != 2 || s.Moves != 7 {
		t.Fatalf("sessions %d escaped %d eligible %d followed %d moves %d, want 7 5 4 2 7", s.Sessions, s.Escaped, s.FollowEligible, s.Followed, s.Moves)
	}
}

func TestAggregateMediansAndSums(t *testing.T) {
	run := func(okN int, hit, p50, p99, rps float64, esc int, cluster string) Stats {
		return Stats{Runs: 1, Requests: okN + 1, OK: okN, Failed: 1, ThroughputRPS: rps, Escaped: esc,
			All:      Class{Requests: okN + 1, OK: okN, UsageRequests: okN, CacheHitPct: hit, TTFT: Dist{N: okN, P50: p50, P99: p99}},
			Clusters: []ClusterShare{{Cluster: cluster, Requests: okN, SharePct: 100}}}
	}
	agg := Aggregate([]Stats{run(10, 40, 100, 900, 5, 1, "x"), run(30, 60, 300, 100, 7, 2, "y"), run(20, 10, 200, 500, 9, 3, "x")})
	if agg.Runs != 3 || agg.Requests != 63 || agg.OK != 60 || agg.Failed != 3 || agg.Escaped != 6 {
		t.Fatalf("sums %+v", agg)
	}
	// Medians of per-run values, not pooled: p99 is median(900, 100, 500).
	if agg.All.CacheHitPct != 40 || agg.All.TTFT.P50 != 200 || agg.All.TTFT.P99 != 500 || agg.ThroughputRPS != 7 || agg.All.TTFT.N != 60 {
		t.Fatalf("medians: hit %v p50 %v p99 %v rps %v n %d", agg.All.CacheHitPct, agg.All.TTFT.P50, agg.All.TTFT.P99, agg.ThroughputRPS, agg.All.TTFT.N)
	}
	if len(agg.Clusters) != 2 || agg.Clusters[0].Requests != 30 || agg.Clusters[0].SharePct != 50 {
		t.Fatalf("clusters %+v", agg.Clusters)
	}
	two := Aggregate([]Stats{run(10, 40, 100, 900, 5, 1, "x"), run(30, 60, 300, 100, 7, 2, "y")})
	if two.All.CacheHitPct != 50 || two.All.TTFT.P99 != 500 {
		t.Fatalf("even count: hit %v p99 %v, want means of the middle two", two.All.CacheHitPct, two.All.TTFT.P99)
	}
}

// TestCeilingShare: cached % of ceiling is over the same requests as the
// cache hit (successful, with usage), summed in a run and the median of
// the runs' values across runs; counters sum across runs.
func TestCeilingShare(t *testing.T) {
	rec := func(prompt, cached, cacheable int) Record {
		r := ok("a", 2, "c", prompt, cached, 1)
		r.CacheableTokens = cacheable
		return r
	}
	recs := []Record{rec(100, 40, 80), rec(100, 20, 20), rec(100, 0, 0),
		{Session: "x", Turn: 2, Outcome: OutcomeError, CacheableTokens: 500}}
	s := Compute(recs, 1, 1, 0)
	if s.All.CacheableTokens != 100 || s.All.CeilingPct != 60 || s.Returning.CeilingPct != 60 {
		t.Fatalf("ceiling %d tokens, cached %v %% of it", s.All.CacheableTokens, s.All.CeilingPct)
	}
	if none := Compute([]Record{ok("a", 1, "c", 100, 0, 1)}, 1, 1, 0); none.All.CeilingPct != 0 || ceilingText(&none.All) != "-" {
		t.Fatalf("nothing cacheable: %v %q", none.All.CeilingPct, ceilingText(&none.All))
	}
	other := Compute([]Record{rec(100, 10, 100)}, 1, 1, 0)
	third := Compute([]Record{rec(100, 50, 50)}, 1, 1, 0)
	s.Counters = &Counters{Engines: 2, EvictedBlocks: 3, Escapes: map[string]float64{"retry": 1}}
	third.Counters = &Counters{Engines: 2, EvictedBlocks: 4}
	agg := Aggregate([]Stats{s, other, third})
	if agg.All.CacheableTokens != 250 || agg.All.CeilingPct != 60 {
		t.Fatalf("aggregate: %d tokens, %v %% (want the median of 60, 10 and 100)", agg.All.CacheableTokens, agg.All.CeilingPct)
	}
	if c := agg.Counters; c == nil || c.EvictedBlocks != 7 || c.Escapes["retry"] != 1 || c.Engines != 2 {
		t.Fatalf("aggregate counters %+v", agg.Counters)
	}
}
