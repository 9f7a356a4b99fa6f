package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// The same workload, fleet and seed give the same report byte for byte,
// whatever the arm parallelism; another seed is allowed to differ.
func TestDeterminism(t *testing.T) {
	f := DefaultFleet()
	p := prepare(t, closedSessions(t, 6, 24, 4, 3000, 300, 30), f)
	arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,greedy-ttft")
	if err != nil {
		t.Fatal(err)
	}
	render := func(parallel int, seed uint64) []byte {
		rep, err := Compare(p, f, arms, Options{Seed: seed}, parallel)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteMarkdown(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := render(1, 3), render(4, 3)
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs with seed 3 differ:\n%s\n----\n%s", a, b)
	}
	if c := render(2, 3); !bytes.Equal(a, c) {
		t.Fatal("a third run with seed 3 differs")
	}
}

// One 3-turn session on two equal idle clusters (one engine each, 10 ms
// RTT) through pulsar-wait-and-widen + last_cluster_affinity. By hand:
//
//	turn 1 prompt "user:" + 4000 B + "\n" = 4006 B = 62 blocks of 64 B + 38 B
//	       → 62·16 + ceil(38/4) = 1002 tokens, nothing cached;
//	       TTFT = 10 ms RTT + 1002/64000 s (15.65625 ms) + 20 ms = 45.65625 ms
//	reply  "assistant:" + 200 B + "\n" = 211 B
//	turn 2 prompt 4006 + 211 + 406 = 4623 B → 72·16 + ceil(15/4) = 1156 tokens;
//	       cached = floor((4006+211)/64) = 65 blocks = 1040 tokens;
//	       TTFT = 10 + (116/64000 + 1040/133000 s = 9.632048 ms) + 20 ms
//	turn 3 prompt 4623 + 211 + 406 = 5240 B → 81·16 + ceil(56/4) = 1310 tokens;
//	       cached = floor((4623+211)/64) = 75 blocks = 1200 tokens.
//
// Every turn lands on the session's rank-1 cluster, turn 1 as new, turns
// 2 and 3 as returning primary.
func TestHandCheckedSession(t *testing.T) {
	f := equalFleet(2, 1, 25, 10)
	w := openWorkload(t, oreq{0, "s", 1, 1000, 50}, oreq{5000, "s", 2, 100, 50}, oreq{10000, "s", 3, 100, 50})
	p := prepare(t, w, f)
	r := runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1})

	cl := clustersOf(r)
	if cl[0] == "" || cl[1] != cl[0] || cl[2] != cl[0] {
		t.Fatalf("clusters %v, want one cluster for every turn", cl)
	}
	wantTokens := []int{1002, 1156, 1310}
	wantCached := []int{0, 1040, 1200}
	wantTTFT := []time.Duration{45656250, 10*time.Millisecond + 9632048 + 20*time.Millisecond, -1}
	wantState := []routing.SessionState{routing.SessionNew, routing.SessionReturning, routing.SessionReturning}
	for i := range r.reqs {
		rs := &r.reqs[i]
		if rs.pr.tokens != wantTokens[i] || rs.cached != wantCached[i] {
			t.Errorf("turn %d: prompt %d cached %d, want %d and %d", i+1, rs.pr.tokens, rs.cached, wantTokens[i], wantCached[i])
		}
		if wantTTFT[i] >= 0 && time.Duration(rs.ttft) != wantTTFT[i] {
			t.Errorf("turn %d: TTFT %v, want %v", i+1, time.Duration(rs.ttft), wantTTFT[i])
		}
		if rs.sessState != wantState[i] || rs.sessSel != "primary" || rs.waits != 0 {
			t.Errorf("turn %d: session %v/%s after %d waits, want %v/primary at once", i+1, rs.sessState, rs.sessSel, rs.waits, wantState[i])
		}
	}
	res := r.result()
	if res.Sessions.Escaped != 0 || res.Sessions.Moves != 0 || res.Cache.NewPct != 0 {
		t.Errorf("sessions %+v cache %+v", res.Sessions, res.Cache)
	}
}

// homeOf is the cluster a session's first turn goes to on an idle fleet
// under pulsar-wait-and-widen (its pulsar rank 1).
func homeOf(t *testing.T, f Fleet, session string) string {
	t.Helper()
	p := prepare(t, openWorkload(t, oreq{0, session, 1, 100, 1}), f)
	return runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1}).reqs[0].cluster
}

// fillers returns n session names whose home is home.
func fillers(t *testing.T, f Fleet, home string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		if name := fmt.Sprintf("fill-%d", i); homeOf(t, f, name) == home {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("found only %d sessions at home %s", len(out), home)
	}
	return out
}

// The overflow case: session s's home H is saturated by other sessions
// when its turn 2 arrives, so turn 2 waits out the 200 ms affinity wait
// (one timed wait to its end, cut short by each report the hub applies
// meanwhile: both pylons stream their fillers' output, so each reports
// every 50 ms, 8 reports and 9 waits; the classification set once and
// kept) and
// overflows to the other cluster B. With last_cluster_affinity turn 3
// follows its cache to B although H is free again; without it, turn 3
// goes back home and finds nothing of turn 2 cached.
func TestOverflowFollowsWithLastClusterAffinity(t *testing.T) {
	f := equalFleet(2, 1, 2, 2) // 2 slots per engine, reported; max_queued 1
	home := homeOf(t, f, "s")
	other := "c0"
	if home == "c0" {
		other = "c1"
	}
	fill := fillers(t, f, home, 4)
	reqs := []oreq{{0, "s", 1, 500, 10}}
	for _, name := range fill {
		reqs = append(reqs, oreq{500, name, 1, 200, 300}) // 3 s of decode each
	}
	reqs = append(reqs, oreq{1500, "s", 2, 100, 10}, oreq{6000, "s", 3, 100, 10})
	p := prepare(t, openWorkload(t, reqs...), f)
	// turn 2's prompt and reply: 2006 + 51 + 406 + 51 = 2514 B = 39 blocks.
	const turn3Cached = 39 * 16

	lca := runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1})
	cl := clustersOf(lca)
	if want := []string{home, home, home, home, other, other, other}; !slices.Equal(cl, want) {
		t.Fatalf("with lca: clusters %v, want %v", cl, want)
	}
	t2, t3 := &lca.reqs[5], &lca.reqs[6]
	if t2.waits != 9 || time.Duration(t2.routed-t2.start) != 200*time.Millisecond {
		t.Errorf("turn 2 routed after %v and %d waits, want 200ms and 9", time.Duration(t2.routed-t2.start), t2.waits)
	}
	if t2.sessState != routing.SessionReturning || t2.sessSel != "fallback" || t2.rankDepth < 2 || t2.cached != 0 {
		t.Errorf("turn 2: %v/%s depth %d cached %d, want returning/fallback, depth ≥ 2, cold", t2.sessState, t2.sessSel, t2.rankDepth, t2.cached)
	}
	if t3.sessState != routing.SessionReturning || t3.sessSel != "primary" || t3.cached != turn3Cached || t3.waits != 0 {
		t.Errorf("turn 3: %v/%s cached %d waits %d, want returning/primary, %d cached, no wait", t3.sessState, t3.sessSel, t3.cached, t3.waits, turn3Cached)
	}
	res := lca.result()
	if res.Sessions.Moves != 1 || res.Sessions.Followed != 1 || res.Sessions.Escaped != 1 {
		t.Errorf("session moves %+v, want s's one move, followed", res.Sessions)
	}
	if res.Escapes != (Escapes{Turns: 1, LastClusterPresentAfterWait: 1}) {
		t.Errorf("with lca: escapes %+v, want turn 2's, after its wait", res.Escapes)
	}

	plain := runArm(t, p, f, builtin(t, "pulsar-wait-and-widen"), Options{Seed: 1})
	cl = clustersOf(plain)
	if cl[5] != other || cl[6] != home {
		t.Fatalf("without lca: turns 2 and 3 on %s and %s, want %s then back home %s", cl[5], cl[6], other, home)
	}
	if c := plain.reqs[6].cached; c >= turn3Cached {
		t.Errorf("without lca turn 3 cached %d, want less than the %d turn 2 left on %s", c, turn3Cached, other)
	}
	if plain.reqs[5].sessState != routing.SessionUnclassified {
		t.Error("a request was classified without last_cluster_affinity")
	}
	// Turn 2 escaped after its wait; turn 3 went back home at once, away
	// from turn 2's cluster although it was there.
	if got := plain.result().Escapes; got != (Escapes{Turns: 2, LastClusterPresentAfterWait: 1, LastClusterPresentAtOnce: 1}) {
		t.Errorf("without lca: escapes %+v", got)
	}
}

// The JSON report carries what a side-by-side with a live run needs, per
// arm and under fixed names: requests, prompt and cached tokens, the
// ceiling and the share of it cached, evictions (here a 2000-token cache
// per engine cannot hold the sessions), TTFT p50/p99, the share of each
// region and the escapes by reason; the Markdown table shows them.
func TestReportCarriesComparisonFields(t *testing.T) {
	f := DefaultFleet()
	for i := range f.Clusters {
		f.Clusters[i].Engine.KVCapacityTokens = 2000
	}
	p := prepare(t, closedSessions(t, 16, 64, 4, 1500, 200, 20), f)
	arms, err := ParseArms("power-of-n,pulsar-wait-and-widen+lca,greedy-ttft")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Compare(p, f, arms, Options{Seed: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	var js, md bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Ceiling map[string]any `json:"ceiling"`
		Arms    []struct {
			SideBySide map[string]any `json:"side_by_side"`
		} `json:"arms"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.Ceiling["cacheable_tokens"].(float64) <= 0 {
		t.Errorf("ceiling %v", decoded.Ceiling)
	}
	for i, a := range decoded.Arms {
		for _, k := range []string{"requests", "ok", "prompt_tokens", "cached_tokens", "cache_hit_pct",
			"cacheable_tokens", "ceiling_pct", "cached_of_ceiling_pct", "evicted_blocks",
			"ttft_p50_ms", "ttft_p99_ms", "region_share_pct", "escaped", "moves", "escapes_by_reason"} {
			if _, ok := a.SideBySide[k]; !ok {
				t.Errorf("arm %s: side_by_side lacks %s", rep.Arms[i].Name, k)
			}
		}
		s := rep.Arms[i].SideBySide
		if s.EvictedBlocks <= 0 || s.EvictedBlocks != rep.Arms[i].Evictions.Blocks {
			t.Errorf("arm %s: %d evicted blocks with a 2000-token cache", rep.Arms[i].Name, s.EvictedBlocks)
		}
		if s.Requests != 256 || s.CachedTokens <= 0 || s.CacheableTokens != rep.Ceiling.CacheableTokens ||
			s.TTFTP99Ms < s.TTFTP50Ms || s.TTFTP50Ms <= 0 {
			t.Errorf("arm %s: %+v", rep.Arms[i].Name, s)
		}
		if near, far := s.RegionSharePct["near"], s.RegionSharePct["far"]; math.Abs(near+far-100) > 0.01 {
			t.Errorf("arm %s: region shares %v", rep.Arms[i].Name, s.RegionSharePct)
		}
		if got := s.EscapesByReason["last_cluster_present_at_once"] + s.EscapesByReason["last_cluster_present_after_wait"] +
			s.EscapesByReason["last_cluster_absent"]; got != rep.Arms[i].Escapes.Turns {
			t.Errorf("arm %s: escapes by reason %v sum to %d, want %d", rep.Arms[i].Name, s.EscapesByReason, got, rep.Arms[i].Escapes.Turns)
		}
	}
	for _, row := range []string{"- ceiling: ", "| cached % of ceiling |", "| KV evictions (blocks) |", "| region share % near |",
		"| escaped turns: last cluster there, at once / after a wait / gone |"} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("markdown lacks %q", row)
		}
	}
}

// No capacity anywhere: a new session (no affinity wait) gets its 503 at
// once; a returning one waits out the 200 ms affinity wait (woken by
// every report meanwhile: each of the two pylons streams output and
// reports every 50 ms, so 9 waits) and then gets it. Neither teaches the
// gateway a last cluster.
func TestNoCapacityRejects(t *testing.T) {
	f := equalFleet(2, 1, 1, 2) // 1 slot: the group admits 2 (max_queued 1), overflow needs a free slot
	home := homeOf(t, f, "s")
	fill := fillers(t, f, home, 4)
	reqs := []oreq{{0, "s", 1, 500, 10}}
	for _, name := range fill {
		reqs = append(reqs, oreq{500, name, 1, 200, 300})
	}
	reqs = append(reqs, oreq{1000, "s", 2, 100, 10})
	p := prepare(t, openWorkload(t, reqs...), f)
	r := runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1})
	newReq, ret := &r.reqs[4], &r.reqs[5]
	if !newReq.rejected || newReq.routed != newReq.start || newReq.waits != 0 {
		t.Errorf("4th filler: rejected %v after %d waits at +%v, want an immediate 503", newReq.rejected, newReq.waits, time.Duration(newReq.routed-newReq.start))
	}
	if !ret.rejected || ret.waits != 9 || time.Duration(ret.routed-ret.start) != 200*time.Millisecond {
		t.Errorf("turn 2: rejected %v after %d waits at +%v, want a 503 after 9 waits at +200ms", ret.rejected, ret.waits, time.Duration(ret.routed-ret.start))
	}
	if got := r.lastCluster["s"]; got != home {
		t.Errorf("gateway's last cluster for s = %q, want %q (turn 1's; a 503 writes nothing)", got, home)
	}
	if res := r.result(); res.Rejected != 2 || res.Completed != 4 {
		t.Errorf("completed %d rejected %d, want 4 and 2", res.Completed, res.Rejected)
	}
}

// The routing deadline ends timed waits: with a 100 ms deadline the
// returning turn above is rejected at +100 ms, before its affinity wait
// is over (after 5 waits: 4 reports land in 100 ms).
func TestRoutingDeadline(t *testing.T) {
	f := equalFleet(2, 1, 1, 2)
	home := homeOf(t, f, "s")
	fill := fillers(t, f, home, 4)
	reqs := []oreq{{0, "s", 1, 500, 10}}
	for _, name := range fill {
		reqs = append(reqs, oreq{500, name, 1, 200, 300})
	}
	reqs = append(reqs, oreq{1000, "s", 2, 100, 10})
	p := prepare(t, openWorkload(t, reqs...), f)
	r := runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1, MaxRoutingWait: 100 * time.Millisecond})
	ret := &r.reqs[5]
	if !ret.rejected || ret.waits != 5 || time.Duration(ret.routed-ret.start) != 100*time.Millisecond {
		t.Errorf("turn 2: rejected %v after %d waits at +%v, want a 503 after 5 waits at +100ms", ret.rejected, ret.waits, time.Duration(ret.routed-ret.start))
	}
}

// greedy-ttft picks each request's fastest first token from the fleet's
// exact state, so on these small scenarios no hub arm beats its mean TTFT
// (on hit rate it is no bound: the workload's ceiling is).
func TestGreedyTTFTNeverWorseOnMeanTTFT(t *testing.T) {
	f := DefaultFleet()
	for _, w := range []struct {
		name          string
		workers, sess int
	}{{"light", 4, 12}, {"busy", 48, 96}} {
		p := prepare(t, closedSessions(t, w.workers, w.sess, 3, 4000, 400, 40), f)
		arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,greedy-ttft")
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Compare(p, f, arms, Options{Seed: 5}, 2)
		if err != nil {
			t.Fatal(err)
		}
		greedy := rep.Arms[len(rep.Arms)-1]
		for _, a := range rep.Arms[:len(rep.Arms)-1] {
			if a.TTFTMs.Mean < greedy.TTFTMs.Mean {
				t.Errorf("%s: %s mean TTFT %.3f ms beats greedy-ttft's %.3f ms", w.name, a.Name, a.TTFTMs.Mean, greedy.TTFTMs.Mean)
			}
		}
	}
}

// runUntil handles every event due at or before at.
func runUntil(r *runner, at time.Duration) {
	for len(r.q) > 0 && r.q[0].at <= int64(at) && r.step() {
	}
}

// pylonOf is the pylon a session's first turn goes to on an idle fleet
// (the hub's backend choice inside the cluster).
func pylonOf(t *testing.T, f Fleet, session string) string {
	t.Helper()
	p := prepare(t, openWorkload(t, oreq{0, session, 1, 100, 1}), f)
	r := runArm(t, p, f, builtin(t, "power-of-n"), Options{Seed: 1})
	for _, pl := range r.pylons {
		for _, e := range pl.engines {
			if e.kv.Stats().QueryTokens > 0 {
				return pl.id
			}
		}
	}
	t.Fatalf("session %s reached no engine", session)
	return ""
}

// Reservations (docs/design/routing-state.md#reservations): a dispatch adds
// queue_size+1, its tokens to queued_input_size and running+1 to its
// cluster at once; the sibling backend's report keeps it, the chosen
// backend's next report drops it (that report now counts the request
// itself).
func TestReservationAccounting(t *testing.T) {
	f := equalFleet(1, 2, 25, 2)
	f.Pylon.ChangeGapMs = 0 // reports only every second: pylon 0 at 500 ms, pylon 1 at 1000 ms
	// One session whose key takes it to each pylon.
	byPylon := map[string]string{}
	for i := 0; len(byPylon) < 2 && i < 100; i++ {
		s := fmt.Sprintf("s%d", i)
		if pl := pylonOf(t, f, s); byPylon[pl] == "" {
			byPylon[pl] = s
		}
	}
	w := openWorkload(t, oreq{0, byPylon["c0/p0"], 1, 1000, 1000}, oreq{0, byPylon["c0/p1"], 1, 2000, 1000})
	p := prepare(t, w, f)
	r, err := newRunner(p, f, builtin(t, "power-of-n"), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tok0, tok1 := uint64(p.reqs[0].tokens), uint64(p.reqs[1].tokens)
	check := func(when string, queue, queued, running uint64) {
		t.Helper()
		s := r.hub.store.Snapshot(r.hub.target).Clusters[0].Stats
		if s.QueueSize != queue || s.QueuedInputSize != queued || s.NumRunningQueries != running {
			t.Errorf("%s: queue_size %d queued_input_size %d num_running_queries %d, want %d %d %d",
				when, s.QueueSize, s.QueuedInputSize, s.NumRunningQueries, queue, queued, running)
		}
	}
	runUntil(r, 0)
	if r.reqs[0].cluster != "c0" || r.reqs[1].cluster != "c0" {
		t.Fatal("requests not dispatched at 0")
	}
	check("both reserved, nothing reported", 2, tok0+tok1, 2)
	runUntil(r, 400*time.Millisecond)
	check("before any report", 2, tok0+tok1, 2)
	// Pylon c0/p0 (request 0) reports at 500 ms, applied at 501 ms:
	// request 0 is decoding (queue 0, running 1, latest-wins); request 1
	// is still a reservation on c0/p1.
	runUntil(r, 600*time.Millisecond)
	check("after c0/p0's report", 1, tok1, 2)
	runUntil(r, 1100*time.Millisecond)
	check("after c0/p1's report", 0, 0, 1)
}

// The simulated pylon reports on the interval, and after a change no
// sooner than the change gap.
func TestPylonCadence(t *testing.T) {
	f := equalFleet(1, 1, 25, 0)
	p := prepare(t, openWorkload(t, oreq{10, "", 1, 100, 5}, oreq{3000, "", 1, 100, 5}), f)
	r, err := newRunner(p, f, builtin(t, "power-of-n"), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	pl := r.pylons[0]
	var reports []time.Duration
	last := pl.reportSeq
	for r.step() {
		if pl.reportSeq != last {
			last = pl.reportSeq
			reports = append(reports, time.Duration(r.now))
		}
	}
	// The arrival at 10 ms reports at 50 ms (the gap after the
	// registration at 0); the first token (~32 ms) is covered by it, the
	// finish (~72 ms) reports at 100 ms; then every second after the last
	// report, until the arrival at 3 s reports at once.
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 1100 * time.Millisecond,
		2100 * time.Millisecond, 3000 * time.Millisecond, 3050 * time.Millisecond}
	if !slices.Equal(reports, want) {
		t.Errorf("reports at %v, want %v", reports, want)
	}
}

// Input-work admission runs in the simulator as in the hub: with
// max_input_work_seconds 0.01 on two idle 64000 tok/s engines, a request
// of about 1000 tokens (1000 / 128000 s) is admitted and one of about 2000
// (2000 / 128000 s > 0.01 s) is rejected, and the report counts the
// rejection by reason. An arm without the field reports no admission row.
func TestInputWorkAdmission(t *testing.T) {
	f := equalFleet(2, 1, 25, 1)
	p := prepare(t, openWorkload(t, oreq{0, "", 1, 1000, 1}, oreq{1000, "", 1, 2000, 1}, oreq{2000, "", 1, 900, 1}), f)
	arm := Arm{Name: "limited", Config: []byte(`{"models":{"$MODEL":{"algorithm":"power-of-n","max_input_work_seconds":0.01}}}`)}
	r := runArm(t, p, f, arm, Options{Seed: 1})
	for i, want := range []bool{false, true, false} {
		if rs := &r.reqs[i]; rs.rejected != want {
			t.Errorf("request %d (%d tokens): rejected %v (%s), want %v", i, rs.pr.tokens, rs.rejected, rs.rejectReason, want)
		}
	}
	if got := r.reqs[1].rejectReason; got != dispatch.ReasonInputWorkLimit {
		t.Errorf("reason %q, want %s", got, dispatch.ReasonInputWorkLimit)
	}
	res := r.result()
	if res.Rejected != 1 || res.Admission == nil || *res.Admission != (AdmissionRejections{InputWorkLimit: 1}) {
		t.Errorf("rejected %d, admission %+v, want 1 work-limit rejection", res.Rejected, res.Admission)
	}
	rep := &Report{Arms: []*ArmResult{res, runArm(t, p, f, builtin(t, "power-of-n"), Options{Seed: 1}).result()}}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| rejected by admission: work limit / no input rate | 1 / 0 | – |") {
		t.Errorf("no admission row in\n%s", b.String())
	}
	rep.Arms = rep.Arms[1:]
	b.Reset()
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "admission") {
		t.Errorf("an admission row without an arm that admits:\n%s", b.String())
	}
}

// In an open-loop run a session's later turn waits for the previous turn's
// answer, as the load generator does: its prompt holds that answer, so it
// cannot be sent earlier whatever its at_ms says. An anonymous request
// and a turn whose at_ms is later keep their own times.
func TestOpenLoopTurnWaitsForThePreviousAnswer(t *testing.T) {
	f := equalFleet(1, 1, 4, 1)
	w := openWorkload(t,
		oreq{0, "s", 1, 1000, 50},  // 50 tokens of 10 ms: answered after 500 ms
		oreq{10, "s", 2, 100, 5},   // due at 10 ms, must wait for turn 1
		oreq{20, "", 1, 100, 5},    // anonymous: at 20 ms
		oreq{5000, "s", 3, 100, 5}, // due after turn 2's answer: at 5 s
	)
	r := runArm(t, prepare(t, w, f), f, builtin(t, "power-of-n"), Options{})
	first := r.reqs[0].start + r.reqs[0].e2e
	if got := r.reqs[1].start; got < first {
		t.Errorf("turn 2 sent at %v, before turn 1's answer at %v", time.Duration(got), time.Duration(first))
	}
	if got := r.reqs[2].start; got != atNs(20) {
		t.Errorf("anonymous request sent at %v, want 20ms", time.Duration(got))
	}
	if got := r.reqs[3].start; got != atNs(5000) {
		t.Errorf("turn 3 sent at %v, want its at_ms 5s", time.Duration(got))
	}
}
