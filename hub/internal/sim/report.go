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

	TTFTMs  Latency `json:"ttft_ms"`
	E2EMs   Latency `json:"e2e_ms"`
	RouteMs Latency `json:"routing_wait_ms"`
	// Waits counts timed re-decisions (Decision.Wait).
	Waits int `json:"waits"`
	// MakespanS is when the last request finished, in seconds of virtual
	// time; ThroughputRPS is completed requests over it.
	MakespanS     float64 `json:"makespan_s"`
	ThroughputRPS float64 `json:"throughput_rps"`

	Cache      CacheHit       `json:"cache_hit"`
	Clusters   []ClusterShare `json:"clusters"`
	Sessions   SessionMoves   `json:"sessions"`
	Selections Selections     `json:"selections"`
	// SessionStates counts classified selections (last_cluster_affinity
	// arms only) by state and selection class, as
	// stargate_routing_session_selections_total would.
	SessionStates []StateCount `json:"session_states"`
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
// later turns of a session.
type CacheHit struct {
	OverallPct   float64 `json:"overall_pct"`
	NewPct       float64 `json:"new_turns_pct"`
	ReturningPct float64 `json:"returning_turns_pct"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
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
	res := &ArmResult{Name: r.arm.Name, Algorithm: OracleName, Requests: len(r.reqs)}
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
			if res.Admission != nil {
				res.Admission.count(rs.rejectReason)
			}
			continue
		}
		if !rs.dispatched {
			continue
		}
		res.Completed++
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
		PromptTokens: newP + retP, CachedTokens: newC + retC}
	for _, c := range r.clusters {
		res.Clusters = append(res.Clusters, ClusterShare{ID: c.id, Requests: perCluster[c.id],
			Pct: pct(int64(perCluster[c.id]), int64(res.Completed))})
	}
	res.SessionStates = states
	return res
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

// Report is a whole comparison: the workload, the fleet, the seed and
// every arm's result, in --arms order.
type Report struct {
	Workload WorkloadInfo `json:"workload"`
	Seed     uint64       `json:"seed"`
	Fleet    Fleet        `json:"fleet"`
	Arms     []*ArmResult `json:"arms"`
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
	fmt.Fprintf(&b, "- simulation seed: %d\n", rep.Seed)
	fmt.Fprintf(&b, "- fleet: %s; pylon reports every %g ms", fleetSummary(&rep.Fleet), rep.Fleet.Pylon.IntervalMs)
	if rep.Fleet.Pylon.ChangeGapMs > 0 {
		fmt.Fprintf(&b, " and %g ms after a change", rep.Fleet.Pylon.ChangeGapMs)
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
	row("TTFT p50 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P50) })
	row("TTFT p90 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P90) })
	row("TTFT p99 ms", func(a *ArmResult) string { return f1(a.TTFTMs.P99) })
	row("TTFT mean ms", func(a *ArmResult) string { return f1(a.TTFTMs.Mean) })
	row("e2e mean ms", func(a *ArmResult) string { return f1(a.E2EMs.Mean) })
	row("e2e p99 ms", func(a *ArmResult) string { return f1(a.E2EMs.P99) })
	row("routing wait mean / p99 ms", func(a *ArmResult) string { return f1(a.RouteMs.Mean) + " / " + f1(a.RouteMs.P99) })
	row("makespan s / throughput rps", func(a *ArmResult) string { return f1(a.MakespanS) + " / " + f1(a.ThroughputRPS) })
	row("cache hit % overall", func(a *ArmResult) string { return f1(a.Cache.OverallPct) })
	row("cache hit % first turns", func(a *ArmResult) string { return f1(a.Cache.NewPct) })
	row("cache hit % later turns", func(a *ArmResult) string { return f1(a.Cache.ReturningPct) })
	if len(rep.Arms) > 0 {
		for i, c := range rep.Arms[0].Clusters {
			row("share % "+c.ID, func(a *ArmResult) string { return f1(a.Clusters[i].Pct) })
		}
	}
	row("sessions escaped / multi-turn", func(a *ArmResult) string {
		return fmt.Sprintf("%d / %d", a.Sessions.Escaped, a.Sessions.MultiTurn)
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
		parts = append(parts, fmt.Sprintf("%s (%s, %g ms RTT, %d×%g/%g tok/s, %d slots)", c.ID, c.Region,
			float64(f.rtt(c))/1e6, c.Engines, c.Engine.PrefillTPS, c.Engine.CachedPrefillTPS, c.Engine.MaxConcurrency))
	}
	return strings.Join(parts, ", ")
}
