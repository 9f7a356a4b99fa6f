package engineproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// engineTracker is the test tracker with the engine hook the agent's
// tracker has: each observation learns the engine it is dispatched to.
type engineTracker struct{ *tracker }

func (t engineTracker) Begin(info RequestInfo) Observation {
	return engineObservation{t.tracker.Begin(info).(observation)}
}

func (t engineTracker) LocalQueueMs(model string, p uint32, self Observation) (uint64, bool) {
	if eo, ok := self.(engineObservation); ok {
		self = eo.observation
	}
	return t.tracker.LocalQueueMs(model, p, self)
}

type engineObservation struct{ observation }

func (x engineObservation) Dispatched(engine int) { x.o.Dispatched(engine) }

var _ EngineObservation = engineObservation{}

// newEnginesHarness is newHarness with several engines behind the proxy
// and behind the collector.
func newEnginesHarness(t *testing.T, urls []string, opts options) *harness {
	t.Helper()
	proxyEdit, statsEdit := opts.proxy, opts.stats
	opts.proxy = func(c *Config) {
		c.UpstreamBaseURL, c.UpstreamBaseURLs = "", urls
		if proxyEdit != nil {
			proxyEdit(c)
		}
	}
	opts.stats = func(c *stats.Config) {
		c.UpstreamBaseURL, c.UpstreamBaseURLs = "", urls
		if statsEdit != nil {
			statsEdit(c)
		}
	}
	h := newHarness(t, urls[0], opts)
	h.proxy.tracker = engineTracker{h.tr}
	return h
}

// label is the engine label of a test server URL.
func label(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// ids returns the x-request-id of every request an engine received.
func (s *scripted) ids() []string {
	var out []string
	for _, r := range s.received() {
		out = append(out, r.Header.Get(headers.RequestID))
	}
	return out
}

// postOK sends one chat request and fails unless it is answered 200.
func (h *harness) postOK(id string) {
	h.t.Helper()
	resp, b := h.post("/v1/chat/completions", validHeaders(id), chatBody)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("request %s: %d %s", id, resp.StatusCode, b)
	}
	h.waitServed(1)
}

// TestEnginesLeastOutstanding: 12 concurrent slow requests over 3 engines
// land 4 on each, since each goes to the engine with the fewest requests
// in flight.
func TestEnginesLeastOutstanding(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 12)
	slow := func(w http.ResponseWriter, r *http.Request, rec recorded) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		okJSON(w, r, rec)
	}
	engines := []*scripted{newScripted(t, slow), newScripted(t, slow), newScripted(t, slow)}
	h := newEnginesHarness(t, []string{engines[0].srv.URL, engines[1].srv.URL, engines[2].srv.URL}, options{})

	var wg sync.WaitGroup
	statuses := make(chan int, 12)
	for i := range 12 {
		wg.Go(func() {
			resp, _ := h.post("/v1/chat/completions", validHeaders("r"+strconv.Itoa(i)), chatBody)
			statuses <- resp.StatusCode
		})
	}
	for range 12 {
		select {
		case <-arrived:
		case <-time.After(hangGuard):
			t.Fatal("not every request reached an engine")
		}
	}
	for i, e := range engines {
		if n := len(e.received()); n != 4 {
			t.Errorf("engine %d got %d requests in flight, want 4", i, n)
		}
	}
	close(release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("status %d", s)
		}
	}
	h.waitServed(12)
	for i, e := range engines {
		if got := h.metric("pylon_upstream_engine_requests_total", "engine="+label(t, e.srv.URL)+",status=2xx"); got != 4 {
			t.Errorf("engine %d: requests_total{2xx} = %v, want 4", i, got)
		}
		if got := h.metric("pylon_upstream_engine_up", "engine="+label(t, e.srv.URL)); got != 1 {
			t.Errorf("engine %d: up = %v", i, got)
		}
	}
}

// TestEnginesAvoidBusyEngine: while engine 0 holds a long request, the
// following requests go to the idle engines only (plain round robin would
// send every third one to engine 0).
func TestEnginesAvoidBusyEngine(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	handle := func(w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.Header.Get(headers.RequestID) == "slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		okJSON(w, r, rec)
	}
	engines := []*scripted{newScripted(t, handle), newScripted(t, handle), newScripted(t, handle)}
	h := newEnginesHarness(t, []string{engines[0].srv.URL, engines[1].srv.URL, engines[2].srv.URL}, options{})
	done := make(chan int, 1)
	go func() {
		resp, _ := h.post("/v1/chat/completions", validHeaders("slow"), chatBody)
		done <- resp.StatusCode
	}()
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("the slow request did not reach an engine")
	}
	for i := range 6 {
		h.postOK("r" + strconv.Itoa(i))
	}
	if got := strings.Join(engines[0].ids(), ","); got != "slow" {
		t.Errorf("busy engine 0 got %s, want only the slow request", got)
	}
	if got := strings.Join(engines[1].ids(), ","); got != "r0,r2,r4" {
		t.Errorf("engine 1 got %s", got)
	}
	if got := strings.Join(engines[2].ids(), ","); got != "r1,r3,r5" {
		t.Errorf("engine 2 got %s", got)
	}
	close(release)
	if s := <-done; s != http.StatusOK {
		t.Errorf("slow request: %d", s)
	}
	h.waitServed(1)
}

// TestEnginesRoundRobinOnTies: requests one after the other (all engines
// idle, so always a tie) rotate over the engines.
func TestEnginesRoundRobinOnTies(t *testing.T) {
	engines := []*scripted{newScripted(t, okJSON), newScripted(t, okJSON), newScripted(t, okJSON)}
	h := newEnginesHarness(t, []string{engines[0].srv.URL, engines[1].srv.URL, engines[2].srv.URL}, options{})
	for i := range 6 {
		h.postOK("r" + strconv.Itoa(i))
	}
	want := [][]string{{"r0", "r3"}, {"r1", "r4"}, {"r2", "r5"}}
	for i, e := range engines {
		if got := strings.Join(e.ids(), ","); got != strings.Join(want[i], ",") {
			t.Errorf("engine %d got %s, want %v", i, got, want[i])
		}
	}
}

// TestDeadEngineMarkedDownAndRetried: an engine whose listener is closed
// fails to connect; it is marked down, the request is retried on another
// engine and succeeds, and the following requests avoid the dead engine.
func TestDeadEngineMarkedDownAndRetried(t *testing.T) {
	dead := closedURL(t)
	a, b := newScripted(t, okJSON), newScripted(t, okJSON)
	h := newEnginesHarness(t, []string{dead, a.srv.URL, b.srv.URL}, options{})
	deadL := label(t, dead)

	for i := range 5 {
		h.postOK("r" + strconv.Itoa(i))
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+deadL+",status=retried"); got != 1 {
		t.Errorf("dead engine: requests_total{retried} = %v, want 1 (only the first request tried it)", got)
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+deadL+",status=error"); got != 0 {
		t.Errorf("dead engine: requests_total{error} = %v, want 0", got)
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+deadL); got != 0 {
		t.Errorf("dead engine up = %v, want 0", got)
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+label(t, a.srv.URL)); got != 1 {
		t.Errorf("live engine up = %v, want 1", got)
	}
	na, nb := len(a.received()), len(b.received())
	if na+nb != 5 || na == 0 || nb == 0 {
		t.Errorf("live engines got %d and %d requests, want 5 spread over both", na, nb)
	}
	if a.ids()[0] != "r0" {
		t.Errorf("the retried request went to %v first, want engine a", a.ids())
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=complete"); got != 5 {
		t.Errorf("requests_total{complete} = %v, want 5", got)
	}
	if got := h.metric("pylon_nonretryable_failures_total", "inference_server_id=pylon-test,reason=local_connect_failure"); got != 0 {
		t.Errorf("a retried connect failure was reported to the hub")
	}
	for _, o := range h.tr.begun() {
		if o.State() != stats.Complete {
			t.Errorf("observer %s: %v", o.Info().ID, o.State())
		}
	}
}

// engineBackoff reads an engine's current down period.
func (h *harness) engineBackoff(i int) (bool, time.Duration) {
	p := h.proxy.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.engines[i].down, p.engines[i].backoff
}

// TestDownEngineComesBackAfterBackoff: an engine that drops requests
// before answering is skipped for 1 s, then tried again; a second failure
// doubles the period to 2 s; once it answers it is up and the backoff
// starts over at 1 s. All timing is on the fake clock.
func TestDownEngineComesBackAfterBackoff(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	flaky := newScripted(t, func(w http.ResponseWriter, r *http.Request, rec recorded) {
		if failing.Load() {
			panic(http.ErrAbortHandler) // a transport error before the response head
		}
		okJSON(w, r, rec)
	})
	ok := newScripted(t, okJSON)
	h := newEnginesHarness(t, []string{flaky.srv.URL, ok.srv.URL}, options{})
	fl := label(t, flaky.srv.URL)
	tries := func() int { return len(flaky.received()) }

	h.postOK("r1") // flaky first, fails, retried on ok
	if down, b := h.engineBackoff(0); !down || b != time.Second || tries() != 1 {
		t.Fatalf("after the first failure: down %v backoff %v tries %d", down, b, tries())
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+fl); got != 0 {
		t.Fatalf("up = %v, want 0", got)
	}
	h.postOK("r2")
	h.clk.Advance(999 * time.Millisecond)
	h.postOK("r3")
	if tries() != 1 {
		t.Fatalf("the down engine was tried %d times inside its backoff", tries())
	}

	h.clk.Advance(time.Millisecond) // backoff over: tried again, fails again
	h.postOK("r4")
	if down, b := h.engineBackoff(0); !down || b != 2*time.Second || tries() != 2 {
		t.Fatalf("after the second failure: down %v backoff %v tries %d", down, b, tries())
	}
	h.clk.Advance(time.Second)
	h.postOK("r5")
	if tries() != 2 {
		t.Fatalf("the down engine was tried inside its doubled backoff")
	}

	failing.Store(false)
	h.clk.Advance(time.Second)
	h.postOK("r6") // back: it answers
	if down, b := h.engineBackoff(0); down || b != 0 || tries() != 3 {
		t.Fatalf("after recovery: down %v backoff %v tries %d", down, b, tries())
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+fl); got != 1 {
		t.Fatalf("up = %v, want 1", got)
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+fl+",status=2xx"); got != 1 {
		t.Fatalf("requests_total{2xx} = %v, want 1", got)
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+fl+",status=retried"); got != 2 {
		t.Fatalf("requests_total{retried} = %v, want 2", got)
	}

	failing.Store(true)
	h.postOK("r7") // round robin: ok's turn
	h.postOK("r8") // flaky's turn: fails, the backoff starts over at 1 s
	if down, b := h.engineBackoff(0); !down || b != time.Second || tries() != 4 {
		t.Fatalf("after a new failure: down %v backoff %v tries %d", down, b, tries())
	}
}

// TestEngineFailureWithoutAlternative: when the only other engine is down
// too, there is no retry and the connect failure is answered as with one
// engine.
func TestEngineFailureWithoutAlternative(t *testing.T) {
	h := newEnginesHarness(t, []string{closedURL(t), closedURL(t)}, options{})
	for range 2 {
		resp, b := h.post("/v1/chat/completions", validHeaders("r"), chatBody)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status = %d (%s)", resp.StatusCode, b)
		}
		if p := problemBody(t, resp, b); p["reason"] != headers.ReasonLocalConnectFailure {
			t.Fatalf("reason = %v", p["reason"])
		}
		h.waitServed(1)
	}
	// First request: engine 0 fails, engine 1 is tried and fails. Second:
	// both are down, engine 0 is tried anyway; no eligible retry target.
	if got := h.metric("pylon_nonretryable_failures_total", "inference_server_id=pylon-test,reason=local_connect_failure"); got != 2 {
		t.Errorf("nonretryable local_connect_failure = %v, want 2", got)
	}
}

// TestStreamNotRetriedAfterHead: an engine that breaks a stream after its
// response head is not retried elsewhere; the stream is aborted.
func TestStreamNotRetriedAfterHead(t *testing.T) {
	c := newCommanded(t)
	other := newScripted(t, okJSON)
	h := newEnginesHarness(t, []string{c.srv.URL, other.srv.URL}, options{})
	resp := h.request(context.Background(), http.MethodPost, "/v1/chat/completions", validHeaders("s"), chatBody)
	er := readEvents(resp.Body)
	c.send(t, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
	er.next(t)
	c.send(t, "!abort")
	if err := er.end(t); errors.Is(err, io.EOF) {
		t.Fatal("the stream ended cleanly, want it aborted")
	}
	_ = resp.Body.Close()
	h.waitServed(1)
	if n := len(other.received()); n != 0 {
		t.Fatalf("the other engine got %d requests", n)
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+label(t, c.srv.URL)+",status=retried"); got != 0 {
		t.Fatalf("a stream was retried after its head")
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+label(t, c.srv.URL)); got != 1 {
		t.Fatalf("an engine that answered was marked down")
	}
}

// TestHealthAnyEngine: the hub's /health probe is answered by the first
// engine that is healthy; an unreachable engine is marked down on the way.
func TestHealthAnyEngine(t *testing.T) {
	up := newScripted(t, func(w http.ResponseWriter, _ *http.Request, _ recorded) { _, _ = io.WriteString(w, "ok") })
	dead := closedURL(t)
	h := newEnginesHarness(t, []string{dead, up.srv.URL}, options{})
	for range 2 {
		resp := h.request(context.Background(), http.MethodGet, "/health", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Fatalf("health = %d %q", resp.StatusCode, b)
		}
	}
	if got := h.metric("pylon_upstream_engine_up", "engine="+label(t, dead)); got != 0 {
		t.Errorf("dead engine up = %v, want 0", got)
	}

	h2 := newEnginesHarness(t, []string{closedURL(t), closedURL(t)}, options{})
	resp := h2.request(context.Background(), http.MethodGet, "/health", nil, "")
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("all engines down: health = %d %q", resp.StatusCode, b)
	}
	problemBody(t, resp, b)
}

// TestEnginesStatsFromEveryMockEngine: with two real mock engines, the
// collector sums their KV stats and takes both engines' stats streams: a
// long request in flight on each is tracked from its own engine's events.
func TestEnginesStatsFromEveryMockEngine(t *testing.T) {
	slow := func(capacity int64) func(*mockengine.Config) {
		return func(c *mockengine.Config) {
			c.TimeScale = 1
			c.TokenDelay = 5 * time.Millisecond
			c.KVCapacityTokens = capacity
		}
	}
	m0, m1 := newMockEngine(t, slow(1000)), newMockEngine(t, slow(3000))
	statsTransport := &http.Transport{}
	t.Cleanup(statsTransport.CloseIdleConnections)
	h := newEnginesHarness(t, []string{m0.srv.URL, m1.srv.URL}, options{stats: func(c *stats.Config) {
		c.StreamMode = stats.ModeRequired
		c.KVCachePath = "/kv-cache/stats"
		c.HTTPClient = &http.Client{Transport: statsTransport}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- h.coll.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runDone
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(hangGuard)
		for !cond() {
			select {
			case <-h.coll.Changed():
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("KV stats of both engines", func() bool {
		st, _ := h.coll.Stats(testModel)
		return st.KVCacheCapacityTokens == 4000 && st.KVCacheFreeTokens == 4000
	})

	reqCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var bodies []io.ReadCloser
	for _, id := range []string{"long-0", "long-1"} {
		hd := validHeaders(id)
		hd.Set(headers.OutputTokens, "100000") // minutes of decode
		resp := h.request(reqCtx, http.MethodPost, "/v1/chat/completions", hd, chatBody)
		bodies = append(bodies, resp.Body)
		er := readEvents(resp.Body)
		er.next(t) // role chunk
		er.next(t) // first token
	}
	for i, m := range []*mockEngine{m0, m1} {
		if got := m.metric(t, "vllm:num_requests_running", ""); got != 1 {
			t.Fatalf("engine %d running = %v, want 1", i, got)
		}
	}
	waitFor("stream counters for both requests", func() bool {
		return h.metric("pylon_engine_stats_live_requests", "source=engine_stats_stream") == 2
	})
	if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=unknown_request"); got != 0 {
		t.Errorf("unknown_request drops = %v, want 0", got)
	}
	if got := h.metric("pylon_engine_stats_stream_connected", "mode=required"); got != 2 {
		t.Errorf("stream_connected = %v, want 2", got)
	}
	stop()
	for _, b := range bodies {
		_ = b.Close()
	}
	h.waitServed(2)
}

func TestEngineLabels(t *testing.T) {
	got := EngineLabels([]string{"http://10.0.0.1:8000", "https://engine", "http://engine", "http://gw:9/a", "http://gw:9/b", "http://[::1]:7"})
	want := []string{"10.0.0.1:8000", "engine:443", "engine:80", "gw:9/a", "gw:9/b", "[::1]:7"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("labels %q, want %q", got, want)
	}
}

func TestConfigValidateEngines(t *testing.T) {
	good := Defaults()
	good.UpstreamBaseURLs = []string{"http://a:1", "http://b:2/"}
	if err := good.Validate(); err != nil {
		t.Fatalf("two engines: %v", err)
	}
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.UpstreamBaseURL = "http://a:1" }, "not both"},
		{func(c *Config) { c.UpstreamBaseURLs = []string{"http://a:1", "http://a:1/"} }, "listed twice"},
		{func(c *Config) { c.UpstreamBaseURLs = []string{"http://a:1", "ftp://b"} }, `"ftp://b"`},
		{func(c *Config) { c.UpstreamBaseURLs = []string{"http://a:1", "http://b?q"} }, "query"},
	}
	for _, tc := range cases {
		c := good
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--upstream-http-base-url") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming --upstream-http-base-url and %s", err, tc.want)
		}
	}
}
