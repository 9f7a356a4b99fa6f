package proxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// escapePicker classifies a request as the session-aware algorithms do (a
// hint naming a candidate is returning, any other hint stale, none new)
// and chooses the first of prefer that is eligible, at rank 1 when it is
// the first of the list and 3 after, in a group of 2. With waitFirst its
// first pass waits an hour instead.
type escapePicker struct {
	prefer    []string
	waitFirst bool
	n         atomic.Int32
}

func (p *escapePicker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	class := req.Session
	if class == routing.SessionUnclassified {
		switch {
		case req.LastClusterID == "":
			class = routing.SessionNew
		case snap.Index(req.LastClusterID) >= 0:
			class = routing.SessionReturning
		default:
			class = routing.SessionStale
		}
	}
	if p.waitFirst && p.n.Add(1) == 1 {
		return routing.Decision{Wait: time.Hour, Session: class}, false
	}
	for k, id := range p.prefer {
		if i := snap.Index(id); i >= 0 && !req.IsExcluded(id) {
			d := lb.NewDecision(snap, i, 1+2*min(k, 1), req)
			d.GroupSize, d.Session = 2, class
			return d, true
		}
	}
	return routing.Decision{Session: class}, false
}

func escapeHeaders(hint string) http.Header {
	hdr := validHeaders()
	hdr.Set(headers.CacheAffinityKey, "k1")
	hdr.Set(headers.MaxWaitMs, "10000")
	if hint != "" {
		hdr.Set(headers.StargateLastClusterID, hint)
	}
	return hdr
}

// escapes is want with every other reason of rk/m at 0: the four series
// exist from the target's first classified selection.
func escapes(want map[string]float64) series {
	s := series{}
	for _, r := range dispatch.EscapeReasons {
		s["rk|m|"+r] = want[r]
	}
	return s
}

// Each reason a session leaves its cluster is counted once, when the
// answer's 2xx head is written, and a session that stays counts nothing.
func TestSessionEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		hint    string
		prefer  []string
		prepare func(h *harness)
		status  int    // the answer's status (200 unless set)
		want    string // the reason counted; "" none
		cluster string // where the answer came from
	}{
		{name: "returning, back on its cluster", hint: "ca", prefer: []string{"ca", "cb"}, cluster: "ca"},
		{name: "new, inside its group", prefer: []string{"ca"}, cluster: "ca"},
		{name: "new, outside its group", prefer: []string{"none", "cb"}, want: dispatch.EscapeNewNotWaiting, cluster: "cb"},
		{name: "returning, its cluster saturated", hint: "ca", prefer: []string{"none", "cb"}, want: dispatch.EscapeGroupSaturated,
			cluster: "cb"},
		{name: "stale", hint: "gone", prefer: []string{"ca"}, want: dispatch.EscapeClusterLost, cluster: "ca"},
		{name: "returning, its cluster failed", hint: "ca", prefer: []string{"ca", "cb"}, want: dispatch.EscapeRetry, cluster: "cb",
			prepare: func(h *harness) {
				h.backends["a1"].srv.Close()
				h.backends["a2"].srv.Close()
			}},
		{name: "an error answer from elsewhere moves nothing", hint: "ca", prefer: []string{"none", "cb"}, cluster: "cb",
			status: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "esc", Picker: &escapePicker{prefer: tc.prefer}, LastClusterAffinity: true}})
			if tc.prepare != nil {
				tc.prepare(h)
			}
			if tc.status != 0 {
				h.backends["b1"].handle(answer(tc.status))
			}
			resp, _ := h.do(escapeHeaders(tc.hint), chatBody)
			if want := max(tc.status, http.StatusOK); resp.StatusCode != want || resp.Header.Get(headers.StargateClusterID) != tc.cluster {
				t.Fatalf("status %d on %q, want %d on %s", resp.StatusCode, resp.Header.Get(headers.StargateClusterID), want, tc.cluster)
			}
			wantSeries(t, "session_escapes_total", h.m.escapes, escapes(map[string]float64{tc.want: 1}))
			var debug []EscapeCount
			if tc.want != "" {
				debug = []EscapeCount{{RoutingKey: rk, Model: model, Reason: tc.want, Count: 1}}
			}
			if got := h.p.Escapes(); !slices.Equal(got, debug) {
				t.Errorf("Escapes() = %+v, want %+v", got, debug)
			}
		})
	}
}

// A returning session whose last cluster leaves while it waits is woken
// by the removal and counted as cluster_lost where it lands.
func TestSessionEscapeClusterLostWhileWaiting(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	ep := &escapePicker{prefer: []string{"cb", "ca"}, waitFirst: true}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "esc", Picker: ep, LastClusterAffinity: true}}, withClock(clk))
	done := h.sendAsync(context.Background(), escapeHeaders("cb"))
	waitTimers(t, clk, 1) // classified returning, waiting for cb
	h.store.Remove("b1")  // cb is gone: the removal wakes it
	res := wait(t, done, "the response")
	if res.status != http.StatusOK || res.header.Get(headers.StargateClusterID) != "ca" ||
		res.header.Get(headers.StargateSessionState) != headers.SessionStateReturning {
		t.Fatalf("response %+v, want a returning session's 200 on ca", res)
	}
	wantSeries(t, "session_escapes_total", h.m.escapes, escapes(map[string]float64{dispatch.EscapeClusterLost: 1}))
}

// One engine's transient refusal does not push a returning session off
// its last cluster: the retry goes to the cluster's other backend first.
// Any other request goes to another cluster, as before.
func TestReturningSessionRetriesItsClusterFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		hint    string
		cluster string
		want    map[string]float64
	}{
		{"returning", "ca", "ca", nil},
		{"new", "", "cb", map[string]float64{dispatch.EscapeRetry: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "esc", Picker: &escapePicker{prefer: []string{"ca", "cb"}},
				LastClusterAffinity: true}})
			var calls atomic.Int32
			refuseFirst := func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected)(w, r)
					return
				}
				ok(w, r)
			}
			h.backends["a1"].handle(refuseFirst)
			h.backends["a2"].handle(refuseFirst)
			resp, _ := h.do(escapeHeaders(tc.hint), chatBody)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.StargateClusterID) != tc.cluster {
				t.Fatalf("status %d on %q, want 200 on %s", resp.StatusCode, resp.Header.Get(headers.StargateClusterID), tc.cluster)
			}
			hits := h.hits()
			if tc.cluster == "ca" && (hits["a1"] != 1 || hits["a2"] != 1 || hits["b1"] != 0) {
				t.Errorf("hits %v, want one on each ca backend", hits)
			}
			wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|" + headers.ReasonUpstreamAdmissionRejected: 1})
			wantSeries(t, "session_escapes_total", h.m.escapes, escapes(tc.want))
		})
	}
}
