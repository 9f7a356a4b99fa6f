package engineproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// hangGuard bounds every wait for something the code under test must do,
// so a bug fails the test instead of hanging it. It never proves timing.
const hangGuard = 10 * time.Second

const testModel = "test-model"

// tracker adapts the real stats collector to Tracker the way
// internal/agent/tracker.go does, and remembers every observer it began so
// tests can read their final state.
type tracker struct {
	c *stats.Collector

	mu        sync.Mutex
	published []string
	observers []*stats.Observer
}

func (t *tracker) publish(model string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.published = append(t.published, model)
}

func (t *tracker) Published(model string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.published, model)
}

func (t *tracker) Begin(info RequestInfo) Observation {
	o := t.c.Begin(stats.RequestInfo{
		ID: info.ID, Model: info.Model, Endpoint: stats.Endpoint(info.Endpoint), InputTokens: info.InputTokens,
		Priority: info.Priority, RoutingKey: info.RoutingKey,
	})
	t.mu.Lock()
	t.observers = append(t.observers, o)
	t.mu.Unlock()
	return observation{o}
}

func (t *tracker) LocalQueueMs(model string, p uint32, self Observation) (uint64, bool) {
	var o *stats.Observer
	if s, ok := self.(observation); ok {
		o = s.o
	}
	return t.c.LocalQueueMs(model, p, o)
}

// begun returns the observers begun so far.
func (t *tracker) begun() []*stats.Observer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.observers)
}

var _ Tracker = (*tracker)(nil)

type observation struct{ o *stats.Observer }

func (x observation) Headers(status int)  { x.o.Headers(status) }
func (x observation) Output(chunk []byte) { x.o.Output(chunk) }
func (x observation) Complete()           { x.o.Finish(stats.Complete) }
func (x observation) Fail()               { x.o.Finish(stats.Failed) }
func (x observation) Cancel()             { x.o.Finish(stats.Cancelled) }

// harness is a proxy behind a real httptest server, fed by a real
// collector, with a fake clock for its timeouts.
type harness struct {
	t      *testing.T
	clk    *clock.Fake
	reg    *prometheus.Registry
	coll   *stats.Collector
	tr     *tracker
	proxy  *Proxy
	srv    *httptest.Server
	client *http.Client
	// served receives one value each time a proxy handler returns (also
	// after an abort), so tests can wait for the proxy's bookkeeping.
	served chan struct{}
}

type options struct {
	proxy     func(*Config)
	stats     func(*stats.Config)
	unpublish bool
}

// newHarness starts a proxy whose engine is at upstream.
func newHarness(t *testing.T, upstream string, opts options) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(epoch), reg: prometheus.NewRegistry(), served: make(chan struct{}, 64)}
	scfg := stats.Config{Clock: h.clk, UpstreamBaseURL: upstream, StreamMode: stats.ModeOff, Registerer: h.reg}
	if opts.stats != nil {
		opts.stats(&scfg)
	}
	coll, err := stats.New(scfg)
	if err != nil {
		t.Fatalf("stats.New: %v", err)
	}
	coll.AddModel(testModel)
	h.coll = coll
	h.tr = &tracker{c: coll}
	if !opts.unpublish {
		h.tr.publish(testModel)
	}

	upTransport := &http.Transport{}
	cfg := Defaults()
	cfg.UpstreamBaseURL = upstream
	cfg.InferenceServerID = "pylon-test"
	cfg.Client = &http.Client{Transport: upTransport}
	cfg.Clock = h.clk
	cfg.Log = slog.New(slog.DiscardHandler)
	if opts.proxy != nil {
		opts.proxy(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("proxy config: %v", err)
	}
	h.proxy = New(cfg, h.tr, NewMetrics(h.reg))
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { h.served <- struct{}{} }()
		h.proxy.ServeHTTP(w, r)
	}))
	clientTransport := &http.Transport{}
	h.client = &http.Client{Transport: clientTransport}
	t.Cleanup(func() {
		clientTransport.CloseIdleConnections()
		h.srv.Close()
		upTransport.CloseIdleConnections()
	})
	return h
}

// validHeaders are the headers every inference request needs.
func validHeaders(id string) http.Header {
	hd := http.Header{}
	hd.Set(headers.RequestID, id)
	hd.Set(headers.Model, testModel)
	hd.Set(headers.InputTokens, "100")
	hd.Set("Content-Type", "application/json")
	return hd
}

const chatBody = `{"model":"test-model","messages":[{"role":"user","content":"hello there"}],"stream":true}`

// request sends one request to the proxy; the caller closes the body.
func (h *harness) request(ctx context.Context, method, path string, hd http.Header, body string) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, vs := range hd {
		req.Header[k] = vs
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// post sends a POST and reads the whole answer.
func (h *harness) post(path string, hd http.Header, body string) (*http.Response, []byte) {
	h.t.Helper()
	resp := h.request(context.Background(), http.MethodPost, path, hd, body)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading body: %v", err)
	}
	return resp, b
}

// waitServed waits until n more proxy handlers have returned.
func (h *harness) waitServed(n int) {
	h.t.Helper()
	for range n {
		select {
		case <-h.served:
		case <-time.After(hangGuard):
			h.t.Fatal("proxy handler did not return")
		}
	}
}

// metric reads a counter or gauge (or a histogram's sample count) of the
// proxy's registry; labels is "k=v,k=v" and must match exactly.
func (h *harness) metric(name, labels string) float64 {
	h.t.Helper()
	return gather(h.t, h.reg, name, labels)
}

func gather(t testing.TB, reg prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	want := map[string]string{}
	if labels != "" {
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func histogramSum(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
			return false
		}
	}
	return true
}

// problemBody decodes an RFC 7807 answer after checking its content type.
func problemBody(t *testing.T, resp *http.Response, b []byte) map[string]any {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (body %s)", ct, b)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("problem body %q: %v", b, err)
	}
	if p["type"] != "about:blank" || p["title"] != http.StatusText(resp.StatusCode) || p["status"] != float64(resp.StatusCode) {
		t.Fatalf("problem envelope = %v, want about:blank / %q / %d", p, http.StatusText(resp.StatusCode), resp.StatusCode)
	}
	return p
}

// scripted is an engine whose behaviour each test writes itself. It
// records every request it receives.
type scripted struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded
	// got receives each request as it arrives; it is buffered and a full
	// buffer drops the notification, never blocking the handler.
	got chan recorded
}

type recorded struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	Ctx    context.Context
}

func newScripted(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, rec recorded)) *scripted {
	t.Helper()
	s := &scripted{got: make(chan recorded, 64)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: b, Ctx: r.Context()}
		s.mu.Lock()
		s.reqs = append(s.reqs, rec)
		s.mu.Unlock()
		select {
		case s.got <- rec:
		default:
		}
		handle(w, r, rec)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) received() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// next waits for the next recorded request.
func (s *scripted) next(t *testing.T) recorded {
	t.Helper()
	select {
	case rec := <-s.got:
		return rec
	case <-time.After(hangGuard):
		t.Fatal("the engine received no request")
		return recorded{}
	}
}

// okJSON answers a plain JSON chat completion.
func okJSON(w http.ResponseWriter, _ *http.Request, _ recorded) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"completion_tokens":1}}`)
}

// sseStart sends an SSE response head at once.
func sseStart(w http.ResponseWriter, status int) *http.ResponseController {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return rc
}

// sseSend writes raw SSE bytes and flushes them.
func sseSend(w http.ResponseWriter, rc *http.ResponseController, raw string) {
	_, _ = io.WriteString(w, raw)
	_ = rc.Flush()
}

// eventReader reads raw SSE events (up to and including the blank line)
// from a response body in a goroutine, so a test can wait for each one
// with the hang guard.
type eventReader struct {
	events chan string
	err    chan error
}

func readEvents(body io.Reader) *eventReader {
	er := &eventReader{events: make(chan string, 256), err: make(chan error, 1)}
	go func() {
		br := bufio.NewReader(body)
		var cur bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			cur.WriteString(line)
			if err != nil {
				if cur.Len() > 0 {
					er.events <- cur.String()
				}
				er.err <- err
				return
			}
			if line == "\n" || line == "\r\n" {
				er.events <- cur.String()
				cur.Reset()
			}
		}
	}()
	return er
}

func (er *eventReader) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-er.events:
		return ev
	case err := <-er.err:
		// The reader sends every event before its error: one may still be
		// queued.
		select {
		case ev := <-er.events:
			er.err <- err
			return ev
		default:
		}
		t.Fatalf("stream ended before the next event: %v", err)
		return ""
	case <-time.After(hangGuard):
		t.Fatal("no event arrived")
		return ""
	}
}

// end waits for the end of the stream and returns its error (io.EOF for a
// clean end).
// rest returns every event until the stream ends, and how it ended.
func (er *eventReader) rest(t *testing.T) ([]string, error) {
	t.Helper()
	var got []string
	for {
		select {
		case ev := <-er.events:
			got = append(got, ev)
		case err := <-er.err:
			// The reader sends every event before its error.
			for {
				select {
				case ev := <-er.events:
					got = append(got, ev)
				default:
					return got, err
				}
			}
		case <-time.After(hangGuard):
			t.Fatal("the stream did not end")
			return got, nil
		}
	}
}

func (er *eventReader) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-er.err:
		select {
		case ev := <-er.events:
			t.Fatalf("unexpected event %q before the end", ev)
		default:
		}
		return err
	case ev := <-er.events:
		t.Fatalf("unexpected event %q before the end", ev)
	case <-time.After(hangGuard):
		t.Fatal("the stream did not end")
	}
	return nil
}

// mockEngine starts the in-process mock engine on the real clock; done
// receives a value each time one of its handlers returns.
type mockEngine struct {
	e    *mockengine.Engine
	reg  *prometheus.Registry
	srv  *httptest.Server
	done chan string
}

func newMockEngine(t *testing.T, mutate func(*mockengine.Config)) *mockEngine {
	t.Helper()
	cfg := mockengine.DefaultConfig()
	cfg.ModelName = testModel
	cfg.TTFT = 0
	cfg.TokenDelay = 0
	cfg.ColdPrefillTPS = 200000
	cfg.CachedPrefillTPS = 0
	cfg.NumTokens = 4
	cfg.TimeScale = 100
	if mutate != nil {
		mutate(&cfg)
	}
	m := &mockEngine{reg: prometheus.NewRegistry(), done: make(chan string, 64)}
	e, err := mockengine.New(cfg, clock.Real{}, m.reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("mockengine.New: %v", err)
	}
	m.e = e
	inner := e.Handler(nil)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { m.done <- r.URL.Path }()
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		e.Close()
		m.srv.Close()
	})
	return m
}

func (m *mockEngine) metric(t *testing.T, name, labels string) float64 {
	t.Helper()
	if labels != "" {
		labels += ","
	}
	return gather(t, m.reg, name, labels+"model_name="+testModel)
}

// waitDone waits until an engine handler for path has returned.
func (m *mockEngine) waitDone(t *testing.T, path string) {
	t.Helper()
	for {
		select {
		case p := <-m.done:
			if p == path {
				return
			}
		case <-time.After(hangGuard):
			t.Fatalf("the engine's %s handler did not return", path)
		}
	}
}

// closedURL is the URL of a server that no longer listens.
//
// The port is taken from 127.0.0.2 while every test server listens on
// 127.0.0.1: a freed port may be handed out again at once, and if the
// proxy's own test server got it, the proxy would forward to itself
// forever instead of failing to connect.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return u
}
