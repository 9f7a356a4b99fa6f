package proxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// waitingPicker asks to wait `wait` on its first `waits` calls, then picks
// cluster ca, reporting the session class it is told to; it records the
// requests and times it was called with.
type waitingPicker struct {
	waits   int
	wait    time.Duration
	session routing.SessionState
	group   int
	n       atomic.Int32
	calls   chan pick
}

func (w *waitingPicker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, _ *rand.Rand) (routing.Decision, bool) {
	cp := *req
	cp.Excluded = slices.Clone(req.Excluded)
	w.calls <- pick{cp, now}
	if int(w.n.Add(1)) <= w.waits {
		return routing.Decision{Wait: w.wait}, false
	}
	// The class it is told to report, unless the request already has one
	// (set once, by the routing pass, from an earlier decision).
	session := req.Session
	if session == routing.SessionUnclassified {
		session = w.session
	}
	for i := range snap.Clusters {
		if snap.Clusters[i].ClusterID == "ca" && !req.IsExcluded("ca") {
			d := lb.NewDecision(snap, i, 1, req)
			d.GroupSize, d.Session = w.group, session
			return d, true
		}
	}
	for i := range snap.Clusters {
		if !req.IsExcluded(snap.Clusters[i].ClusterID) {
			d := lb.NewDecision(snap, i, 3, req)
			d.GroupSize, d.Session = w.group, session
			return d, true
		}
	}
	return routing.Decision{}, false
}

// A timed wait needs no x-max-wait-ms: the proxy sleeps the whole wait
// (no poll cuts it short while nothing publishes) and asks again with a
// fresh snapshot until the picker chooses.
func TestTimedWaitWithoutMaxWaitHeader(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	wp := &waitingPicker{waits: 3, wait: 40 * time.Millisecond, calls: make(chan pick, 100)}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "waiting", Picker: wp}}, withClock(clk))
	done := h.sendAsync(context.Background(), validHeaders())
	var at []time.Time
	for range 3 {
		at = append(at, wait(t, wp.calls, "a waiting pick").now)
		waitTimers(t, clk, 1)
		// A sleep cut short here would pass with the clock at 39 ms and
		// arm its next sleep before the clock moves on.
		clk.Advance(39 * time.Millisecond)
		waitTimers(t, clk, 1)
		clk.Advance(time.Millisecond)
	}
	at = append(at, wait(t, wp.calls, "the choosing pick").now)
	res := wait(t, done, "the response")
	if res.err != nil || res.status != http.StatusOK {
		t.Fatalf("response %+v", res)
	}
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d != 40*time.Millisecond {
			t.Fatalf("pick %d came %v after the previous one, want the whole 40ms wait", i, d)
		}
	}
}

// A timed wait stops at the routing wait cap (x-max-wait-ms, else 60 s).
func TestTimedWaitExpires(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	wp := &waitingPicker{waits: 1 << 30, wait: time.Hour, calls: make(chan pick, 1000)}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "waiting", Picker: wp}}, withClock(clk))
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "60")
	done := h.sendAsync(context.Background(), hdr)
	wait(t, wp.calls, "the first pick")
	waitTimers(t, clk, 1) // one sleep to the deadline
	clk.Advance(60 * time.Millisecond)
	if p := wait(t, wp.calls, "the pick at the deadline"); !p.now.Equal(t0.Add(60 * time.Millisecond)) {
		t.Fatalf("second pick at %v, want at the 60 ms deadline", p.now.Sub(t0))
	}
	res := wait(t, done, "the response")
	if res.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", res.status)
	}
	h.inflight.Wait()
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||503": 1})
}

// Input-work admission: tokens plus queued input over the summed valid TPS
// (ca: two backends of 1000 tps each; cb: no valid TPS).
func TestInputWorkAdmission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		limit      float64
		needWeight bool
		model      string
		wantStatus int
		wantReason string
	}{
		{"admitted: 100 tokens at 2000 tps is 0.05 s", 0.06, false, model, http.StatusOK, ""},
		{"over the limit", 0.04, false, model, http.StatusServiceUnavailable, dispatch.ReasonInputWorkLimit},
		{"no valid rate at all", 10, false, "solo", http.StatusServiceUnavailable, dispatch.ReasonInputWorkUnavailable},
		{"pulsar family: solo's cluster has no weight", 10, true, "solo", http.StatusServiceUnavailable, dispatch.ReasonInputWorkUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newScripted(t, 0)
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "scripted", Picker: sp, HasInputWorkLimit: true,
				MaxInputWorkSeconds: tc.limit, AdmissionNeedsWeight: tc.needWeight}})
			hdr := validHeaders()
			hdr.Set(headers.Model, tc.model)
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantReason == "" {
				wantSeries(t, "admission_rejections_total", h.m.admissions, series{})
				return
			}
			if e := openAIError(t, resp, body); e.Code != dispatch.ReasonInputWorkLimit {
				t.Errorf("code %q, want input_work_limit_exceeded for both reasons", e.Code)
			}
			if got := resp.Header.Get(headers.StargateErrorCode); got != dispatch.ReasonInputWorkLimit {
				t.Errorf("x-stargate-error-code %q", got)
			}
			if got := resp.Header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1: every hub 503 says when to retry", got)
			}
			wantSeries(t, "admission_rejections_total", h.m.admissions, series{"rk|" + tc.model + "|" + tc.wantReason: 1})
			if len(sp.calls) != 0 {
				t.Error("the load balancer ran for a rejected request")
			}
		})
	}
}

// The session metric: all six pairs at zero once the target records a
// classified selection, and the right pair counted. A returning session is
// primary only on its last cluster; new and stale ones when their rank is
// inside the group.
func TestSessionSelectionsMetric(t *testing.T) {
	t.Parallel()
	zero := series{}
	for _, st := range []string{"new", "returning", "stale"} {
		for _, sel := range []string{"primary", "fallback"} {
			zero["rk|m|wait-and-widen|"+st+"|"+sel] = 0
		}
	}
	with := func(k string) series {
		s := series{}
		for kk, v := range zero {
			s[kk] = v
		}
		s[k] = 1
		return s
	}
	for _, tc := range []struct {
		name    string
		session routing.SessionState
		hint    string
		exclude bool // fail ca first so the pick lands on cb at rank 3
		want    series
	}{
		{"returning to its last cluster", routing.SessionReturning, "ca", false, with("rk|m|wait-and-widen|returning|primary")},
		{"returning elsewhere", routing.SessionReturning, "cb", false, with("rk|m|wait-and-widen|returning|fallback")},
		{"new inside the group", routing.SessionNew, "", false, with("rk|m|wait-and-widen|new|primary")},
		{"stale outside the group", routing.SessionStale, "gone", true, nil},
		{"unclassified records nothing", routing.SessionUnclassified, "", false, series{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wp := &waitingPicker{session: tc.session, group: 2, calls: make(chan pick, 100)}
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "wait-and-widen", Picker: wp, LastClusterAffinity: true}})
			if tc.exclude {
				h.backends["a1"].handle(retryable(http.StatusServiceUnavailable, "busy"))
				h.backends["a2"].handle(retryable(http.StatusServiceUnavailable, "busy"))
			}
			hdr := validHeaders()
			hdr.Set(headers.CacheAffinityKey, "mt:v1:session:abc")
			if tc.hint != "" {
				hdr.Set(headers.StargateLastClusterID, tc.hint)
			}
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			want := tc.want
			if want == nil {
				// ca primary (rank 1 ≤ group 2), then the retry on cb
				// (rank 3 > 2) is a fallback: one request, two selections.
				want = with("rk|m|wait-and-widen|stale|primary")
				want["rk|m|wait-and-widen|stale|fallback"] = 1
			}
			wantSeries(t, "routing_session_selections_total", h.m.sessions, want)
			// The hint is consumed: no backend ever sees it.
			for _, id := range allBackends {
				for _, r := range h.backends[id].requests() {
					if v := r.Header.Get(headers.StargateLastClusterID); v != "" {
						t.Errorf("backend %s received x-stargate-last-cluster-id %q", id, v)
					}
				}
			}
			if got := wait(t, wp.calls, "the pick").LastClusterID; got != tc.hint {
				t.Errorf("picker saw hint %q, want %q", got, tc.hint)
			}
		})
	}
}

// With a gateway token and --allow-anonymous-clients, only requests
// bearing the token may steer routing; the token itself never reaches a
// pylon.
func TestGatewayTokenGuardsSteering(t *testing.T) {
	t.Parallel()
	const token = "gw-secret"
	steer := func(hdr http.Header) {
		hdr.Set(headers.CacheAffinityKey, "mt:v1:session:abc")
		hdr.Set(headers.StargateLastClusterID, "cb")
		hdr.Set(headers.Priority, "7")
		hdr.Set(headers.RequestSLOMs, "900")
		hdr.Set(headers.StargateMaxWaitMs, "0")
	}
	for _, tc := range []struct {
		name    string
		auth    string
		trusted bool
	}{
		{"no credentials", "", false},
		{"a client key", "Bearer sk-client", false},
		{"the gateway token", "Bearer " + token, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newScripted(t, 0)
			h := newHarness(t, sp.route(), func(c *Config) { c.GatewayToken, c.AllowAnonymous = token, true })
			// An unscoped cluster: an untrusted request loses its
			// x-routing-key and lands here.
			unscoped := fixtureRegistration("a1")
			unscoped.InferenceServerID, unscoped.ClusterID = "u1", "cu"
			h.addBackend(state.Backend{ID: "u1", ClusterID: "cu", URL: "http://u1.pylon:8000"}, unscoped)
			hdr := validHeaders()
			steer(hdr)
			if tc.auth != "" {
				hdr.Set("Authorization", tc.auth)
			}
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			seen := wait(t, sp.calls, "the pick").Request
			if got := seen.AffinityKey != "" || seen.LastClusterID != "" || seen.Priority != 0 || seen.SLO != 0; got != tc.trusted {
				t.Errorf("steering honoured = %v, want %v (picker saw %+v)", got, tc.trusted, seen)
			}
			served := resp.Header.Get(headers.InferenceServerID)
			if (served == "u1") == tc.trusted {
				t.Errorf("served by %s: x-routing-key honoured = %v, want %v", served, served != "u1", tc.trusted)
			}
			fwd := h.backends[served].requests()[0].Header
			if v := fwd.Get("Authorization"); v == "Bearer "+token {
				t.Error("the gateway token was forwarded to the pylon")
			}
			if !tc.trusted && fwd.Get(headers.CacheAffinityKey) != "" {
				t.Error("an untrusted affinity key was forwarded")
			}
		})
	}
}

// With a gateway token, a request without it is refused before anything
// else: 401 in the OpenAI shape with WWW-Authenticate, the same answer for
// a missing and a wrong token (nothing tells a caller which), no backend
// called, counted; the token in any letter case of the scheme is served.
func TestGatewayTokenRequired(t *testing.T) {
	t.Parallel()
	const token = "gw-secret"
	h := newHarness(t, nil, func(c *Config) { c.GatewayToken = token })
	var bodies []string
	for _, auth := range []string{"", "Bearer sk-client", "Bearer " + token + "x", "Basic " + token, token} {
		hdr := validHeaders()
		if auth != "" {
			hdr.Set("Authorization", auth)
		}
		resp, body := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("Authorization %q: status %d WWW-Authenticate %q, want 401 with a challenge", auth, resp.StatusCode,
				resp.Header.Get("WWW-Authenticate"))
		}
		if e := openAIError(t, resp, body); e.Type != openai.TypeAuthentication || e.Code != ErrorCodeUnauthorized {
			t.Errorf("Authorization %q: error %+v", auth, e)
		}
		bodies = append(bodies, body)
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("401 bodies differ: %q and %q", bodies[0], b)
		}
	}
	if len(h.hits()) != 0 {
		t.Errorf("a backend was called for an unauthenticated request: %v", h.hits())
	}
	if got := testutil.ToFloat64(h.m.unauthorizedN); got != 5 {
		t.Errorf("unauthorized_requests_total = %v, want 5", got)
	}
	wantSeries(t, "requests_total", h.m.requests, series{})

	hdr := validHeaders()
	hdr.Set("Authorization", "bearer "+token)
	if resp, body := h.do(hdr, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("with the token: status %d: %s", resp.StatusCode, body)
	}
	if got := h.backends["a1"].requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("the pylon received Authorization %q", got)
	}
}
