package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// withClock makes the harness run on clk (proxy and state store).
func withClock(clk clock.Clock) option { return func(c *Config) { c.Clock = clk } }

// waitTimers waits, without sleeping, until clk has at least n armed
// timers.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := clk.Changed()
		if clk.Timers() >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %d armed timers (have %d)", n, clk.Timers())
		}
	}
}

// scriptedPicker records every request it sees and declines the first
// declines calls (-1: all), then defers to power-of-n.
type scriptedPicker struct {
	declines int
	calls    chan pick
	n        atomic.Int32
	inner    lb.Picker
}

func newScripted(t *testing.T, declines int) *scriptedPicker {
	inner, err := powerofn.New(powerofn.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &scriptedPicker{declines: declines, calls: make(chan pick, 1000), inner: inner}
}

func (s *scriptedPicker) Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool) {
	n := int(s.n.Add(1))
	cp := *req
	cp.Excluded = slices.Clone(req.Excluded)
	s.calls <- pick{cp, now}
	if s.declines < 0 || n <= s.declines {
		return routing.Decision{}, false
	}
	return s.inner.Pick(req, snap, now, rng)
}

// pick is one call of a scriptedPicker.
type pick struct {
	routing.Request
	now time.Time
}

func (s *scriptedPicker) route() lb.Resolver {
	return fixedResolver{lb.Route{Algorithm: "scripted", Picker: s}}
}

// respond is the outcome of a request sent in the background.
type respond struct {
	status int
	header http.Header
	body   string
	err    error
}

// sendAsync sends the request on its own goroutine, for tests that must
// move the fake clock while the proxy waits.
func (h *harness) sendAsync(ctx context.Context, hdr http.Header) <-chan respond {
	ch := make(chan respond, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		if err != nil {
			ch <- respond{err: err}
			return
		}
		req.Header = hdr
		resp, err := h.client.Do(req)
		if err != nil {
			ch <- respond{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		ch <- respond{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
	}()
	return ch
}

// The picker sees the parsed request: ids, tokens, priority, affinity key,
// SLO, wait, the request start and, on a later pass, the failed clusters.
func TestPickerSeesRequest(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	sp := newScripted(t, 0)
	h := newHarness(t, sp.route(), withClock(clk))
	h.backends["a1"].handle(retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected))
	hdr := validHeaders()
	hdr.Set(headers.Priority, "5")
	hdr.Set(headers.CacheAffinityKey, " mt:v1:session:abc ")
	hdr.Set(headers.RequestSLOMs, "1500")
	hdr.Set(headers.MaxWaitMs, "250")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "b1" {
		t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get(headers.InferenceServerID), body)
	}
	first := wait(t, sp.calls, "the first pick").Request
	want := routing.Request{ID: "req-1", InputTokens: 100, Priority: 5, AffinityKey: "mt:v1:session:abc",
		SLO: 1500 * time.Millisecond, MaxWait: 250 * time.Millisecond, ReceivedAt: t0}
	if !first.ReceivedAt.Equal(t0) {
		t.Errorf("ReceivedAt = %v, want the request start %v", first.ReceivedAt, t0)
	}
	first.ReceivedAt, want.ReceivedAt = time.Time{}, time.Time{}
	if first.ID != want.ID || first.InputTokens != want.InputTokens || first.Priority != want.Priority ||
		first.AffinityKey != want.AffinityKey || first.SLO != want.SLO || first.MaxWait != want.MaxWait || len(first.Excluded) != 0 {
		t.Errorf("first pick saw %+v, want %+v", first, want)
	}
	if second := wait(t, sp.calls, "the second pick"); !slices.Equal(second.Excluded, []string{"ca"}) {
		t.Errorf("second pick excluded %v, want [ca]", second.Excluded)
	}
	// Priority 5 reads key 5 of ca's map {0:120, 5:300}.
	if q := h.backends["a1"].requests()[0].Header.Get(headers.StargateExpectedQueueMs); q != "300" {
		t.Errorf("x-stargate-expected-queue-ms %q at priority 5, want 300", q)
	}
	wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|scripted|primary": 2})
}

// The routing wait ends at min(x-max-wait-ms, the 60 s cap) with the bare
// 503; without x-max-wait-ms there is no wait at all. With nothing
// published meanwhile the request sleeps to the deadline in one go, and
// its pass there ends it.
func TestRoutingWaitExpires(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxWait string // "" = absent
		cap     time.Duration
		wait    time.Duration // the effective routing wait
	}{
		{"no header, no wait", "", 60 * time.Second, 0},
		{"20 ms", "20", 60 * time.Second, 20 * time.Millisecond},
		{"capped to 20 ms", "3600000", 20 * time.Millisecond, 20 * time.Millisecond},
		{"0 ms", "0", 60 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			sp := newScripted(t, -1)
			h := newHarness(t, sp.route(), withClock(clk), func(c *Config) { c.MaxRoutingWait = tc.cap })
			hdr := validHeaders()
			if tc.maxWait != "" {
				hdr.Set(headers.MaxWaitMs, tc.maxWait)
			}
			deadline := t0.Add(tc.wait)
			done := h.sendAsync(context.Background(), hdr)
			picks := 0
			for {
				p := wait(t, sp.calls, "a pick")
				picks++
				if tc.maxWait == "" || !p.now.Before(deadline) {
					break
				}
				waitTimers(t, clk, 1) // the wait for a change, to the deadline
				clk.Advance(tc.wait)
			}
			res := wait(t, done, "the response")
			if res.err != nil || res.status != http.StatusServiceUnavailable {
				t.Fatalf("response %+v", res)
			}
			if n := len(sp.calls); n != 0 {
				t.Errorf("%d picks after the deadline", n)
			}
			if tc.wait > 0 && picks != 2 {
				t.Errorf("%d picks in a %v wait with nothing published, want 2: at the start and at the deadline", picks, tc.wait)
			}
			h.inflight.Wait()
			wantSeries(t, "requests_total", h.m.requests, series{"rk|m||503": 1})
			wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{})
			// Clusters were there; the load balancer found none usable.
			wantSeries(t, "admission_rejections_total", h.m.admissions, series{"rk|m|routing_capacity_unavailable": 1})
		})
	}
}

// A client that leaves during the routing wait ends it (499).
func TestRoutingWaitClientCancel(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	sp := newScripted(t, -1)
	h := newHarness(t, sp.route(), withClock(clk))
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "60000")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := h.sendAsync(ctx, hdr)
	wait(t, sp.calls, "a pick")
	waitTimers(t, clk, 1)
	cancel()
	if res := wait(t, done, "the client"); res.err == nil {
		t.Fatalf("response %+v after cancel", res)
	}
	h.inflight.Wait()
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||499": 1})
}

// No response head within --tunnel-request-timeout-ms is a transport
// failure (proxy_502): the sibling gets the request.
func TestRequestTimeoutFailsOver(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	entered, cancelled := make(chan struct{}), make(chan struct{})
	h.backends["a1"].handle(func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		close(cancelled)
	})
	done := h.sendAsync(context.Background(), validHeaders())
	wait(t, entered, "a1 to receive the request")
	clk.Advance(h.cfg.RequestTimeout - time.Millisecond)
	select {
	case <-cancelled:
		t.Fatal("attempt cancelled before the request timeout")
	default:
	}
	clk.Advance(time.Millisecond)
	wait(t, cancelled, "the timed-out attempt to be cancelled")
	res := wait(t, done, "the response")
	if res.err != nil || res.status != http.StatusOK || res.header.Get(headers.InferenceServerID) != "a2" {
		t.Fatalf("response %+v, want a2's 200", res)
	}
	h.inflight.Wait()
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|proxy_502": 1, "rk|m|a2|upstream_200": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|connect_failover": 1})
}

// The request timeout bounds the time to the head only: a slow stream
// after it is never cut.
func TestRequestTimeoutStopsAtHead(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	next := make(chan struct{})
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, sseChunk1)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, sseDone)
	})
	resp := h.send(context.Background(), validHeaders(), chatBody)
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev != sseChunk1 {
		t.Fatalf("event 1 = %q", ev)
	}
	if n := clk.Timers(); n != 0 {
		t.Errorf("%d timers armed once the head arrived", n)
	}
	clk.Advance(10 * h.cfg.RequestTimeout)
	close(next)
	if ev := readEvent(t, br); ev != sseDone {
		t.Fatalf("event 2 = %q", ev)
	}
}

// An expired retry budget makes the next retryable answer final.
func TestRetryBudgetExpires(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		clk.Advance(100 * time.Millisecond) // the budget is used up while a1 works
		retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected)(w, r)
	})
	hdr := validHeaders()
	hdr.Set(headers.StargateMaxWaitMs, "100")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable || body != `{"upstream_status":503}` {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|retry_budget_exhausted": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})

	// A budget with time left allows the retry.
	hdr.Set(headers.StargateMaxWaitMs, "101")
	h.backends["a2"].handle(h.backends["a1"].handler.Load().ServeHTTP)
	resp, _ = h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "b1" {
		t.Fatalf("status %d from %s, want b1's 200", resp.StatusCode, resp.Header.Get(headers.InferenceServerID))
	}
}

// routing_duration_seconds runs from the start of the routing loop to the
// first pick; reading the request body comes before the loop and is not
// part of it. proxy_duration_seconds runs from the request start.
func TestRoutingDurationExcludesBodyUpload(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	// In process, so that the body is read by the proxy after it parsed
	// the headers, as over the network.
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", &advancingReader{r: strings.NewReader(chatBody), clk: clk, by: time.Second})
	r.Header = validHeaders()
	w := httptest.NewRecorder()
	h.p.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d body %s", w.Code, w.Body)
	}
	const routing = `
# HELP stargate_routing_duration_seconds Start of the routing loop to the first backend pick.
# TYPE stargate_routing_duration_seconds histogram
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.0001"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.0005"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.001"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.005"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.01"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.05"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="0.1"} 1
stargate_routing_duration_seconds_bucket{model="m",routing_key="rk",le="+Inf"} 1
stargate_routing_duration_seconds_sum{model="m",routing_key="rk"} 0
stargate_routing_duration_seconds_count{model="m",routing_key="rk"} 1
`
	if err := testutil.CollectAndCompare(h.m.routingDur, strings.NewReader(routing)); err != nil {
		t.Error(err)
	}
	const proxyDur = `
# HELP stargate_proxy_duration_seconds Request start to upstream response head.
# TYPE stargate_proxy_duration_seconds histogram
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.001"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.005"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.01"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.025"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.05"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.1"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.25"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="0.5"} 0
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="1"} 1
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="2.5"} 1
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="5"} 1
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="10"} 1
stargate_proxy_duration_seconds_bucket{inference_server_id="a1",model="m",routing_key="rk",le="+Inf"} 1
stargate_proxy_duration_seconds_sum{inference_server_id="a1",model="m",routing_key="rk"} 1
stargate_proxy_duration_seconds_count{inference_server_id="a1",model="m",routing_key="rk"} 1
`
	if err := testutil.CollectAndCompare(h.m.proxyDur, strings.NewReader(proxyDur)); err != nil {
		t.Error(err)
	}
	n := len(chatBody)
	replay := `
# HELP stargate_proxy_replay_buffer_bytes Request body bytes held for replay.
# TYPE stargate_proxy_replay_buffer_bytes histogram
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="0"} 0
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="1024"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="4096"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="16384"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="65536"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="262144"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="1.048576e+06"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="4.194304e+06"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="1.6777216e+07"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="6.7108864e+07"} 1
stargate_proxy_replay_buffer_bytes_bucket{model="m",le="+Inf"} 1
stargate_proxy_replay_buffer_bytes_sum{model="m"} ` + itoa(n) + `
stargate_proxy_replay_buffer_bytes_count{model="m"} 1
`
	if err := testutil.CollectAndCompare(h.m.replayBuffer, strings.NewReader(replay)); err != nil {
		t.Error(err)
	}
}

// advancingReader moves the fake clock forward once its data is read, as a
// slow upload would.
type advancingReader struct {
	r   io.Reader
	clk *clock.Fake
	by  time.Duration
	did bool
}

func (a *advancingReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if errors.Is(err, io.EOF) && !a.did {
		a.did = true
		a.clk.Advance(a.by)
	}
	return n, err
}
