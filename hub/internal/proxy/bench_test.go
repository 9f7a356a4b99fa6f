package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Per-request header and body work of attempt and copyResponse, without
// sockets, for the spine benchmark of docs/performance.md: its client
// request head and the pylon's answer to it (360 bytes of JSON with
// content-length).

func benchClientHeader() http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"hey/0.0.1"}, "Accept-Encoding": {"gzip"},
		"Content-Length": {"1047"}}
	h.Set(headers.RequestID, "r1")
	h.Set(headers.Model, "m")
	h.Set(headers.InputTokens, "260")
	return h
}

// headerSink keeps benchmarked headers on the heap, as in a request.
var headerSink http.Header

func BenchmarkForwardHeaders(b *testing.B) {
	in := benchClientHeader()
	for b.Loop() {
		headerSink = forwardHeaders(in)
	}
}

// countingWriter is a ResponseWriter that discards the body and counts
// flushes.
type countingWriter struct {
	h       http.Header
	flushes int
}

func (w *countingWriter) Header() http.Header         { return w.h }
func (w *countingWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *countingWriter) WriteHeader(int)             {}
func (w *countingWriter) Flush()                      { w.flushes++ }

// BenchmarkCopyResponse is copyResponse for a short non-streaming answer: the response
// head copied and the body written to the client.
func BenchmarkCopyResponse(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 360)
	up := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"360"}, "Date": {"Mon, 30 Nov 2026 05:49:27 GMT"},
		"X-Request-Id": {"r1"}, "X-Kv-Cache-Hit": {"true"}, "X-Kv-Cache-Hit-Tokens": {"240"},
		"X-Kv-Cache-Reused-Input-Tokens": {"240"}, "X-Kv-Cache-Uncached-Input-Tokens": {"12"},
		"X-Kv-Cache-Evicted-Entries": {"0"}, "X-Kv-Cache-Evicted-Tokens": {"0"}}
	p := &Proxy{}
	be := state.Backend{ID: "pylon", ClusterID: "pylon", URL: "http://127.0.0.1:18090"}
	flushes := 0
	for b.Loop() {
		w := &countingWriter{h: http.Header{}}
		resp := &http.Response{StatusCode: http.StatusOK, Header: up, ContentLength: int64(len(body)),
			Body: io.NopCloser(bytes.NewReader(body))}
		if err := p.copyResponse(w, resp, "pylon", be, routing.SessionUnclassified); err != nil {
			b.Fatal(err)
		}
		flushes += w.flushes
	}
	b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
}

// memoryTunnel answers every request at once with a copy of resp's head
// and body, without a socket: BenchmarkServe measures the hub's own work.
type memoryTunnel struct {
	header http.Header
	body   []byte
}

func (m memoryTunnel) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: m.header, ContentLength: int64(len(m.body)),
		Body: io.NopCloser(bytes.NewReader(m.body))}, nil
}

// BenchmarkServe is one whole request through serve: parse, read the body,
// one routing pass (power-of-n over two clusters), reserve, build the
// outbound request, round trip over an in-memory tunnel and copy the
// answer, with metrics on and the routing page's record (the hub's
// defaults).
func BenchmarkServe(b *testing.B) {
	benchServe(b, routelog.New(routelog.DefaultRecords), []byte(chatBody))
}

// BenchmarkServe256K is BenchmarkServe with a 256 KiB prompt: what reading
// and forwarding a large body adds.
func BenchmarkServe256K(b *testing.B) {
	body := []byte(`{"model":"rk/m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 256<<10) + `"}]}`)
	benchServe(b, routelog.New(routelog.DefaultRecords), body)
}

// BenchmarkServeNoRecords is BenchmarkServe with --routing-page-records 0:
// the difference is what a request pays for the routing page.
func BenchmarkServeNoRecords(b *testing.B) { benchServe(b, nil, []byte(chatBody)) }

func benchServe(b *testing.B, records *routelog.Log, reqBody []byte) {
	store := state.New(clock.Real{})
	body := bytes.Repeat([]byte("x"), 360)
	up := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"360"}}
	tun := tunnels{}
	for _, id := range []string{"a1", "a2", "b1"} {
		store.Apply(state.Backend{ID: id, ClusterID: clusterOf[id], URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
			fixtureRegistration(id), time.Millisecond, true)
		tun[id] = memoryTunnel{header: up, body: body}
	}
	picker, err := powerofn.New(powerofn.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := Defaults()
	cfg.Log = slog.New(slog.DiscardHandler)
	cfg.Metrics = NewMetrics(prometheus.NewRegistry(), "stargate_")
	cfg.Seed = 1
	// The hub without --otel-endpoint (app.proxyConfig).
	cfg.TracerProvider = noop.NewTracerProvider()
	if records != nil {
		cfg.Records = records
	}
	p := New(cfg, store, tun, PowerOfNResolver{Picker: picker})
	hdr := benchClientHeader()
	hdr.Set(headers.RoutingKey, rk)
	n := 0
	for b.Loop() {
		if n++; n%100 == 0 {
			// A registration drops its backend's reservations, which
			// would otherwise pile up and slow every snapshot.
			b.StopTimer()
			for _, id := range []string{"a1", "a2", "b1"} {
				store.Apply(state.Backend{ID: id, ClusterID: clusterOf[id], URL: "http://" + id + ".pylon:8000", RoutingKey: rk},
					fixtureRegistration(id), time.Millisecond, true)
			}
			b.StartTimer()
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
		r.Header = hdr.Clone()
		w := &countingWriter{h: http.Header{}}
		p.serve(w, r)
	}
}
