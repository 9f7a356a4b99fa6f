package stats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// failAfter bounds every wait on the code under test. It is a hang guard,
// never a timing assertion: all timing runs on the fake clock.
const failAfter = 10 * time.Second

// reply is what the fake engine answers on one stream attempt.
type reply struct {
	status  int      // 0 means 200 with a stream
	prelude []string // lines written at once
	close   bool     // end the stream after the prelude (EOF)
}

// engine is an httptest NDJSON stats server. Attempt n (from 1) gets
// plan(n); open streams also forward lines sent on the lines channel.
type engine struct {
	srv      *httptest.Server
	attempts atomic.Int64
	lines    chan string
}

func newEngine(t *testing.T, plan func(n int) reply) *engine {
	e := &engine{lines: make(chan string)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != DefaultStreamPath || r.Header.Get("Accept") != "application/x-ndjson" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		rp := plan(int(e.attempts.Add(1)))
		if rp.status != 0 {
			w.WriteHeader(rp.status)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for _, l := range rp.prelude {
			_, _ = fmt.Fprint(w, l+"\n")
		}
		w.(http.Flusher).Flush()
		if rp.close {
			return
		}
		for {
			select {
			case l := <-e.lines:
				_, _ = fmt.Fprint(w, l+"\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

type backoffEvent struct {
	reason string
	d      time.Duration
}

// consumer runs the stream consumer of h in the background with hooks that
// report each backoff and each handled line.
type consumer struct {
	backoffs chan backoffEvent
	handled  chan struct{}
	done     chan struct{}
	cancel   context.CancelFunc
}

func startConsumer(t *testing.T, h *harness) *consumer {
	cs := &consumer{backoffs: make(chan backoffEvent, 64), handled: make(chan struct{}, 1024), done: make(chan struct{})}
	h.c.onBackoff = func(reason string, d time.Duration) { cs.backoffs <- backoffEvent{reason, d} }
	h.c.onLine = func() { cs.handled <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	cs.cancel = cancel
	go func() {
		defer close(cs.done)
		h.c.runStream(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-cs.done
	})
	return cs
}

func (cs *consumer) nextBackoff(t *testing.T) backoffEvent {
	t.Helper()
	select {
	case ev := <-cs.backoffs:
		return ev
	case <-cs.done:
		t.Fatal("consumer ended instead of backing off")
	case <-time.After(failAfter):
		t.Fatal("no backoff")
	}
	return backoffEvent{}
}

func (cs *consumer) waitLines(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-cs.handled:
		case <-time.After(failAfter):
			t.Fatal("line not handled")
		}
	}
}

func (cs *consumer) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-cs.done:
	case <-time.After(failAfter):
		t.Fatal("consumer did not end")
	}
}

func (cs *consumer) stop(t *testing.T) {
	cs.cancel()
	cs.waitDone(t)
}

// expectBackoffs checks the next backoffs and advances the fake clock past
// each.
func expectBackoffs(t *testing.T, h *harness, cs *consumer, want ...backoffEvent) {
	t.Helper()
	for i, w := range want {
		got := cs.nextBackoff(t)
		if got != w {
			t.Fatalf("backoff %d: got %+v, want %+v", i, got, w)
		}
		h.clk.Advance(got.d)
	}
}

func streamHarness(t *testing.T, mode string, plan func(n int) reply) (*harness, *engine) {
	e := newEngine(t, plan)
	h := newHarness(t, Config{UpstreamBaseURL: e.srv.URL + "/", StreamMode: mode})
	return h, e
}

func TestStreamBackoffDoublesToFiveSeconds(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeAuto, func(int) reply { return reply{status: http.StatusInternalServerError} })
	cs := startConsumer(t, h)
	var want []backoffEvent
	for _, ms := range []int{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000} {
		want = append(want, backoffEvent{reconnectHTTPStatus, time.Duration(ms) * time.Millisecond})
	}
	expectBackoffs(t, h, cs, want...)
	cs.stop(t)
	if h.c.FallbackActive() {
		t.Fatal("500 enabled the fallback")
	}
	if got := h.metric("pylon_engine_stats_stream_reconnects_total", "reason=http_status"); got != 9 {
		t.Fatalf("reconnects %v, want 9", got)
	}
}

func TestStreamBackoffIsNeverReset(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeAuto, func(n int) reply {
		if n == 3 {
			return reply{prelude: []string{`{"v":1,"type":"ping"}`}, close: true}
		}
		return reply{status: http.StatusServiceUnavailable}
	})
	cs := startConsumer(t, h)
	expectBackoffs(t, h, cs,
		backoffEvent{reconnectHTTPStatus, 100 * time.Millisecond},
		backoffEvent{reconnectHTTPStatus, 200 * time.Millisecond},
		backoffEvent{reconnectEOF, 400 * time.Millisecond},
		backoffEvent{reconnectHTTPStatus, 800 * time.Millisecond},
	)
}

func TestStreamConnectErrorsReconnect(t *testing.T) {
	t.Parallel()
	// The dead address is on 127.0.0.2 while every test server listens on
	// 127.0.0.1, so a parallel test's server cannot be handed its port.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	h := newHarness(t, Config{UpstreamBaseURL: url, StreamMode: ModeAuto})
	cs := startConsumer(t, h)
	expectBackoffs(t, h, cs,
		backoffEvent{reconnectConnectError, 100 * time.Millisecond},
		backoffEvent{reconnectConnectError, 200 * time.Millisecond},
	)
	if h.c.FallbackActive() {
		t.Fatal("connect errors enabled the fallback")
	}
}

func TestAutoFallsBackOnUnsupportedBeforeAnyEvent(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			h, e := streamHarness(t, ModeAuto, func(int) reply { return reply{status: status} })
			if h.c.FallbackActive() {
				t.Fatal("fallback active before the stream answered")
			}
			cs := startConsumer(t, h)
			cs.waitDone(t) // the consumer's expected exit
			if !h.c.FallbackActive() || e.attempts.Load() != 1 || len(cs.backoffs) != 0 {
				t.Fatalf("fallback %v attempts %d backoffs %d", h.c.FallbackActive(), e.attempts.Load(), len(cs.backoffs))
			}
			if got := h.metric("pylon_engine_stats_source_transitions_total",
				"from=engine_stats_stream,to=openai_fallback,reason=unsupported"); got != 1 {
				t.Fatalf("transitions %v", got)
			}
		})
	}
}

func TestAutoDoesNotFallBackAfterAValidEvent(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeAuto, func(n int) reply {
		if n == 1 {
			return reply{prelude: []string{`{"v":1,"type":"ping"}`}, close: true}
		}
		return reply{status: http.StatusNotFound}
	})
	cs := startConsumer(t, h)
	expectBackoffs(t, h, cs,
		backoffEvent{reconnectEOF, 100 * time.Millisecond},
		backoffEvent{reconnectUnsupported, 200 * time.Millisecond},
		backoffEvent{reconnectUnsupported, 400 * time.Millisecond},
	)
	if h.c.FallbackActive() {
		t.Fatal("fell back after a valid event")
	}
}

func TestAutoInvalidLinesAreNotValidEvents(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeAuto, func(n int) reply {
		if n == 1 {
			return reply{prelude: []string{`{"v":2,"type":"ping"}`, `garbage`}, close: true}
		}
		return reply{status: http.StatusNotFound}
	})
	cs := startConsumer(t, h)
	expectBackoffs(t, h, cs, backoffEvent{reconnectEOF, 100 * time.Millisecond})
	cs.waitDone(t)
	if !h.c.FallbackActive() {
		t.Fatal("malformed lines counted as valid events")
	}
}

func TestRequiredNeverFallsBack(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeRequired, func(int) reply { return reply{status: http.StatusNotFound} })
	cs := startConsumer(t, h)
	expectBackoffs(t, h, cs,
		backoffEvent{reconnectUnsupported, 100 * time.Millisecond},
		backoffEvent{reconnectUnsupported, 200 * time.Millisecond},
	)
	if h.c.FallbackActive() {
		t.Fatal("required mode fell back")
	}
}

func TestOffNeverOpensTheStream(t *testing.T) {
	t.Parallel()
	h, e := streamHarness(t, ModeOff, func(int) reply { return reply{} })
	if !h.c.FallbackActive() {
		t.Fatal("off mode without the fallback")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.c.Run(ctx) }()
	h.clk.WaitForTimers(1)
	for range 10 {
		h.clk.Advance(time.Second)
		h.clk.WaitForTimers(1)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := e.attempts.Load(); n != 0 {
		t.Fatalf("off mode opened the stream %d times", n)
	}
}

func TestStreamValidationKeepsTheStreamOpen(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		ReasonJSON:         `{"v":1`,
		ReasonNotObject:    `[1]`,
		ReasonMissingField: `{"type":"ping"}`,
		ReasonVersion:      `{"v":2,"type":"ping"}`,
		ReasonType:         `{"v":1,"type":"nope"}`,
		ReasonField:        `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_generated":-3}`,
		ReasonEmptyStats:   `{"v":1,"type":"stats","request_id":"r","model":"m"}`,
		ReasonLineTooLarge: `{"v":1,"type":"ping","pad":"` + strings.Repeat("x", MaxLineBytes) + `"}`,
	}
	var prelude []string
	for _, l := range bad {
		prelude = append(prelude, l+"\r") // CRLF endings
	}
	// Exactly MaxLineBytes is still a line.
	exact := `{"v":1,"type":"ping","pad":"`
	exact += strings.Repeat("y", MaxLineBytes-len(exact)-2) + `"}`
	prelude = append(prelude, "", exact)
	h, e := streamHarness(t, ModeRequired, func(int) reply { return reply{prelude: prelude} })
	cs := startConsumer(t, h)
	cs.waitLines(t, len(prelude))
	for reason := range bad {
		if got := h.metric("pylon_engine_stats_stream_invalid_events_total", "reason="+reason); got != 1 {
			t.Errorf("invalid{%s} = %v, want 1", reason, got)
		}
	}
	if got := h.metric("pylon_engine_stats_stream_events_total", "type=ping"); got != 1 {
		t.Fatalf("pings %v, want 1", got)
	}
	if got := h.metric("pylon_engine_stats_stream_connected", "mode=required"); got != 1 {
		t.Fatalf("connected %v, want 1", got)
	}
	// The same connection still delivers events.
	e.lines <- `{"v":1,"type":"ping"}`
	cs.waitLines(t, 1)
	if got := h.metric("pylon_engine_stats_stream_events_total", "type=ping"); got != 2 || e.attempts.Load() != 1 {
		t.Fatalf("pings %v attempts %d", got, e.attempts.Load())
	}
	cs.stop(t)
	if got := h.metric("pylon_engine_stats_stream_connected", "mode=required"); got != 0 {
		t.Fatalf("connected %v after stop", got)
	}
}

func TestStreamInputTPSAcceptance(t *testing.T) {
	t.Parallel()
	h, e := streamHarness(t, ModeAuto, func(int) reply { return reply{prelude: []string{`{"v":1,"type":"ping"}`}} })
	h.c.AddModel(model)
	cs := startConsumer(t, h)
	cs.waitLines(t, 1)
	send := func(format string, args ...any) {
		e.lines <- fmt.Sprintf(format, args...)
		cs.waitLines(t, 1)
	}
	for i := range 6 {
		id := fmt.Sprintf("req-%d", i)
		o := h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: 1000})
		send(`{"type":"stats","v":1,"request_id":"%s","model":"%s","tokens_processed":0,"tokens_generated":0}`, id, model)
		h.clk.Advance(500 * time.Millisecond) // prefill at 2000 tok/s
		o.Headers(200)
		send(`{"type":"stats","v":1,"request_id":"%s","model":"%s","tokens_processed":1000,"tokens_generated":0}`, id, model)
		o.Output([]byte(roleChunk))
		h.clk.Advance(100 * time.Millisecond)
		o.Output(contentChunk("Hello"))
		send(`{"type":"stats","v":1,"request_id":"%s","model":"%s","tokens_processed":1000,"tokens_generated":1,"finished":true}`, id, model)
		o.Finish(Complete)
	}
	s := h.stats(model)
	if !approx(s.LastMeanInputTPS, 2000, 0.01) {
		t.Fatalf("last_mean_input_tps %v, want ≈ 2000", s.LastMeanInputTPS)
	}
	if len(s.StatsSources) != 1 || s.StatsSources[0] != protocol.SourceEngineStatsStream {
		t.Fatalf("sources %v", s.StatsSources)
	}
	if h.c.FallbackActive() {
		t.Fatal("fallback active")
	}
}

func TestRunStalenessOnTheFakeClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	for i := range 5 {
		fallbackRequest(h, fmt.Sprint(i), 1000, 50*time.Millisecond, 10, 100*time.Millisecond)
	}
	before := h.stats(model)
	if before.OutputTPS == 0 || before.LastMeanInputTPS == 0 || before.MaxOutputTPS == 0 {
		t.Fatalf("nothing to go stale: %+v", before)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.c.Run(ctx) }()
	h.clk.WaitForTimers(1)
	if err := h.c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v", err)
	}
	for sec := 1; sec <= 31; sec++ {
		h.clk.Advance(time.Second)
		h.clk.WaitForTimers(1) // the sweep re-arms after it ran
		if sec == 29 {
			if got := h.stats(model).OutputTPS; got != before.OutputTPS {
				t.Fatalf("output_tps %v at %d s", got, sec)
			}
		}
	}
	after := h.stats(model)
	if after.OutputTPS != 0 || after.LastMeanInputTPS != before.LastMeanInputTPS || after.MaxOutputTPS != before.MaxOutputTPS {
		t.Fatalf("after 31 s: %+v", after)
	}
	if got := h.metric("pylon_engine_stats_stale_cleanups_total", "kind=stats,source=openai_fallback"); got != 1 {
		t.Fatalf("stale cleanups %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunStopsEverythingOnCancel(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, ModeRequired, func(int) reply { return reply{prelude: []string{`{"v":1,"type":"ping"}`}} })
	h.c.cfg.KVCachePath = "/kv"
	h.c.kvURL = h.c.cfg.UpstreamBaseURL + "/kv"
	handled := make(chan struct{}, 16)
	h.c.onLine = func() { handled <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.c.Run(ctx) }()
	select {
	case <-handled:
	case <-time.After(failAfter):
		t.Fatal("stream not consumed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(failAfter):
		t.Fatal("Run did not return after cancel")
	}
	if n := h.clk.Timers(); n != 0 {
		t.Fatalf("%d timers left armed", n)
	}
}
