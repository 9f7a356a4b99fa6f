package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fixture every harness registers, all under routing key rk:
//
//   - model m: cluster ca with backends a1 and a2 (valid TPS and a priority
//     map, so the hub forwards x-stargate-expected-queue-ms: 120), and
//     cluster cb with backend b1, whose TPS is invalid so that power-of-n's
//     ttft comparator always ranks it last: ca is always the first choice
//     and cb is where "another cluster" retries land;
//   - model solo: cluster cs with backend s1, whose queue estimate is
//     undefined (queued input, no valid TPS);
//   - model idle: advertised by backend i1 but inactive (registered, no
//     active cluster).
const (
	rk        = "rk"
	model     = "m"
	tokens    = "100"
	qestA     = "120" // the queue estimate of cluster ca at priority 0
	sseChunk1 = "data: {\"n\":1}\n\n"
	sseChunk2 = "data: {\"n\":2}\n\n"
	sseDone   = "data: [DONE]\n\n"
)

var allBackends = []string{"a1", "a2", "b1", "s1", "i1"}

var clusterOf = map[string]string{"a1": "ca", "a2": "ca", "b1": "cb", "s1": "cs", "i1": "ci"}

func fixtureRegistration(id string) *protocol.Registration {
	entry := func(s protocol.ModelStats) protocol.ModelEntry {
		return protocol.ModelEntry{Status: protocol.StatusActive, Stats: &s}
	}
	models := map[string]protocol.ModelEntry{}
	switch id {
	case "a1", "a2":
		// Running at the limit: no free slot, so the priority map's
		// estimate is what the hub forwards.
		models[model] = entry(protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 8, NumRunningQueries: 8,
			QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 120, 5: 300}})
	case "b1":
		models[model] = entry(protocol.ModelStats{LastMeanInputTPS: 0, MaxEngineConcurrency: 8})
	case "s1":
		models["solo"] = entry(protocol.ModelStats{LastMeanInputTPS: 0, QueuedInputSize: 500})
	case "i1":
		models["idle"] = protocol.ModelEntry{Status: protocol.StatusInactive}
	}
	return &protocol.Registration{V: protocol.Version, InferenceServerID: id, ClusterID: clusterOf[id], Models: models}
}

// received is what a fake backend saw of one request.
type received struct {
	Method, URI string
	Header      http.Header
	Body        string
}

// backend is one fake pylon: a real HTTP server whose handler each test
// scripts.
type backend struct {
	srv     *httptest.Server
	handler atomic.Pointer[http.HandlerFunc]
	hits    atomic.Int32

	mu   sync.Mutex
	reqs []received
}

func (b *backend) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.reqs = append(b.reqs, received{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: string(body)})
	b.mu.Unlock()
	b.hits.Add(1)
	if h := b.handler.Load(); h != nil {
		(*h)(w, r)
		return
	}
	ok(w, r)
}

// handle scripts b's answer.
func (b *backend) handle(h http.HandlerFunc) { b.handler.Store(&h) }

func (b *backend) requests() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.reqs...)
}

// ok is the default backend answer: a short SSE stream.
func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, sseChunk1+sseDone)
}

// answer returns a handler replying status with the given headers (name,
// value pairs) and a JSON body naming the status.
func answer(status int, kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"upstream_status":`+itoa(status)+`}`)
	}
}

func itoa(n int) string { return headers.FormatUint(uint64(n)) }

// retryable is the pylon's retry signal with reason.
func retryable(status int, reason string) http.HandlerFunc {
	return answer(status, headers.StargateRetryable, "true", headers.StargateRetryReason, reason,
		headers.StargateRetryAfterMs, "25")
}

// rewriteRT sends every request to one server, whatever URL the proxy
// built (http://pylon/v1/...).
type rewriteRT struct {
	base   http.RoundTripper
	target *url.URL
}

func (r rewriteRT) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = r.target.Scheme, r.target.Host, ""
	return r.base.RoundTrip(out)
}

// tunnels maps a backend id to its transport.
type tunnels map[string]http.RoundTripper

func (t tunnels) RoundTripper(id string) (http.RoundTripper, bool) {
	rt, ok := t[id]
	return rt, ok
}

// harness is a proxy on a real state store, with the fixture registered,
// power-of-n routing and one fake backend per backend id.
type harness struct {
	t        *testing.T
	cfg      Config
	store    *state.Store
	reg      *prometheus.Registry
	m        *Metrics
	p        *Proxy
	srv      *httptest.Server
	client   *http.Client
	backends map[string]*backend
	tun      tunnels
	upstream *http.Transport
	// loopback is this harness's own 127.x.y.z address for its backends.
	loopback string
	inflight sync.WaitGroup
}

type option func(*Config)

// newHarness builds the harness. resolver nil means power-of-n with its
// default configuration.
func newHarness(t *testing.T, resolver lb.Resolver, opts ...option) *harness {
	t.Helper()
	n := harnesses.Add(1)
	h := &harness{t: t, backends: map[string]*backend{}, reg: prometheus.NewRegistry(),
		loopback: fmt.Sprintf("127.0.%d.%d", 1+n/250, 2+n%250)}
	h.m = NewMetrics(h.reg, "stargate_")
	cfg := Defaults()
	cfg.Clock = clock.Real{}
	cfg.Log = slog.New(slog.DiscardHandler)
	cfg.Metrics = h.m
	cfg.Seed = 1
	// A harness's store is built with its fixture registered: the startup
	// grace, meant for a hub whose pylons are still reconnecting, would
	// only make an unknown model wait.
	cfg.StartupGrace = 0
	for _, o := range opts {
		o(&cfg)
	}
	h.cfg = cfg
	h.store = state.New(cfg.Clock, state.OnActiveServers(h.m.ActiveServers))

	h.upstream = &http.Transport{}
	t.Cleanup(h.upstream.CloseIdleConnections)
	h.tun = tunnels{}
	for _, id := range allBackends {
		h.addBackend(state.Backend{ID: id, ClusterID: clusterOf[id], URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
			fixtureRegistration(id))
	}
	if resolver == nil {
		picker, err := powerofn.New(powerofn.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		resolver = PowerOfNResolver{Picker: picker}
	}
	h.p = New(cfg, h.store, h.tun, resolver)
	inner := h.p.Handler()
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.inflight.Add(1)
		defer h.inflight.Done()
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	ct := &http.Transport{}
	t.Cleanup(ct.CloseIdleConnections)
	h.client = &http.Client{Transport: ct}
	return h
}

// addBackend starts a fake backend for sb, registers it with reg and gives
// it a tunnel. Call it before the first request.
func (h *harness) addBackend(sb state.Backend, reg *protocol.Registration) *backend {
	b := &backend{}
	// Each harness's backends listen on a loopback address of their own:
	// tests close backends to make them refuse, and a freed 127.0.0.1 port
	// could be handed to a parallel test's server, which would then answer.
	ln, err := net.Listen("tcp", h.loopback+":0")
	if err != nil {
		h.t.Fatal(err)
	}
	b.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(b.serveHTTP)}}
	b.srv.Start()
	h.t.Cleanup(b.srv.Close)
	u, err := url.Parse(b.srv.URL)
	if err != nil {
		h.t.Fatal(err)
	}
	h.tun[sb.ID] = rewriteRT{base: h.upstream, target: u}
	h.backends[sb.ID] = b
	h.store.Apply(sb, reg, time.Millisecond, true)
	return b
}

// harnesses numbers harnesses so each gets its own loopback address.
var harnesses atomic.Int64

// validHeaders is a complete, valid header set for model m.
func validHeaders() http.Header {
	h := http.Header{}
	h.Set(headers.RequestID, "req-1")
	h.Set(headers.InputTokens, tokens)
	h.Set(headers.Model, model)
	h.Set(headers.RoutingKey, rk)
	h.Set("Content-Type", "application/json")
	return h
}

const chatBody = `{"model":"rk/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// do sends a POST to /v1/chat/completions with hdr and body and returns
// the response with its body read.
func (h *harness) do(hdr http.Header, body string) (*http.Response, string) {
	h.t.Helper()
	resp := h.send(context.Background(), hdr, body)
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		h.t.Fatalf("reading response body: %v", err)
	}
	h.inflight.Wait()
	return resp, string(b)
}

func (h *harness) send(ctx context.Context, hdr http.Header, body string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header = hdr
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("request: %v", err)
	}
	return resp
}

// readAll reads and closes resp's body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response body: %v", err)
	}
	return string(b)
}

// pending is the number of reservations the store still holds.
func (h *harness) pending() int { return h.store.Debug().(state.DebugState).PendingReservations }

// pendingOn lists the backends holding a pending reservation.
func (h *harness) pendingOn() []string {
	var out []string
	for _, tg := range h.store.Debug().(state.DebugState).Targets {
		for _, c := range tg.Clusters {
			for _, r := range c.Reservations {
				out = append(out, r.BackendID)
			}
		}
	}
	return out
}

func (h *harness) hits() map[string]int {
	out := map[string]int{}
	for id, b := range h.backends {
		if n := int(b.hits.Load()); n > 0 {
			out[id] = n
		}
	}
	return out
}

// series are the expected values of a labelled metric: label values,
// joined by "|", to value.
type series map[string]float64

// wantSeries checks that vec holds exactly the series of want, by value.
func wantSeries(t *testing.T, name string, vec *prometheus.CounterVec, want series) {
	t.Helper()
	if n := testutil.CollectAndCount(vec); n != len(want) {
		t.Errorf("%s: %d series, want %d (%v)", name, n, len(want), want)
	}
	for labels, v := range want {
		if got := testutil.ToFloat64(vec.WithLabelValues(strings.Split(labels, "|")...)); got != v {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, v)
		}
	}
}

// openAIError decodes an OpenAI error body, failing the test when the body
// is not one.
func openAIError(t *testing.T, resp *http.Response, body string) *openai.Error {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var env struct {
		Error *openai.Error `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error == nil || env.Error.Message == "" || env.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI error (%v)", body, err)
	}
	return env.Error
}

// readEvent reads one SSE event (up to its blank line) from r within a
// generous bound, so a proxy that buffers fails the test instead of
// hanging it.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var sb strings.Builder
		for {
			line, err := r.ReadString('\n')
			sb.WriteString(line)
			if err != nil || line == "\n" {
				ch <- result{sb.String(), err}
				return
			}
		}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("reading event: %q, %v", res.s, res.err)
		}
		return res.s
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s: the proxy is holding the stream back")
		return ""
	}
}

// wait receives from ch within a generous bound.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
