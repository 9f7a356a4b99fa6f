package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/clock"
)

// benchHub answers like the hub in front of a pylon with fixed bodies and
// records nothing, so the benchmark measures the gateway, not the fake.
func benchHub(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("X-Stargate-Cluster-Id", "cluster-a")
	switch r.URL.Path {
	case "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}`)
	case "/v1/responses":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\"}}\n\n"+
			"data: {\"type\":\"response.output_text.delta\",\"delta\":\"hello\"}\n\n"+
			"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"input_tokens\":7,\"output_tokens\":1,\"total_tokens\":8}}}\n\n")
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n"+
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\n\n"+
			"data: [DONE]\n\n")
	}
}

// BenchmarkEndpoint is one whole POST through the gateway's handler, with
// rate limiting and last-cluster tracking on, against a loopback hub: the
// handler's own allocations plus the HTTP client's and the hub's (both
// constant across versions of the handler).
func BenchmarkEndpoint(b *testing.B) {
	s, tr := benchServer(b)
	chat := string(chatBody(1<<10, true, true))
	for _, c := range []struct{ name, path, body string }{
		{"chat-stream", "/v1/chat/completions", chat},
		{"chat-nonstream", "/v1/chat/completions", strings.Replace(chat, `"stream":true`, `"stream":false`, 1)},
		{"responses-nonstream", "/v1/responses", `{"model":"m","input":"hello","prompt_cache_key":"abc"}`},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":"hello"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(fmt.Sprint(rec.Code, rec.Body.String()))
				}
			}
			tr.Wait(context.Background())
		})
	}
}

// BenchmarkEndpointH2 is the same chat POST from a client speaking HTTP/2
// over TLS, as Go's HTTP client (and the OpenAI Go SDK on it) does by
// default: the server runs each request on a new goroutine, whose stack
// starts small. The figures include the client's and TLS's work on both
// sides; compare the handler's share in a CPU profile.
func BenchmarkEndpointH2(b *testing.B) {
	s, tr := benchServer(b)
	srv := httptest.NewUnstartedServer(s)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	chat := string(chatBody(1<<10, true, true))
	for _, c := range []struct{ name, body string }{
		{"chat-stream", chat},
		{"chat-nonstream", strings.Replace(chat, `"stream":true`, `"stream":false`, 1)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(c.body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
					b.Fatalf("HTTP/%d %d, body read: %v", resp.ProtoMajor, resp.StatusCode, err)
				}
			}
			tr.Wait(context.Background())
		})
	}
}

// benchServer is the gateway's handler as deployed but for its stores:
// rate limits on (at limits no run reaches) and last-cluster tracking on
// an in-process LRU, in front of a loopback fake hub (benchHub).
func benchServer(b *testing.B) (*Server, *lastcluster.Tracker) {
	b.Helper()
	hub := httptest.NewServer(http.HandlerFunc(benchHub))
	b.Cleanup(hub.Close)
	u, _ := url.Parse(hub.URL)
	hc := hubclient.New(u, time.Second, "")
	b.Cleanup(hc.CloseIdle)
	m := metrics.New(prometheus.NewRegistry())
	log := slog.New(slog.DiscardHandler)
	clk := clock.Real{}
	tr := lastcluster.New(lastcluster.Config{Enabled: true, TTL: time.Minute, LookupTimeout: time.Second, WriteTimeout: time.Second},
		lastcluster.NewLRU(1024, time.Minute), m, nil, log, clk)
	lim := ratelimit.New(ratelimit.NewLocal(clk), ratelimit.Config{FailOpen: true, StoreTimeout: time.Second}, clk, m, log)
	s := New(Deps{Hub: hc, Tracker: tr, Limiter: lim, Metrics: m, Log: log, Clock: clk,
		Models:       config.Models{"*": {RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 50}},
		MaxBodyBytes: 1 << 20, DefaultMaxOutputTokens: 1,
		// The hub timeouts at their defaults, as deployed: their timers
		// are part of every request's cost.
		HubResponseHeaderTimeout: config.DefaultHubResponseHeaderTimeout, HubRequestTimeout: config.DefaultHubRequestTimeout})
	return s, tr
}
