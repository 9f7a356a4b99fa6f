package proxy

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// goneModel is a model whose only backend, g1 in cluster cg, registered
// and then left: the hub knows it, and has no backend for it.
const goneModel = "gone"

// addGone registers g1 serving goneModel and returns a function that
// registers it again.
func (h *harness) addGone() (comeBack func()) {
	sb := state.Backend{ID: "g1", ClusterID: "cg", URL: "http://g1.pylon:8000", RoutingKey: rk}
	reg := &protocol.Registration{V: protocol.Version, InferenceServerID: "g1", ClusterID: "cg",
		Models: map[string]protocol.ModelEntry{goneModel: {Status: protocol.StatusActive,
			Stats: &protocol.ModelStats{LastMeanInputTPS: 1000}}}}
	h.addBackend(sb, reg)
	return func() { h.store.Apply(sb, reg, time.Millisecond, true) }
}

func goneHeaders() http.Header {
	hdr := validHeaders()
	hdr.Set(headers.Model, goneModel)
	return hdr
}

// While a known model's only backend is away (a pylon restarting), a
// request waits for it instead of getting the 404 of a model nobody serves,
// and is served when it registers again; the wait sleeps on the clock's
// timer and the store's activation signal, never polls.
func TestKnownModelWaitsForBackend(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	comeBack := h.addGone()
	h.store.Remove("g1")

	res := h.sendAsync(context.Background(), goneHeaders())
	waitTimers(t, clk, 1)
	clk.Advance(5 * time.Second) // part of the wait: still waiting
	waitTimers(t, clk, 1)
	if got := testutil.ToFloat64(h.m.backendWaiting.WithLabelValues(rk, goneModel)); got != 1 {
		t.Errorf("model_unavailable_waiting = %v while waiting, want 1", got)
	}
	comeBack()
	got := wait(t, res, "the response")
	if got.err != nil || got.status != http.StatusOK || got.header.Get(headers.InferenceServerID) != "g1" {
		t.Fatalf("response %+v, want g1's 200", got)
	}
	h.inflight.Wait()
	wantSeries(t, "model_unavailable_waits_total", h.m.backendWaits, series{"rk|gone|appeared": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|gone|g1|200": 1})
	if got := testutil.ToFloat64(h.m.backendWaiting.WithLabelValues(rk, goneModel)); got != 0 {
		t.Errorf("model_unavailable_waiting = %v after the wait, want 0", got)
	}
}

// A known model that gets no backend within --proxy-model-unavailable-wait-ms
// (or the request's shorter x-max-wait-ms) is a 503
// model_temporarily_unavailable with Retry-After, exactly at the deadline.
func TestKnownModelWaitTimesOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxWait string // "" leaves x-max-wait-ms out
		want    time.Duration
	}{
		{"the hub's bound", "", DefaultModelUnavailableWait},
		{"x-max-wait-ms shorter", "2000", 2 * time.Second},
		{"x-max-wait-ms longer", "45000", DefaultModelUnavailableWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			h := newHarness(t, nil, withClock(clk))
			h.addGone()
			h.store.Remove("g1")
			hdr := goneHeaders()
			if tc.maxWait != "" {
				hdr.Set(headers.MaxWaitMs, tc.maxWait)
			}
			res := h.sendAsync(context.Background(), hdr)
			waitTimers(t, clk, 1)
			clk.Advance(tc.want - time.Millisecond)
			waitTimers(t, clk, 1)
			select {
			case got := <-res:
				t.Fatalf("answered %+v before the deadline", got)
			default:
			}
			clk.Advance(time.Millisecond)
			got := wait(t, res, "the response")
			if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") != "1" ||
				got.header.Get(headers.StargateErrorCode) != ErrorCodeModelUnavailable {
				t.Fatalf("response %+v, want 503 %s with Retry-After 1", got, ErrorCodeModelUnavailable)
			}
			var e struct{ Error openai.Error }
			if err := json.Unmarshal([]byte(got.body), &e); err != nil {
				t.Fatalf("body %q: %v", got.body, err)
			}
			if e.Error.Code != ErrorCodeModelUnavailable || e.Error.Type != openai.TypeServer {
				t.Errorf("error %+v", e.Error)
			}
			h.inflight.Wait()
			wantSeries(t, "model_unavailable_waits_total", h.m.backendWaits, series{"rk|gone|timed_out": 1})
			wantSeries(t, "requests_total", h.m.requests, series{"rk|gone||503": 1})
		})
	}
}

// An unknown model is a 404 at once, even with x-max-wait-ms: the fake
// clock never moves, so any wait would hang the request.
func TestUnknownModelDoesNotWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	hdr := validHeaders()
	hdr.Set(headers.Model, "never-registered")
	hdr.Set(headers.MaxWaitMs, "60000")
	got := wait(t, h.sendAsync(context.Background(), hdr), "the response")
	if got.status != http.StatusNotFound || got.header.Get(headers.StargateErrorCode) != headers.ErrorCodeNoEligibleCandidates {
		t.Fatalf("response %+v, want the 404 of an unknown model", got)
	}
	if got.header.Get("Retry-After") != "" {
		t.Errorf("a 404 carries Retry-After %q", got.header.Get("Retry-After"))
	}
}

// A model lb-config names is known before any pylon registered it, and
// during the startup grace every model is; after the grace an unknown
// model is a 404 again.
func TestConfiguredModelAndStartupGrace(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk), func(c *Config) {
		c.ConfiguredModel = func(m string) bool { return m == "configured" }
		c.StartupGrace = 10 * time.Second
	})
	for _, m := range []string{"configured", "new-after-restart"} {
		hdr := validHeaders()
		hdr.Set(headers.Model, m)
		hdr.Set(headers.MaxWaitMs, "1000")
		res := h.sendAsync(context.Background(), hdr)
		waitTimers(t, clk, 1)
		clk.Advance(time.Second)
		if got := wait(t, res, "the response"); got.status != http.StatusServiceUnavailable ||
			got.header.Get(headers.StargateErrorCode) != ErrorCodeModelUnavailable {
			t.Fatalf("%s: response %+v, want 503 %s", m, got, ErrorCodeModelUnavailable)
		}
	}
	clk.Advance(8 * time.Second) // 10 s after the start: the grace is over
	hdr := validHeaders()
	hdr.Set(headers.Model, "new-after-restart")
	if got := wait(t, h.sendAsync(context.Background(), hdr), "the response"); got.status != http.StatusNotFound {
		t.Fatalf("after the grace: response %+v, want 404", got)
	}
	hdr.Set(headers.Model, "configured")
	hdr.Set(headers.MaxWaitMs, "0")
	if got := wait(t, h.sendAsync(context.Background(), hdr), "the response"); got.status != http.StatusServiceUnavailable {
		t.Fatalf("a configured model after the grace: response %+v, want 503", got)
	}
}

// A client that leaves while waiting for a backend ends the wait at once:
// counted as 499, never answered.
func TestClientLeavesDuringBackendWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	h.addGone()
	h.store.Remove("g1")
	ctx, cancel := context.WithCancel(context.Background())
	res := h.sendAsync(ctx, goneHeaders())
	waitTimers(t, clk, 1)
	cancel()
	if got := wait(t, res, "the client's error"); got.err == nil {
		t.Fatalf("response %+v, want the client's cancellation", got)
	}
	h.inflight.Wait()
	wantSeries(t, "model_unavailable_waits_total", h.m.backendWaits, series{"rk|gone|client_gone": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|gone||" + strconv.Itoa(statusClientClosed): 1})
}

// When the hub gives up, the pylon's x-stargate-retry-after-ms reaches the
// client as Retry-After in whole seconds, rounded up and within 1..60; the
// hint itself never does. Every 503 the hub sends carries Retry-After: a
// passed-through 503 without a hint keeps the engine's or gets 1, and the
// hub's own 503 after every cluster refused carries the longest hint.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	refuse := func(status int, retryable, hintMs, engineRetryAfter string) http.HandlerFunc {
		kv := []string{headers.StargateRetryable, retryable, headers.StargateRetryReason, headers.ReasonUpstreamAdmissionRejected}
		if hintMs != "" {
			kv = append(kv, headers.StargateRetryAfterMs, hintMs)
		}
		if engineRetryAfter != "" {
			kv = append(kv, "Retry-After", engineRetryAfter)
		}
		return answer(status, kv...)
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		status  int
		want    string
	}{
		{"503 hint rounded up", refuse(http.StatusServiceUnavailable, "true", "2500", ""), 503, "3"},
		{"503 hint under a second", refuse(http.StatusServiceUnavailable, "true", "25", ""), 503, "1"},
		{"hint capped at 60 s", refuse(http.StatusServiceUnavailable, "true", "600000", ""), 503, "60"},
		{"hint beyond a Duration capped", refuse(http.StatusServiceUnavailable, "true", "18446744073709551615", ""), 503, "60"},
		{"429 hint", refuse(http.StatusTooManyRequests, "true", "1001", ""), 429, "2"},
		{"hint replaces the engine's", refuse(http.StatusServiceUnavailable, "true", "3000", "9"), 503, "3"},
		{"503 without a hint", refuse(http.StatusServiceUnavailable, "false", "", ""), 503, "1"},
		{"malformed hint", refuse(http.StatusServiceUnavailable, "true", "soon", ""), 503, "1"},
		{"503 keeps the engine's", refuse(http.StatusServiceUnavailable, "false", "", "7"), 503, "7"},
		{"429 without a hint has none", refuse(http.StatusTooManyRequests, "false", "", ""), 429, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, func(c *Config) { c.MaxRequestRetries = 0 })
			h.backends["a1"].handle(tc.handler)
			resp, _ := h.do(validHeaders(), chatBody)
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.want {
				t.Fatalf("status %d Retry-After %q, want %d and %q", resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.want)
			}
			if v := resp.Header.Get(headers.StargateRetryAfterMs); v != "" {
				t.Errorf("the pylon's hint reached the client: %q", v)
			}
		})
	}

	t.Run("every cluster refused", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil, func(c *Config) { c.MaxRequestRetries = 10 })
		h.backends["a1"].handle(refuse(http.StatusServiceUnavailable, "true", "1500", ""))
		h.backends["b1"].handle(refuse(http.StatusServiceUnavailable, "true", "4200", ""))
		resp, body := h.do(validHeaders(), chatBody)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(headers.InferenceServerID) != "" ||
			resp.Header.Get(headers.StargateErrorCode) != headers.ErrorCodeOverloaded {
			t.Fatalf("status %d headers %v, want the hub's own 503", resp.StatusCode, resp.Header)
		}
		openAIError(t, resp, body)
		if got := resp.Header.Get("Retry-After"); got != "5" {
			t.Errorf("Retry-After %q, want 5 (the longest hint, 4.2 s, rounded up)", got)
		}
	})
}

// The pure conversion: whole seconds rounded up, within 1..60.
func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]int{0: 1, time.Nanosecond: 1, time.Second: 1, time.Second + 1: 2,
		59*time.Second + 1: 60, time.Minute: 60, time.Hour: 60, math.MaxInt64: 60} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
