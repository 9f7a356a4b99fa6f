package calibrate

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/engineproxy"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// hangGuard bounds waits for the code under test so a bug fails instead of
// hanging; it never proves timing.
const hangGuard = 10 * time.Second

const testModel = "test-model"

// tracker adapts the real collector to calibrate.Tracker exactly as
// internal/agent/tracker.go does.
type tracker struct{ c *stats.Collector }

func (t tracker) Begin(info engineproxy.RequestInfo) engineproxy.Observation {
	return observation{t.c.Begin(stats.RequestInfo{
		ID: info.ID, Model: info.Model, Endpoint: stats.Endpoint(info.Endpoint), InputTokens: info.InputTokens,
		Priority: info.Priority, RoutingKey: info.RoutingKey,
	})}
}

func (t tracker) InputTPS(model string) (float64, bool) {
	st, ok := t.c.Stats(model)
	if !ok || !(st.LastMeanInputTPS > 0) {
		return 0, false
	}
	return st.LastMeanInputTPS, true
}

var _ Tracker = tracker{}

type observation struct{ o *stats.Observer }

func (x observation) Headers(status int)  { x.o.Headers(status) }
func (x observation) Output(chunk []byte) { x.o.Output(chunk) }
func (x observation) Complete()           { x.o.Finish(stats.Complete) }
func (x observation) Fail()               { x.o.Finish(stats.Failed) }
func (x observation) Cancel()             { x.o.Finish(stats.Cancelled) }

// rig is a ramp against one engine: the ramp's step timer runs on
// rampClk, the collector on collClk (a Fake, or the real clock against
// the mock engine).
type rig struct {
	t       *testing.T
	rampClk *clock.Fake
	coll    *stats.Collector
	cfg     Config
}

func newRig(t *testing.T, engineURL string, collClk clock.Clock) *rig {
	t.Helper()
	coll, err := stats.New(stats.Config{Clock: collClk, UpstreamBaseURL: engineURL, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("stats.New: %v", err)
	}
	coll.AddModel(testModel)
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	r := &rig{t: t, rampClk: clock.NewFake(epoch), coll: coll}
	r.cfg = Config{
		UpstreamBaseURL: engineURL, Model: testModel,
		Requests: 5, PromptUnits: 4096, MaxConcurrency: 4, StepTimeout: 30 * time.Second,
		NewID:  func() (string, bool) { return coll.NewCalibrationID(testModel) },
		Client: &http.Client{Transport: transport}, Clock: r.rampClk, Log: slog.New(slog.DiscardHandler),
	}
	return r
}

type outcome struct {
	res Result
	err error
}

// start runs the ramp in the background.
func (r *rig) start(ctx context.Context) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		res, err := Run(ctx, r.cfg, tracker{r.coll})
		done <- outcome{res, err}
	}()
	return done
}

// saturate fires the current step's timeout once blocked reports that the
// engine is holding a request of that step, then returns the ramp result.
func (r *rig) saturate(done <-chan outcome, blocked <-chan struct{}) outcome {
	r.t.Helper()
	select {
	case <-blocked:
	case o := <-done:
		r.t.Fatalf("the ramp ended before the engine blocked: %+v, %v", o.res, o.err)
	case <-time.After(hangGuard):
		r.t.Fatal("the engine never blocked a request")
	}
	r.rampClk.Advance(r.cfg.StepTimeout)
	return r.wait(done)
}

func (r *rig) wait(done <-chan outcome) outcome {
	r.t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(hangGuard):
		r.t.Fatal("the ramp did not end")
		return outcome{}
	}
}

// calRequest is what the engine saw of one calibration request.
type calRequest struct {
	Path    string
	Header  http.Header
	Body    map[string]any
	Units   int // length of the "1"s prompt, -1 when the prompt is not that
	Content string
}

func parseCalRequest(t *testing.T, r *http.Request) calRequest {
	b, _ := io.ReadAll(r.Body)
	c := calRequest{Path: r.URL.Path, Header: r.Header.Clone(), Units: -1}
	if err := json.Unmarshal(b, &c.Body); err != nil {
		t.Errorf("calibration body %q: %v", b, err)
		return c
	}
	msgs, _ := c.Body["messages"].([]any)
	if len(msgs) == 1 {
		m, _ := msgs[0].(map[string]any)
		if m["role"] == "user" {
			c.Content, _ = m["content"].(string)
			if c.Content != "" && strings.Trim(c.Content, "1") == "" {
				c.Units = len(c.Content)
			}
		}
	}
	return c
}

// completion answers a non-streamed chat completion.
func completion(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"2"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

// refuse answers a 4xx in the OpenAI error shape.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
	_, _ = w.Write(b)
}

// engine is a scripted engine: handle decides each answer; the request
// log and the blocked signal are shared with the test.
type engine struct {
	srv     *httptest.Server
	mu      sync.Mutex
	log     []calRequest
	status  []int
	blocked chan struct{}
}

// newEngine serves handle. A request's status is recorded when its
// response head is written, before the client can see it; a request held
// by block is recorded as 0.
func newEngine(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, c calRequest, n int)) *engine {
	t.Helper()
	e := &engine{blocked: make(chan struct{}, 1)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := parseCalRequest(t, r)
		e.mu.Lock()
		n := len(e.log)
		e.log = append(e.log, c)
		e.status = append(e.status, -1)
		e.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w, set: func(code int) { e.setStatus(n, code) }}
		handle(sw, r.WithContext(context.WithValue(r.Context(), indexKey{}, n)), c, n)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

type indexKey struct{}

func (e *engine) setStatus(n, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status[n] == -1 {
		e.status[n] = code
	}
}

// statusWriter records the status of the first WriteHeader or Write.
type statusWriter struct {
	http.ResponseWriter
	set func(int)
}

func (s *statusWriter) WriteHeader(code int) {
	s.set(code)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.set(http.StatusOK)
	return s.ResponseWriter.Write(b)
}

// block holds a request until the ramp cancels it, telling the test.
func (e *engine) block(r *http.Request) {
	e.setStatus(r.Context().Value(indexKey{}).(int), 0)
	select {
	case e.blocked <- struct{}{}:
	default:
	}
	<-r.Context().Done()
}

func (e *engine) requests() ([]calRequest, []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]calRequest(nil), e.log...), append([]int(nil), e.status...)
}

func requestID(c calRequest) string { return c.Header.Get(headers.RequestID) }
