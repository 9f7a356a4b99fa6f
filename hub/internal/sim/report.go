package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// ArmResult is what one arm's run measured. Latencies are client-side, in
// milliseconds: TTFT and end-to-end from the gateway sending the request
// (routing waits and RTT included).
type ArmResult struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Requests  int    `json:"requests"`
	Completed int    `json:"completed"`
	// Rejected requests got no cluster (503: input-work admission, no
	// choice and no timed wait, or the 60 s routing deadline passed).
	Rejected int `json:"rejected"`
	// Admission splits the input-work admission rejections among Rejected
	// by reason; nil for an arm without max_input_work_seconds.
	Admission *AdmissionRejections `json:"admission_rejections,omitempty"`
	// PrematureRejections counts the Rejected refused while some cluster
	// had a free engine slot that no request on its way there would take:
	// capacity the router left idle. A router that only ever refuses a
	// saturated fleet has none.
	PrematureRejections int `json:"premature_rejections"`

	TTFTMs  Latency `json:"ttft_ms"`
	E2EMs   Latency `json:"e2e_ms"`
	RouteMs Latency `json:"routing_wait_ms"`
	// Waits counts timed re-decisions (Decision.Wait).
	Waits int `json:"waits"`
	// MakespanS is when the last request finished, in seconds of virtual
	// time; ThroughputRPS is completed requests over it.
	MakespanS     float64 `json:"makespan_s"`
	ThroughputRPS float64 `json:"throughput_rps"`

	Cache CacheHit `json:"cache_hit"`
	// Evictions sums every engine's KV evictions, as the mock engine's
	// mock_engine_kv_cache_evicted_blocks_total counts them.
	Evictions  Evictions      `json:"evictions"`
	Clusters   []ClusterShare `json:"clusters"`
	Regions    []RegionShare  `json:"regions"`
	Sessions   SessionMoves   `json:"sessions"`
	Escapes    Escapes        `json:"escapes"`
	Selections Selections     `json:"selections"`
	// SessionStates counts classified selections (last_cluster_affinity
	// arms only) by state and selection class, as
	// stargate_routing_session_selections_total would.
	SessionStates []StateCount `json:"session_states"`
	// Prefix is content-prefix affinity's account: tiers, the hub's
	// prefix index, copies of cached blocks.
	Prefix PrefixResult `json:"prefix"`
	// SideBySide repeats the numbers a live run of the same workload on
	// the same fleet also measures, flat and named for that comparison
	// (docs/routing-sim.md#side-by-side-with-a-live-run).
	SideBySide SideBySide `json:"side_by_side"`
}

// Evictions counts KV cache blocks evicted to make room, and their tokens.
type Evictions struct {
	Blocks int64 `json:"blocks"`
	Tokens int64 `json:"tokens"`
}

// RegionShare is how many requests a region's clusters served.
type RegionShare struct {
	Name     string  `json:"name"`
	Requests int     `json:"requests"`
	Pct      float64 `json:"pct"`
}

// Escapes counts the turns of sessions served on another cluster than the
// session's previous turn, split by what the router saw when it moved the
// turn. The live hub counts escapes by reason in
// stargate_session_escapes_total; the simulator can tell only these
// cases apart, and it never retries (no reason retry).
type Escapes struct {
	// Turns is every such turn (the sessions with at least one are
	// SessionMoves.Escaped).
	Turns int `json:"turns"`
	// LastClusterAbsent: the previous turn's cluster was not in the
	// routing snapshot (live: cluster_lost). Clusters never leave a
	// simulated fleet, so it stays 0 unless a cluster never registers.
	LastClusterAbsent int `json:"last_cluster_absent"`
	// LastClusterPresentAfterWait: it was there, and the request took at
	// least one timed wait before it went elsewhere (the affinity wait ran
	// out; live: group_saturated).
	LastClusterPresentAfterWait int `json:"last_cluster_present_after_wait"`
	// LastClusterPresentAtOnce: it was there, and the first routing pass
	// went elsewhere (no affinity wait taken: a request the hub saw as a
	// new session, as every request is without last_cluster_affinity, or
	// the affinity order put another cluster first; live: new_not_waiting
	// for the former).
	LastClusterPresentAtOnce int `json:"last_cluster_present_at_once"`
}

// SideBySide is one arm's numbers under the names a live comparison
// uses: loadgen's report names where loadgen measures the same thing.
type SideBySide struct {
	// Requests is the workload's requests; OK those that completed.
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	// PromptTokens and CachedTokens are over completed requests;
	// CacheHitPct is their ratio (loadgen's all.cache_hit_pct).
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	CacheHitPct  float64 `json:"cache_hit_pct"`
	// CacheableTokens and CeilingPct are the workload's ceiling
	// (Report.Ceiling: cacheable tokens, and their share of all prompt
	// tokens); CachedOfCeilingPct is CachedTokens over CacheableTokens
	// (loadgen's all.cacheable_tokens and all.cached_of_ceiling_pct).
	CacheableTokens    int64   `json:"cacheable_tokens"`
	CeilingPct         float64 `json:"ceiling_pct"`
	CachedOfCeilingPct float64 `json:"cached_of_ceiling_pct"`
	// EvictedBlocks is the fleet's KV evictions (the engines'
	// mock_engine_kv_cache_evicted_blocks_total, after minus before).
	EvictedBlocks int64 `json:"evicted_blocks"`
	// TTFTP50Ms and TTFTP99Ms are client TTFT percentiles.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	// RegionSharePct is each region's share of completed requests.
	RegionSharePct map[string]float64 `json:"region_share_pct"`
	// Escaped is the sessions that changed cluster between two consecutive
	// turns and Moves every such change (loadgen's escaped and moves);
	// EscapesByReason splits Moves as Escapes does.
	Escaped         int            `json:"escaped"`
	Moves           int            `json:"moves"`
	EscapesByReason map[string]int `json:"escapes_by_reason"`
	// PrematureRejections is ArmResult.PrematureRejections: 503s while a
	// cluster had a free slot.
	PrematureRejections int `json:"premature_rejections"`
	// PrefixTiers counts answered requests with a prompt summary by tier
	// (stargate_prefix_routed_total by tier).
	PrefixTiers map[string]int `json:"prefix_tiers"`
	// PrefixIndexNodes and PrefixIndexBytes are the hub's prefix index at
	// the end (stargate_prefix_index_nodes, stargate_prefix_index_bytes);
	// 0 for an arm that does not read prefixes.
	PrefixIndexNodes int   `json:"prefix_index_nodes"`
	PrefixIndexBytes int64 `json:"prefix_index_bytes"`
	// CopiesPerBlock is the mean number of clusters holding each cached
	// block (BlockCopies.Clusters); the live fleet has no such view, the
	// nearest is Σ mock_engine_kv_cache_blocks over the distinct prefixes
	// sent.
	CopiesPerBlock float64 `json:"copies_per_block"`
}

// AdmissionRejections counts requests input-work admission refused, by
// the reason stargate_admission_rejections_total would carry.
type AdmissionRejections struct {
	// InputWorkLimit: the queued input would take longer than
	// max_input_work_seconds.
	InputWorkLimit int `json:"input_work_limit_exceeded"`
	// InputWorkUnavailable: no eligible cluster reported a usable input
	// rate.
	InputWorkUnavailable int `json:"input_work_capacity_unavailable"`
}

// count adds one rejection with reason; other reasons are not admission's.
func (a *AdmissionRejections) count(reason string) {
	switch reason {
	case dispatch.ReasonInputWorkLimit:
		a.InputWorkLimit++
	case dispatch.ReasonInputWorkUnavailable:
		a.InputWorkUnavailable++
	}
}

// Latency summarises a distribution (nearest-rank percentiles).
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// CacheHit is cached over prompt tokens of completed requests, in percent:
// overall, for first turns (new sessions and anonymous requests) and for
// later turns of a session; and the cached tokens as a share of the
// workload's ceiling (Report.Ceiling.CacheableTokens).
type CacheHit struct {
	OverallPct   float64 `json:"overall_pct"`
	NewPct       float64 `json:"new_turns_pct"`
	ReturningPct float64 `json:"returning_turns_pct"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	PctOfCeiling float64 `json:"cached_of_ceiling_pct"`
}

// ClusterShare is how many requests a cluster served.
type ClusterShare struct {
	ID       string  `json:"id"`
	Requests int     `json:"requests"`
	Pct      float64 `json:"pct"`
}

// SessionMoves follows multi-turn sessions across clusters. A move is a
// turn served on another cluster than the session's previous turn; it is
// followed when the next turn stays on the new cluster (the cache moved
// with the session) and bounced when it goes back.
type SessionMoves struct {
	Sessions      int `json:"sessions"`
	MultiTurn     int `json:"multi_turn"`
	Escaped       int `json:"escaped"`
	Moves         int `json:"moves"`
	MovesWithNext int `json:"moves_with_next"`
	Followed      int `json:"followed"`
	Bounced       int `json:"bounced"`
}

// Selections counts chosen clusters by rank depth (primary = rank 1).
type Selections struct {
	Primary  int `json:"primary"`
	Fallback int `json:"fallback"`
}

// StateCount is one session state's selections.
type StateCount struct {
	State    string `json:"state"`
	Primary  int    `json:"primary"`
	Fallback int    `json:"fallback"`
}

func (r *runner) result() *ArmResult {
	res := &ArmResult{Name: r.arm.Name, Algorithm: GreedyTTFTName, Requests: len(r.reqs)}
	if r.hub != nil {
		res.Algorithm = r.hub.route.Algorithm
		if r.hub.route.HasInputWorkLimit {
			res.Admission = &AdmissionRejections{}
		}
	}
	var ttft, e2e, route []float64
	var newP, newC, retP, retC int64
	perCluster := map[string]int{}
	states := []StateCount{{State: "new"}, {State: "returning"}, {State: "stale"}}
	var end int64
	type sess struct {
		last     string
		home     string
		escaped  bool
		turns    int
		moveOpen bool   // the previous turn was a move
		from     string // where that move came from
	}
	sessions := map[string]*sess{}
	var order []*sess
	for i := range r.reqs {
		rs := &r.reqs[i]
		res.Waits += rs.waits
		if rs.rejected {
			res.Rejected++
			if rs.premature {
				res.PrematureRejections++
			}
			if res.Admission != nil {
				res.Admission.count(rs.rejectReason)
			}
			continue
		}
		if !rs.dispatched {
			continue
		}
		res.Completed++
		if !rs.pr.summary.Empty() {
			res.Prefix.Tiers.count(rs.tier)
			if rs.tier == routing.PrefixTierCache {
				res.Prefix.CacheTier.add(rs.held, rs.cached)
			}
		}
		ttft = append(ttft, ms(rs.ttft))
		e2e = append(e2e, ms(rs.e2e))
		route = append(route, ms(rs.routed-rs.start))
		end = max(end, rs.start+rs.e2e)
		perCluster[rs.cluster]++
		if rs.rankDepth > 1 {
			res.Selections.Fallback++
		} else {
			res.Selections.Primary++
		}
		if rs.sessState != routing.SessionUnclassified {
			sc := &states[int(rs.sessState)-1]
			if rs.sessSel == "primary" {
				sc.Primary++
			} else {
				sc.Fallback++
			}
		}
		if rs.wr.Turn > 1 {
			retP += int64(rs.pr.tokens)
			retC += int64(rs.cached)
		} else {
			newP += int64(rs.pr.tokens)
			newC += int64(rs.cached)
		}
		if rs.wr.Session == "" {
			continue
		}
		res.Escapes.count(rs)
		s := sessions[rs.wr.Session]
		if s == nil {
			s = &sess{home: rs.cluster, last: rs.cluster}
			sessions[rs.wr.Session] = s
			order = append(order, s)
		}
		s.turns++
		if s.turns == 1 {
			continue
		}
		if s.moveOpen {
			res.Sessions.MovesWithNext++
			switch rs.cluster {
			case s.last:
				res.Sessions.Followed++
			case s.from:
				res.Sessions.Bounced++
			}
		}
		s.moveOpen = false
		if rs.cluster != s.last {
			res.Sessions.Moves++
			s.moveOpen, s.from = true, s.last
		}
		if rs.cluster != s.home {
			s.escaped = true
		}
		s.last = rs.cluster
	}
	res.Sessions.Sessions = len(order)
	for _, s := range order {
		if s.turns > 1 {
			res.Sessions.MultiTurn++
		}
		if s.escaped {
			res.Sessions.Escaped++
		}
	}
	res.TTFTMs, res.E2EMs, res.RouteMs = summarise(ttft), summarise(e2e), summarise(route)
	res.MakespanS = float64(end) / 1e9
	if end > 0 {
		res.ThroughputRPS = round3(float64(res.Completed) / res.MakespanS)
	}
	res.MakespanS = round3(res.MakespanS)
	res.Cache = CacheHit{OverallPct: pct(newC+retC, newP+retP), NewPct: pct(newC, newP), ReturningPct: pct(retC, retP),
		PromptTokens: newP + retP, CachedTokens: newC + retC, PctOfCeiling: pct(newC+retC, r.ceiling.CacheableTokens)}
	for _, e := range r.engines {
		kv := e.kv.Stats()
		res.Evictions.Blocks += kv.EvictedBlocks
		res.Evictions.Tokens += kv.EvictedTokens
	}
	perRegion := map[string]int{}
	for _, c := range r.clusters {
		res.Clusters = append(res.Clusters, ClusterShare{ID: c.id, Requests: perCluster[c.id],
			Pct: pct(int64(perCluster[c.id]), int64(res.Completed))})
		perRegion[c.region] += perCluster[c.id]
	}
	for _, reg := range r.fleet.Regions {
		res.Regions = append(res.Regions, RegionShare{Name: reg.Name, Requests: perRegion[reg.Name],
			Pct: pct(int64(perRegion[reg.Name]), int64(res.Completed))})
	}
	res.SessionStates = states
	if r.hub != nil && r.hub.prefix != nil {
		res.Prefix.Index = indexStats(r.hub.prefix.Stats())
	}
	res.Prefix.Copies = r.copies.result(r.clusters)
	res.SideBySide = res.sideBySide(r.ceiling)
	return res
}

// count adds rs, a completed turn of a named session, if it moved.
func (x *Escapes) count(rs *reqState) {
	if rs.prevCluster == "" || rs.cluster == rs.prevCluster {
		return
	}
	x.Turns++
	switch {
	case !rs.prevPresent:
		x.LastClusterAbsent++
	case rs.waits > 0:
		x.LastClusterPresentAfterWait++
	default:
		x.LastClusterPresentAtOnce++
	}
}

// sideBySide gathers the comparison block from the finished result.
func (res *ArmResult) sideBySide(ceil Ceiling) SideBySide {
	s := SideBySide{Requests: res.Requests, OK: res.Completed,
		PromptTokens: res.Cache.PromptTokens, CachedTokens: res.Cache.CachedTokens, CacheHitPct: res.Cache.OverallPct,
		CacheableTokens: ceil.CacheableTokens, CeilingPct: ceil.Pct, CachedOfCeilingPct: res.Cache.PctOfCeiling,
		EvictedBlocks: res.Evictions.Blocks, TTFTP50Ms: res.TTFTMs.P50, TTFTP99Ms: res.TTFTMs.P99,
		RegionSharePct: map[string]float64{}, Escaped: res.Sessions.Escaped, Moves: res.Sessions.Moves,
		EscapesByReason: map[string]int{
			"last_cluster_absent":             res.Escapes.LastClusterAbsent,
			"last_cluster_present_after_wait": res.Escapes.LastClusterPresentAfterWait,
			"last_cluster_present_at_once":    res.Escapes.LastClusterPresentAtOnce,
		},
		PrematureRejections: res.PrematureRejections, PrefixTiers: res.Prefix.Tiers.byName(),
		CopiesPerBlock: res.Prefix.Copies.Clusters}
	if x := res.Prefix.Index; x != nil {
		s.PrefixIndexNodes, s.PrefixIndexBytes = x.Nodes, x.Bytes
	}
	for _, r := range res.Regions {
		s.RegionSharePct[r.Name] = r.Pct
	}
	return s
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return round3(100 * float64(a) / float64(b))
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func summarise(xs []float64) Latency {
	if len(xs) == 0 {
		return Latency{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return round3(s[max(i, 0)])
	}
	return Latency{Mean: round3(sum / float64(len(s))), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: round3(s[len(s)-1])}
}

// Report is a whole comparison: the workload and its cache ceiling, the
// fleet, the seed and every arm's result, in --arms order.
type Report struct {
	Workload WorkloadInfo `json:"workload"`
	// Warmup lists the workloads each arm replayed first (Options.Warmup).
	Warmup  []WorkloadInfo `json:"warmup,omitempty"`
	Ceiling Ceiling        `json:"ceiling"`
	Seed    uint64         `json:"seed"`
	Fleet   Fleet          `json:"fleet"`
	Arms    []*ArmResult   `json:"arms"`
}

// WorkloadInfo identifies the replayed workload.
type WorkloadInfo struct {
	Fingerprint string `json:"fingerprint"`
	Suite       string `json:"suite"`
	Seed        uint64 `json:"seed"`
	Model       string `json:"model"`
	Mode        string `json:"mode"`
	Workers     int    `json:"workers,omitempty"`
	Requests    int    `json:"requests"`
	Sessions    int    `json:"sessions"`
}

// Info describes p for a report header.
func (p *Prepared) Info() WorkloadInfo {
	h := p.W.Header
	return WorkloadInfo{Fingerprint: p.Fingerprint, Suite: h.Suite, Seed: h.Seed, Model: p.Model, Mode: h.Mode,
		Workers: h.Workers, Requests: len(p.W.Requests), Sessions: p.sessions}
}

// WriteJSON writes the report as indented JSON; the same report always
// gives the same bytes.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}

// WriteMarkdown writes the side-by-side table: one column per arm.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	wl := rep.Workload
	fmt.Fprintf(&b, "# Routing simulation\n\n")
	fmt.Fprintf(&b, "- workload: suite `%s`, %s loop", orDash(wl.Suite), wl.Mode)
	if wl.Workers > 0 {
		fmt.Fprintf(&b, " (%d workers)", wl.Workers)
	}
	fmt.Fprintf(&b, ", %d requests, %d sessions, model `%s`, workload seed %d\n", wl.Requests, wl.Sessions, wl.Model, wl.Seed)
	fmt.Fprintf(&b, "- workload fingerprint: `%s`\n", orDash(wl.Fingerprint))
	if len(rep.Warmup) > 0 {
		names := make([]string, len(rep.Warmup))
		for i, x := range rep.Warmup {
			names[i] = fmt.Sprintf("`%s` (%d requests, `%.12s`)", orDash(x.Suite), x.Requests, x.Fingerprint)
		}
		fmt.Fprintf(&b, "- warm-up: each arm's pylons first learned their input rate from %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "- ceiling: %.1f%% of %d prompt tokens cacheable at all (%d cacheable; unbounded cache, %d-token blocks)\n",
		rep.Ceiling.Pct, rep.Ceiling.PromptTokens, rep.Ceiling.CacheableTokens, rep.Ceiling.BlockTokens)
	fmt.Fprintf(&b, "- simulation seed: %d\n", rep.Seed)
	fmt.Fprintf(&b, "- fleet: %s; pylon reports every %g ms", fleetSummary(&rep.Fleet), rep.Fleet.Pylon.IntervalMs)
	if rep.Fleet.Pylon.ChangeGapMs > 0 {
		fmt.Fprintf(&b, " and %g ms after a change", rep.Fleet.Pylon.ChangeGapMs)
	}
	if rep.Fleet.Pylon.PinInputTPS {
		b.WriteString("; input TPS pinned")
	} else {
		b.WriteString("; input TPS learned")
	}
	fmt.Fprintf(&b, "; engine affinity %s", orDash(rep.Fleet.Pylon.EngineAffinity))
	if rep.Fleet.Pylon.EngineAffinity == EngineAffinityOn {
		fmt.Fprintf(&b, " (load factor %g)", rep.Fleet.Pylon.EngineAffinityLoadFactor)
		if rep.Fleet.Pylon.EngineAffinityWhenFull == EngineFullQueue {
			b.WriteString("; a full engine keeps its keys (engine_affinity_when_full queue)")
		}
	}
	b.WriteString("\n\n")

	b.WriteString("| metric |")
	for _, a := range rep.Arms {
		fmt.Fprintf(&b, " %s |", a.Name)
	}
	b.WriteString("\n|---|")
	for range rep.Arms {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(name string, f func(a *ArmResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, a := range rep.Arms {
			fmt.Fprintf(&b, " %s |", f(a))
		}
		b.WriteString("\n")
	}
	f1 := func(x float64) string { return fmt.Sprintf("%.1f", x) }
	row("requests (completed / rejected)", func(a *ArmResult) string { return fmt.Sprintf("%d / %d", a.Completed, a.Rejected) })
	if slices.ContainsFunc(rep.Arms, func(a *ArmResult) bool { return a.Admission != nil }) {
		row("rejected by admission: work limit / no input rate", func(a *ArmResult) string {
			if a.Admission == nil {
				return "–"
			}
			return fmt.Sprintf("%d / %d", a.Admission.InputWorkLimit, a.Admission.InputWorkUnavailable)
		})
	}
	row("premature rejections (a cluster had a free slot)", func(a *ArmResult) string { return fmt.Sprintf("%d", a.PrematureRejections) })
	row("TTFT p50 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P50) })
	row("TTFT p90 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P90) })
	row("TTFT p99 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P99) })
	row("TTFT mean ms", func(a *ArmResult) string { return f1(a.TTFTMs.Mean) })
	row("e2e mean ms", func(a *ArmResult) string { return f1(a.E2EMs.Mean) })
	row("e2e p99 ms", func(a *ArmResult) string { return f1(a.E2EMs.P99) })
	row("routing wait mean / p99 ms", func(a *ArmResult) string { return f1(a.RouteMs.Mean) + " / " + f1(a.RouteMs.P99) })
	row("makespan s / throughput rps", func(a *ArmResult) string { return f1(a.MakespanS) + " / " + f1(a.ThroughputRPS) })
	row("cache hit % overall", func(a *ArmResult) string { return f1(a.Cache.OverallPct) })
	row("cached % of ceiling", func(a *ArmResult) string { return f1(a.Cache.PctOfCeiling) })
	row("cache hit % first turns", func(a *ArmResult) string { return f1(a.Cache.NewPct) })
	row("cache hit % later turns", func(a *ArmResult) string { return f1(a.Cache.ReturningPct) })
	row("KV evictions (blocks)", func(a *ArmResult) string { return fmt.Sprintf("%d", a.Evictions.Blocks) })
	f2 := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	row("copies per cached block: clusters mean / end", func(a *ArmResult) string {
		return f2(a.Prefix.Copies.Clusters) + " / " + f2(a.Prefix.Copies.EndClusters)
	})
	row("copies per cached block: engines mean / end", func(a *ArmResult) string {
		return f2(a.Prefix.Copies.Engines) + " / " + f2(a.Prefix.Copies.EndEngines)
	})
	if slices.ContainsFunc(rep.Arms, func(a *ArmResult) bool { return a.Prefix.Index != nil }) {
		row("prefix tiers cache / split / overflow / load", func(a *ArmResult) string {
			if a.Prefix.Index == nil {
				return "–"
			}
			t := a.Prefix.Tiers
			return fmt.Sprintf("%d / %d / %d / %d", t.Cache, t.Split, t.Overflow, t.Load)
		})
		row("cache tier: tokens the index said held / found cached %", func(a *ArmResult) string {
			if a.Prefix.Index == nil {
				return "–"
			}
			x := a.Prefix.CacheTier
			return fmt.Sprintf("%d / %.1f", x.HeldTokens, pct(x.FoundTokens, x.HeldTokens))
		})
		row("prefix index nodes / KiB / lookup hits %", func(a *ArmResult) string {
			x := a.Prefix.Index
			if x == nil {
				return "–"
			}
			return fmt.Sprintf("%d / %.0f / %.1f", x.Nodes, float64(x.Bytes)/1024, pct(int64(x.Hits), int64(x.Lookups)))
		})
	}
	if len(rep.Arms) > 0 {
		for i, c := range rep.Arms[0].Regions {
			row("region share % "+c.Name, func(a *ArmResult) string { return f1(a.Regions[i].Pct) })
		}
		for i, c := range rep.Arms[0].Clusters {
			row("share % "+c.ID, func(a *ArmResult) string { return f1(a.Clusters[i].Pct) })
		}
	}
	row("sessions escaped / multi-turn", func(a *ArmResult) string {
		return fmt.Sprintf("%d / %d", a.Sessions.Escaped, a.Sessions.MultiTurn)
	})
	row("escaped turns: last cluster there, at once / after a wait / gone", func(a *ArmResult) string {
		e := a.Escapes
		return fmt.Sprintf("%d / %d / %d", e.LastClusterPresentAtOnce, e.LastClusterPresentAfterWait, e.LastClusterAbsent)
	})
	row("moves: followed / bounced / with a next turn", func(a *ArmResult) string {
		return fmt.Sprintf("%d / %d / %d", a.Sessions.Followed, a.Sessions.Bounced, a.Sessions.MovesWithNext)
	})
	row("selections primary / fallback", func(a *ArmResult) string {
		return fmt.Sprintf("%d / %d", a.Selections.Primary, a.Selections.Fallback)
	})
	for i, st := range []string{"new", "returning", "stale"} {
		row("session "+st+" primary / fallback", func(a *ArmResult) string {
			s := a.SessionStates[i]
			if s.Primary+s.Fallback == 0 {
				return "–"
			}
			return fmt.Sprintf("%d / %d", s.Primary, s.Fallback)
		})
	}
	row("timed waits", func(a *ArmResult) string { return fmt.Sprintf("%d", a.Waits) })
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func fleetSummary(f *Fleet) string {
	parts := make([]string, 0, len(f.Clusters))
	for i := range f.Clusters {
		c := &f.Clusters[i]
		pylons, perPylon := c.layout()
		rtt := fmt.Sprintf("%g ms RTT", float64(f.rtt(c))/1e6)
		if t := f.transit(c); t != f.rtt(c) {
			rtt += fmt.Sprintf(" (%g ms in transit)", float64(t)/1e6)
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %s, %d pylons × %d engines of %g/%g tok/s, %d slots, %d KV tokens)",
			c.ID, c.Region, rtt, pylons, perPylon, c.Engine.PrefillTPS, c.Engine.CachedPrefillTPS,
			c.Engine.MaxConcurrency, c.Engine.KVCapacityTokens))
	}
	return strings.Join(parts, ", ")
}
