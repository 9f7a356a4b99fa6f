package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/clock"
)

// fakeHub records every request it gets and answers like the hub in
// front of a pylon: chat and Responses only as streams.
type fakeHub struct {
	mu       sync.Mutex
	reqs     []*http.Request
	bodies   [][]byte
	cluster  string
	status   int
	srv      *httptest.Server
	gate     chan struct{} // when set, the stream waits on it after the first event
	firstOut chan struct{}
	// usageExtra is spliced into the chat usage chunk's usage object
	// (e.g. `,"queue_time":0.25`).
	usageExtra string
	// onServe, when set, runs first on every request (e.g. to advance the
	// fake clock by the time the "upstream" takes).
	onServe func()
	// session, when set, is sent as x-stargate-session-state on every
	// answer, as the hub does for a classified request.
	session string
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{cluster: "cluster-a", status: 200}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *fakeHub) last() (*http.Request, []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reqs) == 0 {
		return nil, nil
	}
	return h.reqs[len(h.reqs)-1], h.bodies[len(h.bodies)-1]
}

func (h *fakeHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reqs)
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	if h.onServe != nil {
		h.onServe()
	}
	h.reqs = append(h.reqs, r.Clone(context.Background()))
	h.bodies = append(h.bodies, b)
	status, cluster, gate, firstOut, usageExtra, sess := h.status, h.cluster, h.gate, h.firstOut, h.usageExtra, h.session
	h.mu.Unlock()
	w.Header().Set("X-Stargate-Cluster-Id", cluster)
	if sess != "" {
		w.Header().Set("X-Stargate-Session-State", sess)
	}
	w.Header().Set("X-Inference-Server-Id", "pylon-1")
	w.Header().Set("X-Inference-Server-Url", "http://10.0.0.1")
	w.Header().Set("X-Kv-Cache-Hit", "false")
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"stargate"}]}`)
		return
	}
	if status != 200 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"upstream says no","type":"server_error","code":"x"}}`)
		return
	}
	var req map[string]any
	_ = json.Unmarshal(b, &req)
	stream, _ := req["stream"].(bool)
	switch r.URL.Path {
	case "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}`)
		return
	case "/v1/completions":
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c1","object":"text_completion","model":"m","choices":[{"index":0,"text":"hi","finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}`)
			return
		}
	}
	if !stream {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"message":"stream must be true","type":"invalid_request_error"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	if r.URL.Path == "/v1/responses" {
		for _, ev := range []string{
			`{"type":"response.created","response":{"id":"r1","status":"in_progress"}}`,
			`{"type":"response.output_text.delta","delta":"hello"}`,
			`{"type":"response.completed","response":{"id":"r1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hello"}]}],"usage":{"input_tokens":7,"output_tokens":1,"total_tokens":8,"input_tokens_details":{"cached_tokens":4}}}}`,
		} {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", "x", ev)
			fl.Flush()
		}
		return
	}
	fmt.Fprintf(w, "data: %s\n\n", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`)
	fl.Flush()
	if firstOut != nil {
		close(firstOut)
	}
	if gate != nil {
		<-gate
	}
	fmt.Fprintf(w, "data: %s\n\n", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`)
	so, _ := req["stream_options"].(map[string]any)
	if so != nil && so["include_usage"] == true {
		fmt.Fprintf(w, "data: %s\n\n", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":8}`+usageExtra+`}}`)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

type harness struct {
	// handlerDone maps hHandlerDone ids to their channels; seq makes the
	// ids.
	handlerDone sync.Map
	seq         atomic.Int64
	t           *testing.T
	hub         *fakeHub
	srv         *Server
	ts          *httptest.Server
	m           *metrics.Metrics
	reg         *prometheus.Registry
	tracker     *lastcluster.Tracker
	clock       *clock.Fake
}

type opts struct {
	keys    []config.APIKey
	models  config.Models
	store   lastcluster.Store
	limiter func(m *metrics.Metrics, clk clock.Clock) *ratelimit.Limiter
	timeout time.Duration
	hub     *fakeHub
	// tp records the server's and the tracker's spans; nil is no-op.
	tp trace.TracerProvider
	// upstream, when set, replaces the fake hub: the gateway calls it
	// with its own client (HTTP/2 when it was started with EnableHTTP2
	// and StartTLS).
	upstream *httptest.Server
	// headTimeout and requestTimeout are the server's
	// HubResponseHeaderTimeout and HubRequestTimeout (0: none).
	headTimeout, requestTimeout time.Duration
	// deadline is the server's RequestDeadline (0: none).
	deadline time.Duration
	// pool, when set, is the server's hub client (several hubs); the
	// fake hub is then not called.
	pool *hubclient.Client
	// promptPrefix is the server's PromptPrefix (off unless a test
	// turns it on).
	promptPrefix bool
	// anchor is the server's ConversationAnchor.
	anchor bool
	// lateTimers gives the server a clock whose AfterFunc timers never
	// fire (timers a busy machine has not run yet); the harness's fake
	// clock still moves its Now.
	lateTimers bool
}

func newHarness(t *testing.T, o opts) *harness {
	t.Helper()
	hub := o.hub
	if hub == nil {
		hub = newFakeHub(t)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	log := slog.New(slog.DiscardHandler)
	u, _ := url.Parse(hub.srv.URL)
	if o.timeout == 0 {
		o.timeout = 50 * time.Millisecond
	}
	var tr *lastcluster.Tracker
	if o.store != nil {
		tr = lastcluster.New(lastcluster.Config{Enabled: true, TTL: time.Minute, LookupTimeout: o.timeout, WriteTimeout: time.Second, TimeoutLogEvery: 1}, o.store, m, o.tp, log, clk)
	}
	var lim *ratelimit.Limiter
	if o.limiter != nil {
		lim = o.limiter(m, clk)
	}
	if o.models == nil {
		o.models = config.Models{}
	}
	hc := hubclient.New(u, time.Second, "")
	if o.upstream != nil {
		u, _ = url.Parse(o.upstream.URL)
		hc = hubclient.NewWithTransport(u, o.upstream.Client().Transport, "")
	}
	if o.pool != nil {
		hc = o.pool
	}
	var sclk clock.Clock = clk
	if o.lateTimers {
		sclk = lateTimers{clk}
	}
	s := New(Deps{Hub: hc, Tracker: tr, Limiter: lim, Metrics: m, Log: log, Clock: sclk, Keys: o.keys,
		Models: o.models, MaxBodyBytes: 1 << 20, DefaultMaxOutputTokens: 1, TracerProvider: o.tp,
		HubResponseHeaderTimeout: o.headTimeout, HubRequestTimeout: o.requestTimeout, RequestDeadline: o.deadline,
		PromptPrefix: o.promptPrefix, ConversationAnchor: o.anchor})
	h := &harness{t: t, hub: hub, srv: s, m: m, reg: reg, tracker: tr, clock: clk}
	h.ts = httptest.NewServer(http.HandlerFunc(h.serve))
	ts := h.ts
	t.Cleanup(func() {
		ts.Close()
		hc.CloseIdle()
		tr.Wait(context.Background())
	})
	return h
}

// hHandlerDone names, on a request h.post sends, the channel h.serve
// closes when the gateway's handler has returned. A JSON answer reaches
// the client before the handler ends (it still drains the hub's body),
// and the request's metrics are recorded at that end.
const hHandlerDone = "X-Test-Handler-Done"

// serve is the gateway's handler, closing the channel named by
// hHandlerDone once it returned (panicked included); the header itself
// does not reach the gateway.
func (h *harness) serve(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get(hHandlerDone); id != "" {
		r.Header.Del(hHandlerDone)
		if ch, ok := h.handlerDone.Load(id); ok {
			defer close(ch.(chan struct{}))
		}
	}
	h.srv.ServeHTTP(w, r)
}

func (h *harness) post(path, body string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	id := strconv.FormatInt(h.seq.Add(1), 10)
	done := make(chan struct{})
	h.handlerDone.Store(id, done)
	defer h.handlerDone.Delete(id)
	req.Header.Set(hHandlerDone, id)
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// The answer is read; so that what the handler records after it
	// (metrics, the span) is there for the caller, wait for its end.
	<-done
	return resp, string(b)
}

func counter(c *prometheus.CounterVec, labels ...string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(labels...))
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// histogram returns the sample count and sum of the series of the
// histogram name whose labels include want; ok is false when none matches.
func histogram(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (count uint64, sum float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(), true
		}
	}
	return 0, 0, false
}
