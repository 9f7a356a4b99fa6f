package engineproxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// The proxy's own work per request, without sockets: the spine benchmark
// in docs/performance.md sends a 1,047-byte /v1/completions body and the
// mock engine answers 360 bytes of JSON with Content-Length.

// benchTracker is the stats collector behind Tracker, as the agent wires
// it, minus the test tracker's record of every observer.
type benchTracker struct{ c *stats.Collector }

func (t benchTracker) Published(string) bool { return true }

func (t benchTracker) Begin(info RequestInfo) Observation {
	return observation{t.c.Begin(stats.RequestInfo{ID: info.ID, Model: info.Model, Endpoint: stats.Endpoint(info.Endpoint),
		InputTokens: info.InputTokens, Priority: info.Priority, RoutingKey: info.RoutingKey})}
}

func (t benchTracker) LocalQueueMs(model string, p uint32, self Observation) (uint64, bool) {
	return t.c.LocalQueueMs(model, p, self.(observation).o)
}

// benchEngine answers every request in process like the mock engine.
type benchEngine struct {
	header http.Header
	body   []byte
}

func (e benchEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close() // as RoundTrip must: a pooled body buffer returns on it
	return &http.Response{StatusCode: http.StatusOK, Header: e.header.Clone(), ContentLength: int64(len(e.body)),
		Body: io.NopCloser(&eofReader{b: e.body}), Request: r}, nil
}

// eofReader returns io.EOF with its last bytes, as net/http's body does
// for a Content-Length body.
type eofReader struct{ b []byte }

func (r *eofReader) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// flushCounter is a ResponseWriter that discards the body and counts
// flushes.
type flushCounter struct {
	h       http.Header
	code    int
	flushes int
}

func (w *flushCounter) Header() http.Header         { return w.h }
func (w *flushCounter) Write(p []byte) (int, error) { return len(p), nil }
func (w *flushCounter) WriteHeader(code int)        { w.code = code }
func (w *flushCounter) Flush()                      { w.flushes++ }

func benchProxy(b *testing.B) *Proxy {
	b.Helper()
	coll, err := stats.New(stats.Config{Clock: clock.NewFake(epoch), UpstreamBaseURL: "http://engine", StreamMode: stats.ModeOff,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	coll.AddModel(testModel)
	engineHeader := http.Header{"Content-Type": {"application/json"}, "Date": {"Mon, 30 Nov 2026 05:49:27 GMT"},
		"Content-Length": {"360"}, "X-Request-Id": {"cmpl-mock-0-32bf"}, "X-Kv-Cache-Hit": {"true"},
		"X-Kv-Cache-Hit-Tokens": {"240"}, "X-Kv-Cache-Reused-Input-Tokens": {"240"}, "X-Kv-Cache-Uncached-Input-Tokens": {"12"},
		"X-Kv-Cache-Evicted-Entries": {"0"}, "X-Kv-Cache-Evicted-Tokens": {"0"}}
	body := []byte(`{"choices":[{"finish_reason":"length","index":0,"logprobs":null,"text":" starts warm and prefill is short again Hello there how can I help you today the"}],"created":1796017658,"id":"r1","model":"m","object":"text_completion","usage":{"prompt_tokens":252,"completion_tokens":16,"total_tokens":268,"prompt_tokens_details":{"cached_tokens":240}}}`)
	cfg := Defaults()
	cfg.UpstreamBaseURL = "http://engine"
	cfg.InferenceServerID = "pylon"
	cfg.QueueMismatchEnabled = false // as in the spine benchmark
	cfg.Client = &http.Client{Transport: benchEngine{header: engineHeader, body: body}}
	cfg.Clock = clock.NewFake(epoch)
	cfg.Log = slog.New(slog.DiscardHandler)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	return New(cfg, benchTracker{coll}, NewMetrics(prometheus.NewRegistry()))
}

// BenchmarkServeCompletion is one non-streaming completion through the
// proxy: header checks, the stats observation, the upstream request and
// the answer copied back.
func BenchmarkServeCompletion(b *testing.B) {
	px := benchProxy(b)
	reqBody := bytes.Repeat([]byte("a"), 1047-len(`{"model":"m","max_tokens":16,"prompt":""}`))
	reqBody = append(append([]byte(`{"model":"m","max_tokens":16,"prompt":"`), reqBody...), `"}`...)
	// The head as the hub forwards it over the tunnel.
	hd := benchRequestHeader()
	hd.Set("Content-Length", strconv.Itoa(len(reqBody)))
	flushes := 0
	for i := 0; b.Loop(); i++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(reqBody))
		r.Header = hd.Clone()
		r.Header.Set(headers.RequestID, "r"+strconv.Itoa(i))
		w := &flushCounter{h: http.Header{}}
		px.ServeHTTP(w, r)
		if w.code != http.StatusOK {
			b.Fatalf("status %d, headers %v", w.code, w.h)
		}
		flushes += w.flushes
	}
	b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
}

// BenchmarkServeChatStream is one streamed chat completion through the
// proxy, as the spine and the chain send it: the answer is the mock
// engine's event stream for 16 output tokens (a role chunk, 16 content
// chunks, the finish chunk and [DONE]). event-per-read has each event
// arrive in its own read, as from an engine that paces its tokens;
// burst has them all arrive in one read, as from an engine that writes
// them back to back (the mock without token delays).
func BenchmarkServeChatStream(b *testing.B) {
	events := mockChatEvents(16)
	for _, bc := range []struct {
		name   string
		chunks [][]byte
	}{
		{"event-per-read", events},
		{"burst", [][]byte{bytes.Join(events, nil)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			px := benchProxy(b)
			px.cfg.Client = &http.Client{Transport: sseEngine{chunks: bc.chunks}}
			px.transport = px.cfg.Client.Transport
			reqBody := bytes.Repeat([]byte("a"), 1024)
			reqBody = append(append([]byte(`{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"`), reqBody...), `"}]}`...)
			hd := benchRequestHeader()
			hd.Set("Content-Length", strconv.Itoa(len(reqBody)))
			flushes := 0
			for i := 0; b.Loop(); i++ {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
				r.Header = hd.Clone()
				r.Header.Set(headers.RequestID, "r"+strconv.Itoa(i))
				w := &flushCounter{h: http.Header{}}
				px.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status %d, headers %v", w.code, w.h)
				}
				flushes += w.flushes
			}
			b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
		})
	}
}

// mockChatEvents is the event stream the mock engine writes for a chat
// completion of n tokens, one event per element.
func mockChatEvents(n int) [][]byte {
	const head = `data: {"choices":[{"delta":`
	const tail = `,"finish_reason":%s,"index":0,"logprobs":null}],"created":1796017658,"id":"chatcmpl-mock-0-32bf","model":"m","object":"chat.completion.chunk"}` + "\n\n"
	ev := func(delta, finish string) []byte { return []byte(head + delta + fmt.Sprintf(tail, finish)) }
	out := [][]byte{ev(`{"content":"","role":"assistant"}`, "null")}
	for i := range n {
		out = append(out, ev(fmt.Sprintf(`{"content":" word%d"}`, i), "null"))
	}
	return append(out, ev(`{}`, `"length"`), []byte("data: [DONE]\n\n"))
}

// sseEngine answers every request with an event stream delivered in the
// given chunks, one per read.
type sseEngine struct{ chunks [][]byte }

func (e sseEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close() // as RoundTrip must: a pooled body buffer returns on it
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}},
		ContentLength: -1, Body: io.NopCloser(&burstReader{chunks: slices.Clone(e.chunks)}), Request: r}, nil
}

// burstReader returns one chunk per read, then io.EOF.
type burstReader struct{ chunks [][]byte }

func (r *burstReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if r.chunks[0] = r.chunks[0][n:]; len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// BenchmarkCheckBody is the body check of a streamed chat request at the
// sizes benchpath sends.
func BenchmarkCheckBody(b *testing.B) {
	for _, size := range []int{1 << 10, 256 << 10} {
		pad := strings.Repeat("a", size)
		body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + pad + `"},{"role":"user","content":"hi"}],"stream":true,"max_tokens":16}`)
		b.Run(strconv.Itoa(size>>10)+"k", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if d := checkBody(EndpointChat, "/v1/chat/completions", body); d != "" {
					b.Fatal(d)
				}
			}
		})
	}
}

// BenchmarkUpstreamRequestHeaders is the header set sent to the engine.
func BenchmarkUpstreamRequestHeaders(b *testing.B) {
	px := benchProxy(b)
	hd := benchRequestHeader()
	hd.Set("Content-Length", "1047")
	for b.Loop() {
		_ = px.upstreamRequestHeaders(hd, 0)
	}
}

// benchRequestHeader is the head the hub forwards over the tunnel for the
// spine benchmark's request.
func benchRequestHeader() http.Header {
	hd := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"hey/0.0.1"}, "Accept-Encoding": {"gzip"}}
	hd.Set(headers.RequestID, "r1")
	hd.Set(headers.Model, testModel)
	hd.Set(headers.InputTokens, "260")
	return hd
}
