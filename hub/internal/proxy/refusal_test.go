package proxy

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/pwnw"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The refusal tests add model w on two clusters of one backend each, cw1
// (w1) and cw2 (w2), both with free engine slots: the shape of the
// scale-out fleet, where a refused cluster has no sibling backend.
const refusalModel = "w"

// freeStats is what w1 and w2 register: 1 of 4 engine slots busy, so the
// free-slot rule makes the hub's queue estimate 0.
func freeStats() protocol.ModelStats {
	return protocol.ModelStats{LastMeanInputTPS: 1000, MaxInputTPS: 1000, MaxEngineConcurrency: 4, NumRunningQueries: 1}
}

func refusalRegistration(id string) *protocol.Registration {
	s := freeStats()
	return &protocol.Registration{V: protocol.Version, InferenceServerID: id, ClusterID: "c" + id,
		Models: map[string]protocol.ModelEntry{refusalModel: {Status: protocol.StatusActive, Stats: &s}}}
}

// registerW registers (again) backend id of model w: its next registration
// snapshot, as the pylon sends it every update interval.
func (h *harness) registerW(id string) {
	h.store.Apply(state.Backend{ID: id, ClusterID: "c" + id, URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
		refusalRegistration(id), time.Millisecond, true)
}

// addW adds w1 and w2 to h.
func (h *harness) addW() {
	for _, id := range []string{"w1", "w2"} {
		h.addBackend(state.Backend{ID: id, ClusterID: "c" + id, URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
			refusalRegistration(id))
	}
}

// mismatch is the pylon's refusal, body and headers as
// pylon/internal/engineproxy writes them.
func mismatch(actualMs string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(headers.StargateRetryable, "true")
		w.Header().Set(headers.StargateRetryReason, headers.ReasonQueueEstimateMismatch)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Too Many Requests","status":429,`+
			`"detail":"local queue estimate exceeded Stargate routing estimate","reason":"queue_estimate_mismatch",`+
			`"expected_queue_ms":0,"actual_queue_ms":`+actualMs+`,"threshold_ms":25}`)
	}
}

// recordingPicker passes every pick to inner and reports the request id
// of each one.
type recordingPicker struct {
	inner lb.Picker
	calls chan string
}

func (p *recordingPicker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	p.calls <- req.ID
	return p.inner.Pick(req, snap, now, rng)
}

// refusalHarness is a harness on a fake clock with w1 and w2 and the
// scale-out test's algorithm: pulsar-wait-and-widen with
// last_cluster_affinity and a 2 s affinity wait.
func refusalHarness(t *testing.T) (*harness, *clock.Fake, *recordingPicker) {
	t.Helper()
	clk := clock.NewFake(t0)
	cfg := pwnw.DefaultConfig()
	cfg.LastClusterAffinity = true
	cfg.AffinityWait = 2 * time.Second
	inner, err := pwnw.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rp := &recordingPicker{inner: inner, calls: make(chan string, 1000)}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: pwnw.Name, Picker: rp, LastClusterAffinity: true}}, withClock(clk))
	h.addW()
	return h, clk, rp
}

// sessionHeaders is a returning session of model w whose last turn ran on
// cw1.
func sessionHeaders(id string) http.Header {
	hdr := validHeaders()
	hdr.Set(headers.RequestID, id)
	hdr.Set(headers.Model, refusalModel)
	hdr.Set(headers.CacheAffinityKey, "key-"+id)
	hdr.Set(headers.StargateLastClusterID, "cw1")
	hdr.Set(headers.MaxWaitMs, "10000")
	return hdr
}

// markOf returns w1's refusal mark in the state's debug view, nil when it
// has none, and whether the view counts cw1 full.
func markOf(t *testing.T, s *state.Store) (*state.DebugQueueRefusal, bool) {
	t.Helper()
	for _, tg := range s.Debug().(state.DebugState).Targets {
		for _, c := range tg.Clusters {
			if tg.Model == refusalModel && c.ClusterID == "cw1" {
				return c.Backends[0].QueueRefusal, c.FullByRefusal
			}
		}
	}
	t.Fatal("no cluster cw1 in the state")
	return nil, false
}

// A returning session whose cluster refuses it once with
// queue_estimate_mismatch (another hub took the free slot this hub saw) is
// not answered 429 and does not escape to another cluster: the refusal
// marks w1 full, so the request, and a second one arriving meanwhile, wait
// for their cluster within the affinity wait; w1's next registration
// clears the mark and both are served on cw1
// (docs/design/hub-request.md#queue-refusals).
func TestQueueRefusalWaitsForRegistration(t *testing.T) {
	t.Parallel()
	h, clk, rp := refusalHarness(t)
	var refusals atomic.Int32
	h.backends["w1"].handle(func(w http.ResponseWriter, r *http.Request) {
		if refusals.Add(1) == 1 {
			mismatch("184")(w, r)
			return
		}
		ok(w, r)
	})

	// Cleanups run last-registered first: a failing test cancels its
	// requests before the harness's servers wait for them.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	first := h.sendAsync(ctx, sessionHeaders("r1"))
	pickOf(t, rp.calls, "r1") // chosen: cw1, estimate 0, refused
	pickOf(t, rp.calls, "r1") // the next pass sees cw1 full: it waits
	waitTimers(t, clk, 1)
	if got := h.hits(); got["w1"] != 1 || got["w2"] != 0 {
		t.Fatalf("hits %v, want the one refused attempt on w1", got)
	}
	mark, full := markOf(t, h.store)
	if mark == nil || mark.ActualQueueMs != 184 || !mark.At.Equal(t0) || !full {
		t.Fatalf("w1's mark %+v (cluster full %v), want actual_queue_ms 184 at t0", mark, full)
	}
	if h.pending() != 0 {
		t.Fatalf("%d pending reservations, want the refused one released", h.pending())
	}

	// A second returning session arrives while cw1 is marked: it is not
	// sent there to be refused, and does not escape either.
	second := h.sendAsync(ctx, sessionHeaders("r2"))
	pickOf(t, rp.calls, "r2")
	waitTimers(t, clk, 2)
	clk.Advance(100 * time.Millisecond) // well inside the 2 s affinity wait
	waitTimers(t, clk, 2)
	if got := h.hits(); got["w1"] != 1 || got["w2"] != 0 {
		t.Fatalf("hits %v while cw1 is marked, want none beyond the refused attempt", got)
	}

	// w1's next registration carries the truth (a free slot) and ends the
	// mark; it wakes both requests at once, without the clock moving, and
	// both go to cw1.
	h.registerW("w1")
	if mark, full := markOf(t, h.store); mark != nil || full {
		t.Fatalf("the registration left the mark %+v (full %v)", mark, full)
	}
	for _, done := range []<-chan respond{first, second} {
		res := wait(t, done, "a response")
		if res.err != nil || res.status != http.StatusOK || res.body != sseChunk1+sseDone ||
			res.header.Get(headers.StargateClusterID) != "cw1" || res.header.Get(headers.InferenceServerID) != "w1" {
			t.Fatalf("response %+v, want w1's 200 on cw1", res)
		}
	}
	h.inflight.Wait()
	reqs := h.backends["w1"].requests()
	if len(reqs) != 3 || h.hits()["w2"] != 0 {
		t.Fatalf("w1 got %d requests, w2 %d; want 3 and 0", len(reqs), h.hits()["w2"])
	}
	for i, r := range reqs {
		if q := r.Header.Get(headers.StargateExpectedQueueMs); q != "0" {
			t.Errorf("request %d to w1 carried x-stargate-expected-queue-ms %q, want 0 (a free slot)", i, q)
		}
	}
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|w|queue_estimate_mismatch": 1})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|w|w1|200": 2})
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|w|w1|upstream_429": 1, "rk|w|w1|upstream_200": 2})
}

// A pylon that refuses every request cannot make a request spin: after
// --proxy-max-queue-mismatch-retries retries (a sibling or another pass)
// its 429 is passed through, unchanged, and counted as exhausted. The
// cluster is never given up for another (power-of-n keeps choosing ca,
// whose queue estimate now carries the refusals), so b1 is never tried.
func TestQueueRefusalBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retries int
	}{
		{"default bound", DefaultMaxQueueMismatchRetries},
		{"configured bound", 3},
		{"no retries", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, func(c *Config) { c.MaxQueueMismatchRetries = tc.retries })
			h.backends["a1"].handle(mismatch("500"))
			h.backends["a2"].handle(mismatch("500"))
			resp, body := h.do(validHeaders(), chatBody)
			if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"actual_queue_ms":500,"threshold_ms":25}`) ||
				resp.Header.Get(headers.StargateClusterID) != "ca" {
				t.Fatalf("status %d body %q, want the pylon's 429 as sent", resp.StatusCode, body)
			}
			hits := h.hits()
			if hits["a1"]+hits["a2"] != tc.retries+1 || hits["b1"] != 0 {
				t.Fatalf("hits %v, want %d on ca and none on cb", hits, tc.retries+1)
			}
			if h.pending() != 0 {
				t.Errorf("%d pending reservations, want every refused one released", h.pending())
			}
			want := series{}
			if tc.retries > 0 {
				want["rk|m|queue_estimate_mismatch"] = float64(tc.retries)
			}
			wantSeries(t, "proxy_retries_total", h.m.retries, want)
			wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|queue_estimate_mismatch": 1})
			wantSeries(t, "requests_total", h.m.requests, series{"rk|m|" + resp.Header.Get(headers.InferenceServerID) + "|429": 1})
		})
	}
}

// Refusals use their own bound, not --proxy-max-request-retries: with no
// request retry at all, a refusal still moves to the sibling.
func TestQueueRefusalKeepsRequestRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.MaxRequestRetries = 0 })
	h.backends["a1"].handle(mismatch("90"))
	resp, _ := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "a2" {
		t.Fatalf("status %d from %q, want a2's 200", resp.StatusCode, resp.Header.Get(headers.InferenceServerID))
	}
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|queue_estimate_mismatch": 1})
}

// With no routing wait left (x-max-wait-ms: 0) a pass could not wait for
// the refused cluster, so it is given up as before and the request goes
// to another cluster.
func TestQueueRefusalWithoutRoutingWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.backends["a1"].handle(mismatch("90"))
	h.backends["a2"].handle(mismatch("90"))
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "0")
	resp, _ := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.StargateClusterID) != "cb" {
		t.Fatalf("status %d on %q, want cb's 200", resp.StatusCode, resp.Header.Get(headers.StargateClusterID))
	}
	if hits := h.hits(); hits["a1"] != 1 || hits["a2"] != 1 || hits["b1"] != 1 {
		t.Fatalf("hits %v", hits)
	}
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|queue_estimate_mismatch": 2})
}

// The retry budget (x-stargate-max-wait-ms) ends refusal retries like any
// other: the 429 is passed through as retry_budget_exhausted, and the
// backend is still marked.
func TestQueueRefusalBudgetSpent(t *testing.T) {
	t.Parallel()
	h, _, _ := refusalHarness(t)
	h.backends["w1"].handle(mismatch("75"))
	hdr := sessionHeaders("r1")
	hdr.Set(headers.StargateMaxWaitMs, "0")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"actual_queue_ms":75`) {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if mark, full := markOf(t, h.store); mark == nil || mark.ActualQueueMs != 75 || !full {
		t.Fatalf("mark %+v full %v", mark, full)
	}
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|w|retry_budget_exhausted": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})
}

func TestRefusedQueueMs(t *testing.T) {
	t.Parallel()
	long := `{"actual_queue_ms":7,"pad":"` + strings.Repeat("x", maxRefusalBody) + `"}`
	for _, tc := range []struct {
		body string
		want uint64
	}{
		{`{"reason":"queue_estimate_mismatch","expected_queue_ms":0,"actual_queue_ms":184,"threshold_ms":25}`, 184},
		{`{"reason":"queue_estimate_mismatch"}`, 0},
		{`{"actual_queue_ms":-1}`, 0},
		{`{"actual_queue_ms":"184"}`, 0},
		{`not json`, 0},
		{``, 0},
		{long, 0}, // past the bound: not parsed, but relayed whole
	} {
		resp := &http.Response{Body: io.NopCloser(strings.NewReader(tc.body))}
		if got := refusedQueueMs(resp); got != tc.want {
			t.Errorf("refusedQueueMs(%.40q) = %d, want %d", tc.body, got, tc.want)
		}
		rest, err := io.ReadAll(resp.Body)
		if err != nil || string(rest) != tc.body {
			t.Errorf("the body after parsing is %.40q (%v), want it unchanged", rest, err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Error(err)
		}
	}
}

// A returning session sent to its last cluster tells the pylon it accepts
// a queue there as long as what is left of the route's affinity wait (the
// algorithm would hold it that long for its cluster anyway): when another
// hub's request took the slot this hub saw free, the pylon admits the
// session to the engine's queue, where its KV cache is, instead of
// refusing it. Any other request keeps the hub's estimate (0 with a free
// slot), so a pylon with a queue refuses it as before.
func TestReturningSessionAcceptsItsClusterQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		returning bool
		want      string
	}{
		{"returning", true, "2000"},
		{"a new session", false, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			cfg := pwnw.DefaultConfig()
			cfg.LastClusterAffinity = true
			cfg.AffinityWait = 2 * time.Second
			inner, err := pwnw.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: pwnw.Name, Picker: inner, LastClusterAffinity: true,
				AffinityWait: cfg.AffinityWait}}, withClock(clk))
			h.addW()
			hdr := sessionHeaders("r1")
			if !tc.returning {
				hdr.Del(headers.StargateLastClusterID)
			}
			resp, _ := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			served := resp.Header.Get(headers.InferenceServerID)
			if tc.returning && served != "w1" {
				t.Fatalf("served by %q, want w1, the session's cluster", served)
			}
			reqs := h.backends[served].requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests to %s, want 1", len(reqs), served)
			}
			if q := reqs[0].Header.Get(headers.StargateExpectedQueueMs); q != tc.want {
				t.Errorf("x-stargate-expected-queue-ms %q, want %q", q, tc.want)
			}
		})
	}
}
