package proxy

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Per-request header and body work of attempt and relay, without sockets,
// for the spine benchmark of docs/performance.md: its client request head
// and the pylon's answer to it (360 bytes of JSON with content-length).

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

// BenchmarkRelay is relay for a short non-streaming answer: the response
// head copied and the body written to the client.
func BenchmarkRelay(b *testing.B) {
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
		if err := p.relay(w, resp, "pylon", be); err != nil {
			b.Fatal(err)
		}
		flushes += w.flushes
	}
	b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
}
