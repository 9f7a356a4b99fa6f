package dispatch

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakePicker answers with dec (ok when ok is set) and records what it saw.
type fakePicker struct {
	dec   routing.Decision
	ok    bool
	calls int
	seen  routing.Request
}

func (f *fakePicker) Pick(req *routing.Request, _ *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	f.calls++
	f.seen = *req
	return f.dec, f.ok
}

func view(id string, tps float64, queued uint64) routing.ClusterView {
	return routing.ClusterView{ClusterID: id, ActiveBackends: 1,
		Stats: protocol.ModelStats{LastMeanInputTPS: tps, QueuedInputSize: queued}}
}

func snapOf(cs ...routing.ClusterView) *routing.Snapshot {
	return &routing.Snapshot{Target: routing.Target{Model: "m"}, Clusters: cs}
}

func newRNG() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func passFor(p lb.Picker, maxWait time.Duration, hasMaxWait bool) Pass {
	return NewPass(lb.Route{Algorithm: "fake", Picker: p}, routing.Request{ID: "r", InputTokens: 100, ReceivedAt: t0},
		maxWait, hasMaxWait, DefaultLimits())
}

func TestNewPassDeadlines(t *testing.T) {
	l := Limits{MaxRoutingWait: time.Minute, MaxWaitSleep: time.Second}
	for _, tc := range []struct {
		name         string
		maxWait      time.Duration
		has          bool
		wait, repoll time.Duration // from the start; repoll -1: none
	}{
		{"no header: timed waits up to the cap, no untimed wait", 0, false, time.Minute, -1},
		{"header: both end at it", 250 * time.Millisecond, true, 250 * time.Millisecond, 250 * time.Millisecond},
		{"header over the cap is capped", time.Hour, true, time.Minute, time.Minute},
		{"header 0: no waiting at all", 0, true, 0, 0},
	} {
		p := NewPass(lb.Route{}, routing.Request{ReceivedAt: t0}, tc.maxWait, tc.has, l)
		if got := p.WaitUntil.Sub(t0); got != tc.wait {
			t.Errorf("%s: WaitUntil at %v, want %v", tc.name, got, tc.wait)
		}
		if tc.repoll < 0 != p.RepollUntil.IsZero() || (tc.repoll >= 0 && p.RepollUntil.Sub(t0) != tc.repoll) {
			t.Errorf("%s: RepollUntil %v, want %v after the start", tc.name, p.RepollUntil, tc.repoll)
		}
		if p.MaxWaitSleep != l.MaxWaitSleep {
			t.Errorf("%s: MaxWaitSleep %v", tc.name, p.MaxWaitSleep)
		}
	}
}

func TestDecideKinds(t *testing.T) {
	two := snapOf(view("a", 1000, 0), view("b", 1000, 0))
	chosen := routing.Decision{Cluster: 1, ClusterID: "b", RankDepth: 1}
	for _, tc := range []struct {
		name      string
		snap      *routing.Snapshot
		excluded  []string
		dec       routing.Decision
		ok        bool
		want      Kind
		wantCalls int
	}{
		{"no snapshot", nil, nil, chosen, true, NoCandidates, 0},
		{"empty snapshot", snapOf(), nil, chosen, true, NoCandidates, 0},
		{"every cluster excluded", two, []string{"a", "b"}, chosen, true, Exhausted, 0},
		{"a choice", two, []string{"a"}, chosen, true, Chosen, 1},
		{"no choice, a timed wait", two, nil, routing.Decision{Wait: time.Millisecond}, false, Wait, 1},
		{"no choice, no wait", two, nil, routing.Decision{}, false, Unavailable, 1},
	} {
		f := &fakePicker{dec: tc.dec, ok: tc.ok}
		p := passFor(f, 0, false)
		p.Req.Excluded = tc.excluded
		out := Decide(&p, tc.snap, t0, newRNG())
		if out.Kind != tc.want || f.calls != tc.wantCalls {
			t.Errorf("%s: %v after %d picks, want %v after %d", tc.name, out.Kind, f.calls, tc.want, tc.wantCalls)
		}
		if tc.snap != nil && (out.Candidates != len(tc.snap.Clusters) || out.Eligible != len(tc.snap.Clusters)-len(tc.excluded)) {
			t.Errorf("%s: %d candidates, %d eligible", tc.name, out.Candidates, out.Eligible)
		}
	}
}

// The wait after no choice: the load balancer's timed wait capped by the
// deadline, else the rest of x-max-wait-ms, else none; either capped by
// the sleep bound, and no longer by a 25 ms poll (the caller wakes the
// request at its target's next waking publication instead).
func TestDecideWaits(t *testing.T) {
	snap := snapOf(view("a", 1000, 0))
	for _, tc := range []struct {
		name       string
		lbWait     time.Duration
		maxWait    time.Duration
		hasMaxWait bool
		noBound    bool          // MaxWaitSleep 0: no bound
		at         time.Duration // after the start
		want       time.Duration
		timed      bool
	}{
		{"timed, whole: no poll cuts it", 40 * time.Millisecond, 0, false, false, 0, 40 * time.Millisecond, true},
		{"timed, capped by the sleep bound", time.Hour, 0, false, false, 0, time.Second, true},
		{"timed, no sleep bound", time.Hour, 0, false, true, 0, time.Minute, true},
		{"timed, capped by the deadline", time.Second, 0, false, false, time.Minute - 3*time.Millisecond, 3 * time.Millisecond, true},
		{"timed, past the deadline", time.Second, 0, false, false, time.Minute, 0, false},
		{"timed, capped by x-max-wait-ms", time.Second, 10 * time.Millisecond, true, false, 4 * time.Millisecond, 6 * time.Millisecond, true},
		{"no timed wait: the rest of x-max-wait-ms", 0, 250 * time.Millisecond, true, false, 10 * time.Millisecond, 240 * time.Millisecond, false},
		{"no timed wait: x-max-wait-ms capped by the sleep bound", 0, 5 * time.Second, true, false, 0, time.Second, false},
		{"no timed wait, no header: no wait", 0, 0, false, false, 0, 0, false},
		{"no timed wait, header run out", 0, 250 * time.Millisecond, true, false, 250 * time.Millisecond, 0, false},
	} {
		l := DefaultLimits()
		if tc.noBound {
			l.MaxWaitSleep = 0
		}
		p := NewPass(lb.Route{Algorithm: "fake", Picker: &fakePicker{dec: routing.Decision{Wait: tc.lbWait}}},
			routing.Request{ID: "r", InputTokens: 100, ReceivedAt: t0}, tc.maxWait, tc.hasMaxWait, l)
		out := Decide(&p, snap, t0.Add(tc.at), newRNG())
		if tc.want == 0 {
			if out.Kind != Unavailable || out.Wait != 0 {
				t.Errorf("%s: %v %v, want unavailable", tc.name, out.Kind, out.Wait)
			}
			continue
		}
		if out.Kind != Wait || out.Wait != tc.want || out.Timed != tc.timed {
			t.Errorf("%s: %v %v timed=%v, want a wait of %v timed=%v", tc.name, out.Kind, out.Wait, out.Timed, tc.want, tc.timed)
		}
	}
}

// Input-work admission: (tokens + queued input of the eligible clusters) /
// their summed valid TPS against the limit, checked before the load
// balancer.
func TestAdmission(t *testing.T) {
	kv := func(c routing.ClusterView, free uint64) routing.ClusterView {
		c.Stats.KVCacheCapacityTokens, c.Stats.KVCacheFreeTokens = 10000, free
		return c
	}
	for _, tc := range []struct {
		name                string
		limit               float64
		weight, considersKV bool
		snap                *routing.Snapshot
		excluded            []string
		want                string
	}{
		{"admitted: (100+900)/(1000+1000) = 0.5 s", 0.5, false, false,
			snapOf(view("a", 1000, 900), view("b", 1000, 0)), nil, ""},
		{"over the limit", 0.49, false, false, snapOf(view("a", 1000, 900), view("b", 1000, 0)), nil, ReasonInputWorkLimit},
		{"an excluded cluster counts for nothing", 0.9, false, false,
			snapOf(view("a", 1000, 900), view("b", 1000, 0)), []string{"b"}, ReasonInputWorkLimit},
		{"no valid rate", 10, false, false, snapOf(view("a", 0, 0)), nil, ReasonInputWorkUnavailable},
		{"queued input without weight still counts", 0.5, false, false,
			snapOf(view("a", 1000, 0), view("b", 0, 10000)), nil, ReasonInputWorkLimit},
		{"pulsar family: no weight, not eligible", 0.5, true, false,
			snapOf(view("a", 1000, 0), view("b", 0, 10000)), nil, ""},
		{"pulsar family with KV: a full cache is not eligible", 0.5, true, true,
			snapOf(kv(view("a", 1000, 0), 5000), kv(view("b", 1000, 10000), 50)), nil, ""},
		{"pulsar family with KV: no KV metrics, not eligible", 0.5, true, true,
			snapOf(view("a", 1000, 0)), nil, ReasonInputWorkUnavailable},
		{"a limit ≤ 0 rejects any work", 0, false, false, snapOf(view("a", 1000, 0)), nil, ReasonInputWorkLimit},
	} {
		f := &fakePicker{dec: routing.Decision{ClusterID: "a"}, ok: true}
		p := passFor(f, 0, false)
		p.Route.HasInputWorkLimit, p.Route.MaxInputWorkSeconds = true, tc.limit
		p.Route.AdmissionNeedsWeight, p.Route.AdmissionConsidersKV = tc.weight, tc.considersKV
		p.Req.Excluded = tc.excluded
		out := Decide(&p, tc.snap, t0, newRNG())
		switch {
		case tc.want == "" && out.Kind != Chosen:
			t.Errorf("%s: %v (%s), want admitted", tc.name, out.Kind, out.Reason)
		case tc.want != "" && (out.Kind != Rejected || out.Reason != tc.want || f.calls != 0):
			t.Errorf("%s: %v (%s) after %d picks, want rejected with %s before the load balancer", tc.name, out.Kind, out.Reason, f.calls, tc.want)
		}
	}
}

// sessionPicker classifies on its first decision (which waits) and then
// reports whatever class the request already has, as the session-aware
// algorithms do.
type sessionPicker struct {
	first routing.SessionState
	calls int
	seen  []routing.SessionState
}

func (s *sessionPicker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	s.calls++
	s.seen = append(s.seen, req.Session)
	class := req.Session
	if class == routing.SessionUnclassified {
		class = s.first
	}
	if s.calls == 1 {
		return routing.Decision{Wait: time.Millisecond, Session: class, SessionPromoted: true}, false
	}
	d := lb.NewDecision(snap, 1, 3, req)
	d.GroupSize, d.Session = 2, class
	return d, true
}

// The first classification, made on a pass that waits, is kept for the
// next pass, and classes the final choice.
func TestSessionKeptAcrossPasses(t *testing.T) {
	snap := snapOf(view("a", 1000, 0), view("b", 1000, 0))
	for _, tc := range []struct {
		state routing.SessionState
		hint  string
		want  string
	}{
		{routing.SessionReturning, "b", SelectionPrimary},  // back on its last cluster
		{routing.SessionReturning, "a", SelectionFallback}, // elsewhere
		{routing.SessionNew, "", SelectionFallback},        // rank 3 outside a group of 2
		{routing.SessionStale, "gone", SelectionFallback},
	} {
		sp := &sessionPicker{first: tc.state}
		p := NewPass(lb.Route{Algorithm: "s", Picker: sp, LastClusterAffinity: true},
			routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: tc.hint}, 0, false, DefaultLimits())
		if out := Decide(&p, snap, t0, newRNG()); out.Kind != Wait || p.Req.Session != tc.state || !p.Req.SessionPromoted {
			t.Fatalf("%v: first pass %v kept %v (promoted %v)", tc.state, out.Kind, p.Req.Session, p.Req.SessionPromoted)
		}
		out := Decide(&p, snap, t0.Add(time.Millisecond), newRNG())
		if out.Kind != Chosen || out.SessionSelection != tc.want || out.Selection != SelectionFallback {
			t.Errorf("%v/%s: %v session %q rank %q, want session %q rank fallback", tc.state, tc.hint, out.Kind,
				out.SessionSelection, out.Selection, tc.want)
		}
		if sp.seen[1] != tc.state {
			t.Errorf("%v: the second pass showed the picker %v", tc.state, sp.seen[1])
		}
	}
	// Without last_cluster_affinity on the route no session class is
	// reported, whatever the decision says.
	sp := &sessionPicker{first: routing.SessionNew}
	p := passFor(sp, 0, false)
	Decide(&p, snap, t0, newRNG())
	if out := Decide(&p, snap, t0, newRNG()); out.Kind != Chosen || out.SessionSelection != "" {
		t.Errorf("route without the feature: %v session %q", out.Kind, out.SessionSelection)
	}
}

func TestRankSelection(t *testing.T) {
	for depth, want := range map[int]string{0: SelectionPrimary, 1: SelectionPrimary, 2: SelectionFallback, 9: SelectionFallback} {
		if got := rankSelection(depth); got != want {
			t.Errorf("rank %d: %s, want %s", depth, got, want)
		}
	}
}

// A pass allocates nothing of its own: the proxy runs one per request and
// per wait.
func TestDecideDoesNotAllocate(t *testing.T) {
	snap := snapOf(view("a", 1000, 100), view("b", 1000, 0))
	rng := newRNG()
	for _, f := range []*fakePicker{
		{dec: routing.Decision{Cluster: 1, ClusterID: "b", RankDepth: 2}, ok: true},
		{dec: routing.Decision{Wait: time.Second}},
	} {
		p := passFor(f, time.Second, true)
		p.Route.HasInputWorkLimit, p.Route.MaxInputWorkSeconds = true, 10
		p.Req.Excluded = []string{"x"}
		if n := testing.AllocsPerRun(200, func() { Decide(&p, snap, t0, rng) }); n != 0 {
			t.Errorf("%v allocations per pass", n)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	snap := snapOf(view("a", 1000, 100), view("b", 1000, 0), view("c", 1000, 0))
	p := passFor(&fakePicker{dec: routing.Decision{Cluster: 1, ClusterID: "b", RankDepth: 1}, ok: true}, 0, false)
	p.Route.HasInputWorkLimit, p.Route.MaxInputWorkSeconds = true, 10
	rng := newRNG()
	for b.Loop() {
		Decide(&p, snap, t0, rng)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Chosen: "chosen", Wait: "wait", Rejected: "rejected", NoCandidates: "no_candidates",
		Exhausted: "exhausted", Unavailable: "unavailable", Kind(200): "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("%d: %s, want %s", k, got, want)
		}
	}
}

// A choice's escape: why a classified request leaves its session's own
// cluster, or "" when it stays.
func TestEscape(t *testing.T) {
	snap := snapOf(view("a", 1000, 0), view("b", 1000, 0), view("c", 1000, 0))
	for _, tc := range []struct {
		name     string
		session  routing.SessionState
		hint     string
		excluded []string
		chosen   int // index into snap
		rank     int
		lca      bool
		want     string
	}{
		{"returning, back on its cluster", routing.SessionReturning, "b", nil, 1, 1, true, ""},
		{"returning, its cluster still there", routing.SessionReturning, "a", nil, 1, 2, true, EscapeGroupSaturated},
		{"returning, its cluster excluded", routing.SessionReturning, "a", []string{"a"}, 1, 2, true, EscapeClusterLost},
		{"returning, its cluster gone since it was classified", routing.SessionReturning, "gone", nil, 1, 2, true, EscapeClusterLost},
		{"stale, even inside its group", routing.SessionStale, "gone", nil, 0, 1, true, EscapeClusterLost},
		{"new, inside its group", routing.SessionNew, "", nil, 0, 2, true, ""},
		{"new, outside its group", routing.SessionNew, "", nil, 2, 3, true, EscapeNewNotWaiting},
		{"no last_cluster_affinity: unclassified", routing.SessionNew, "", nil, 2, 3, false, ""},
	} {
		dec := lb.NewDecision(snap, tc.chosen, tc.rank, &routing.Request{})
		dec.GroupSize, dec.Session = 2, tc.session
		p := NewPass(lb.Route{Algorithm: "f", Picker: &fakePicker{dec: dec, ok: true}, LastClusterAffinity: tc.lca},
			routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: tc.hint}, 0, false, DefaultLimits())
		p.Req.Excluded = tc.excluded
		if out := Decide(&p, snap, t0, newRNG()); out.Kind != Chosen || out.Escape != tc.want {
			t.Errorf("%s: %v escape %q, want %q", tc.name, out.Kind, out.Escape, tc.want)
		}
	}
}

// After an attempt on the session's own cluster failed, a choice that
// leaves is the retry's doing, unless the session had lost its cluster
// before (stale).
func TestEscapeAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		escape  string
		session routing.SessionState
		want    string
	}{
		{"", routing.SessionReturning, ""},
		{EscapeGroupSaturated, routing.SessionReturning, EscapeRetry},
		{EscapeClusterLost, routing.SessionReturning, EscapeRetry},
		{EscapeNewNotWaiting, routing.SessionNew, EscapeRetry},
		{EscapeClusterLost, routing.SessionStale, EscapeClusterLost},
	} {
		if got := EscapeAfterFailure(tc.escape, tc.session); got != tc.want {
			t.Errorf("%q after a failure, %v: %q, want %q", tc.escape, tc.session, got, tc.want)
		}
	}
}
