package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/pkg/clock"
)

// TestRequestBudget: the budget is the smaller of the client's
// X-Stainless-Timeout and --request-deadline. The client's value counts
// when it is a plain non-negative decimal of seconds up to a day, for any
// SDK on a non-streaming request and only for the Go SDK on a stream;
// anything else is no client timeout, never an error.
func TestRequestBudget(t *testing.T) {
	for _, tc := range []struct {
		name       string
		timeout    string // X-Stainless-Timeout; "" sends none
		lang       string // X-Stainless-Lang; "" sends none
		stream     bool
		configured time.Duration
		want       time.Duration
	}{
		{"none", "", "", false, 0, 0},
		{"configured only", "", "", false, 5 * time.Second, 5 * time.Second},
		{"zero means none", "0", "go", false, 0, 0},
		{"zero leaves the configured one", "0", "go", false, 5 * time.Second, 5 * time.Second},
		{"whole seconds", "2", "go", false, 0, 2 * time.Second},
		{"decimal seconds", "2.5", "python", false, 0, 2500 * time.Millisecond},
		{"decimal whole seconds", "600.0", "ruby", false, 0, 10 * time.Minute},
		{"surrounding space", " 2 ", "", false, 0, 2 * time.Second},
		{"a day", "86400", "go", false, 0, 24 * time.Hour},
		{"above a day is ignored", "86401", "go", false, 0, 0},
		{"far above is ignored", "99999999999999999999", "go", false, 0, 0},
		{"too long is ignored", strings.Repeat("1", 40), "go", false, 0, 0},
		{"negative", "-1", "go", false, 0, 0},
		{"plus sign", "+2", "go", false, 0, 0},
		{"exponent", "1e3", "go", false, 0, 0},
		{"infinity", "inf", "go", false, 0, 0},
		{"nan", "NaN", "go", false, 0, 0},
		{"hex", "0x10", "go", false, 0, 0},
		{"a unit", "2s", "go", false, 0, 0},
		{"trailing dot", "2.", "go", false, 0, 0},
		{"leading dot", ".5", "go", false, 0, 0},
		{"two dots", "1.2.3", "go", false, 0, 0},
		{"junk keeps the configured one", "soon", "go", false, 3 * time.Second, 3 * time.Second},
		{"the client's is shorter", "2", "go", false, 90 * time.Second, 2 * time.Second},
		{"the configured one is shorter", "2", "go", false, time.Second, time.Second},
		{"go stream", "2", "go", true, 0, 2 * time.Second},
		{"go stream, any case", "2", "Go", true, 0, 2 * time.Second},
		{"node stream: its timeout ends at the head", "600", "js", true, 0, 0},
		{"python stream: its timeout is per read", "600.0", "python", true, 0, 0},
		{"unknown stream", "2", "", true, 0, 0},
		{"node stream keeps the configured one", "600", "js", true, 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.timeout != "" {
				h.Set("X-Stainless-Timeout", tc.timeout)
			}
			if tc.lang != "" {
				h.Set("X-Stainless-Lang", tc.lang)
			}
			if got := requestBudget(h, tc.stream, tc.configured); got != tc.want {
				t.Fatalf("requestBudget(%q, %q, stream %t, %v) = %v; want %v", tc.timeout, tc.lang, tc.stream, tc.configured, got, tc.want)
			}
		})
	}
}

const (
	deadlineChat   = `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	deadlineStream = `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
)

// TestDeadlineSentToHub: a request with a budget tells the hub what is
// left of it (x-stargate-deadline-ms), caps the model's x-max-wait-ms by
// it and sets the retry budget x-stargate-max-wait-ms; a request without
// one sends none of them, and a client's own copy never reaches the hub.
func TestDeadlineSentToHub(t *testing.T) {
	h := newHarness(t, opts{models: config.Models{"m": {MaxWaitMs: 10_000}, "short": {MaxWaitMs: 500}}})
	for _, tc := range []struct {
		name, body                     string
		hdr                            map[string]string
		deadline, maxWait, retryBudget string // "" = absent
	}{
		{"client timeout", deadlineChat, map[string]string{"X-Stainless-Timeout": "2"}, "2000", "2000", "2000"},
		{"shorter wait kept", `{"model":"short","messages":[{"role":"user","content":"x"}]}`,
			map[string]string{"X-Stainless-Timeout": "2"}, "2000", "500", "2000"},
		{"no timeout", deadlineChat, nil, "", "10000", ""},
		{"spoofed deadline", deadlineChat, map[string]string{"X-Stargate-Deadline-Ms": "1", "X-Stargate-Max-Wait-Ms": "1"}, "", "10000", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.post("/v1/chat/completions", tc.body, tc.hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			req, _ := h.hub.last()
			for name, want := range map[string]string{"X-Stargate-Deadline-Ms": tc.deadline, "X-Max-Wait-Ms": tc.maxWait,
				"X-Stargate-Max-Wait-Ms": tc.retryBudget} {
				got, ok := req.Header[name]
				switch {
				case want == "" && ok:
					t.Errorf("%s sent as %q; want none", name, got)
				case want != "" && (len(got) != 1 || got[0] != want):
					t.Errorf("%s = %q; want %q", name, got, want)
				}
			}
		})
	}
}

// TestSendDeadlineSubtractsElapsed: what the hub is told is the budget
// minus the time the gateway already spent, in whole milliseconds rounded
// up; with nothing left the client gets its 504 and the hub is not
// called.
func TestSendDeadlineSubtractsElapsed(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	start := clk.Now()
	newX := func() (*exchange, *statusRecorder) {
		w := &statusRecorder{h: http.Header{}}
		return &exchange{s: &Server{d: Deps{Clock: clk, Log: slog.New(slog.DiscardHandler)}}, w: w, st: &reqState{requestID: "r"},
			start: start, deadline: start.Add(2 * time.Second), p: &Prepared{}}, w
	}
	clk.Advance(700*time.Millisecond + 900*time.Microsecond)
	x, _ := newX()
	x.p.Out.MaxWaitMs = 60_000
	if !x.sendDeadline() {
		t.Fatal("sendDeadline refused a request with 1.3 s left")
	}
	if o := x.p.Out; o.DeadlineMs != 1300 || o.RetryBudgetMs != 1300 || o.MaxWaitMs != 1300 {
		t.Fatalf("deadline %d, retry budget %d, max wait %d ms; want 1300 each", o.DeadlineMs, o.RetryBudgetMs, o.MaxWaitMs)
	}
	clk.Set(start.Add(2*time.Second - time.Microsecond))
	x, _ = newX()
	if !x.sendDeadline() || x.p.Out.DeadlineMs != 1 {
		t.Fatalf("1 µs left: sent %d ms; want 1", x.p.Out.DeadlineMs)
	}
	clk.Set(start.Add(2 * time.Second))
	x, w := newX()
	if x.sendDeadline() {
		t.Fatal("sendDeadline let a request with nothing left call the hub")
	}
	if w.status != http.StatusGatewayTimeout || !strings.Contains(w.body.String(), `"code":"deadline_exceeded"`) {
		t.Fatalf("%d %s; want 504 deadline_exceeded", w.status, w.body.String())
	}
}

// statusRecorder is the smallest ResponseWriter: status and body.
type statusRecorder struct {
	h      http.Header
	status int
	body   strings.Builder
}

func (r *statusRecorder) Header() http.Header { return r.h }
func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// TestDeadlineEndsHubWait: a hub that holds a request costs a client
// exactly its budget on the injected clock (the client's timeout, or the
// configured one for a client that sends none), then a 504
// deadline_exceeded in the OpenAI shape, and the gateway cancels its hub
// request. The hub timeouts, far longer, play no part.
func TestDeadlineEndsHubWait(t *testing.T) {
	hub := newHungHub(t)
	h := newHarness(t, opts{upstream: hub.srv, headTimeout: 5 * time.Minute, requestTimeout: 15 * time.Minute, deadline: 30 * time.Second})
	t.Cleanup(hub.release)
	for _, tc := range []struct {
		name, body, timeout string
		budget              time.Duration
	}{
		{"client timeout", deadlineChat, "2", 2 * time.Second},
		{"configured deadline, stream", deadlineStream, "", 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan result, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions", strings.NewReader(tc.body))
				if tc.timeout != "" {
					req.Header.Set("X-Stainless-Timeout", tc.timeout)
					req.Header.Set("X-Stainless-Lang", "go")
				}
				resp, err := h.ts.Client().Do(req)
				if err != nil {
					ch <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				ch <- result{status: resp.StatusCode, body: string(b), err: err}
			}()
			<-hub.got
			armed := h.clock.Timers()
			h.clock.Advance(tc.budget - time.Millisecond)
			if h.clock.Timers() != armed {
				t.Fatal("a timer fired before the deadline")
			}
			h.clock.Advance(time.Millisecond)
			r := await(t, ch)
			if r.status != http.StatusGatewayTimeout || !strings.Contains(r.body, `"type":"server_error"`) ||
				!strings.Contains(r.body, `"code":"deadline_exceeded"`) {
				t.Fatalf("%d %s; want 504 server_error deadline_exceeded", r.status, r.body)
			}
			<-hub.done // the gateway cancelled its hub request
			h.waitTimers(0)
		})
	}
}

// TestDeadlineCutsStartedStream: a Go SDK client's timeout covers its
// whole stream, so when it passes mid-stream the client's stream ends as a
// cut stream does: an error event (code deadline_exceeded), no [DONE], and
// the response aborted. A Node client's timeout ends at the head, so the
// same stream from it runs to its end however long it takes.
func TestDeadlineCutsStartedStream(t *testing.T) {
	for _, tc := range []struct {
		lang string
		cut  bool
	}{{"go", true}, {"js", false}} {
		t.Run(tc.lang, func(t *testing.T) {
			hub := newFakeHub(t)
			hub.gate, hub.firstOut = make(chan struct{}), make(chan struct{})
			h := newHarness(t, opts{hub: hub, headTimeout: time.Minute})
			gate := hub.gate
			t.Cleanup(func() { closeOnce(gate) })
			req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions", strings.NewReader(deadlineStream))
			req.Header.Set("X-Stainless-Timeout", "2")
			req.Header.Set("X-Stainless-Lang", tc.lang)
			resp, err := h.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"Hel"`) {
				t.Fatalf("first line %q, %v", line, err)
			}
			h.clock.Advance(time.Hour)
			if !tc.cut {
				closeOnce(gate)
			}
			rest, err := io.ReadAll(br)
			switch {
			case tc.cut && (err == nil || !strings.Contains(string(rest), `"code":"deadline_exceeded"`) || strings.Contains(string(rest), "[DONE]")):
				t.Fatalf("rest %q, read error %v; want a deadline_exceeded error event, no [DONE], an aborted body", rest, err)
			case !tc.cut && (err != nil || !strings.Contains(string(rest), "[DONE]") || strings.Contains(string(rest), "error")):
				t.Fatalf("rest %q, read error %v; want the stream whole", rest, err)
			}
		})
	}
}

// closeOnce closes ch unless it is closed already.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// TestDeadlineAlreadyPassed: a budget spent before the hub could be
// called (here by a last-cluster lookup that takes longer than the whole
// budget) is a 504 deadline_exceeded at once, and the hub never sees the
// request.
func TestDeadlineAlreadyPassed(t *testing.T) {
	store := &slowStore{by: 2 * time.Second}
	h := newHarness(t, opts{deadline: time.Second, store: store})
	store.clk.Store(h.clock)
	resp, body := h.post("/v1/chat/completions", `{"model":"m","prompt_cache_key":"s1","messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, `"code":"deadline_exceeded"`) {
		t.Fatalf("%d %s; want 504 deadline_exceeded", resp.StatusCode, body)
	}
	if n := h.hub.count(); n != 0 {
		t.Fatalf("the hub got %d requests; want none", n)
	}
}

// slowStore is a last-cluster store whose every lookup takes by on the
// harness's fake clock and finds nothing.
type slowStore struct {
	clk atomic.Pointer[clock.Fake]
	by  time.Duration
}

func (s *slowStore) Get(context.Context, string) (string, bool, error) {
	s.clk.Load().Advance(s.by)
	return "", false, nil
}

func (s *slowStore) Set(context.Context, string, string, time.Duration) error { return nil }

// lateTimers is a fake clock whose AfterFunc timers never fire.
type lateTimers struct{ *clock.Fake }

func (lateTimers) AfterFunc(time.Duration, func()) clock.Timer { return idleTimer{} }

// idleTimer is a timer that never fires.
type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return nil }
func (idleTimer) Stop() bool               { return true }
func (idleTimer) Reset(time.Duration) bool { return true }

// TestDeadlinePassedBeforeTheTimer: a stream the hub cuts once the
// request's deadline has passed on the gateway's clock (the hub's own
// deadline, which falls just after the gateway's, fired first because
// the gateway's timer is late) is the deadline's cut: its error event
// says deadline_exceeded, not upstream_stream_interrupted.
func TestDeadlinePassedBeforeTheTimer(t *testing.T) {
	var clk atomic.Pointer[clock.Fake]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n")
		_ = http.NewResponseController(w).Flush()
		clk.Load().Advance(3 * time.Second) // past the 2 s deadline
		panic(http.ErrAbortHandler)         // the hub's deadline cut the stream
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, opts{upstream: up, lateTimers: true})
	clk.Store(h.clock)
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions", strings.NewReader(deadlineStream))
	req.Header.Set("X-Stainless-Timeout", "2")
	req.Header.Set("X-Stainless-Lang", "go")
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil || !strings.Contains(string(b), `"code":"deadline_exceeded"`) {
		t.Fatalf("body %q, read error %v; want a deadline_exceeded error event and an aborted body", b, err)
	}
}
