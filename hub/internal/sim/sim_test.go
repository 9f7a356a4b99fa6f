package sim

import (
	"bytes"
	"fmt"
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
	arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,oracle")
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
// when its turn 2 arrives, so turn 2 waits out the 200 ms affinity wait in
// 25 ms steps (8 timed waits, the classification set once and kept) and
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
	if t2.waits != 8 || time.Duration(t2.routed-t2.start) != 200*time.Millisecond {
		t.Errorf("turn 2 routed after %v and %d waits, want 200ms and 8", time.Duration(t2.routed-t2.start), t2.waits)
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
}

// No capacity anywhere: a new session (no affinity wait) gets its 503 at
// once; a returning one waits out the 200 ms affinity wait in 25 ms steps
// and then gets it. Neither teaches the gateway a last cluster.
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
	if !ret.rejected || ret.waits != 8 || time.Duration(ret.routed-ret.start) != 200*time.Millisecond {
		t.Errorf("turn 2: rejected %v after %d waits at +%v, want a 503 after 8 waits at +200ms", ret.rejected, ret.waits, time.Duration(ret.routed-ret.start))
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
// is over.
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
	if !ret.rejected || ret.waits != 4 || time.Duration(ret.routed-ret.start) != 100*time.Millisecond {
		t.Errorf("turn 2: rejected %v after %d waits at +%v, want a 503 after 4 waits at +100ms", ret.rejected, ret.waits, time.Duration(ret.routed-ret.start))
	}
}

// The oracle knows the fleet exactly, so on a small scenario no hub
// algorithm beats its mean TTFT.
func TestOracleNeverWorseOnMeanTTFT(t *testing.T) {
	f := DefaultFleet()
	for _, w := range []struct {
		name          string
		workers, sess int
	}{{"light", 4, 12}, {"busy", 48, 96}} {
		p := prepare(t, closedSessions(t, w.workers, w.sess, 3, 4000, 400, 40), f)
		arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,oracle")
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Compare(p, f, arms, Options{Seed: 5}, 2)
		if err != nil {
			t.Fatal(err)
		}
		oracle := rep.Arms[len(rep.Arms)-1]
		for _, a := range rep.Arms[:len(rep.Arms)-1] {
			if a.TTFTMs.Mean < oracle.TTFTMs.Mean {
				t.Errorf("%s: %s mean TTFT %.3f ms beats the oracle's %.3f ms", w.name, a.Name, a.TTFTMs.Mean, oracle.TTFTMs.Mean)
			}
		}
	}
}

// runUntil handles every event due at or before at.
func runUntil(r *runner, at time.Duration) {
	for len(r.q) > 0 && r.q[0].at <= int64(at) && r.step() {
	}
}

// Reservations (docs/design/routing-state.md#reservations): a dispatch adds
// queue_size+1, its tokens to queued_input_size and running+1 to its
// cluster at once; the sibling backend's report keeps it, the chosen
// backend's next report drops it (that report now counts the request
// itself).
func TestReservationAccounting(t *testing.T) {
	f := equalFleet(1, 2, 25, 2)
	f.Pylon.ChangeGapMs = 0 // reports only every second: engine 0 at 500 ms, engine 1 at 1000 ms
	w := openWorkload(t, oreq{0, "", 1, 1000, 1000}, oreq{0, "", 1, 2000, 1000})
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
	// Engine c0/0 (request 0, round robin) reports at 500 ms, applied at
	// 501 ms: request 0 is decoding (queue 0, running 1, latest-wins);
	// request 1 is still a reservation on c0/1.
	runUntil(r, 600*time.Millisecond)
	check("after c0/0's report", 1, tok1, 2)
	runUntil(r, 1100*time.Millisecond)
	check("after c0/1's report", 0, 0, 1)
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
	e := r.engines[0]
	var reports []time.Duration
	last := e.reportSeq
	for r.step() {
		if e.reportSeq != last {
			last = e.reportSeq
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
