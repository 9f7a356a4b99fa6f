package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace collector: it decodes every POST
// /v1/traces and keeps (service.name, span name, trace id) of each span.
type collector struct {
	mu    sync.Mutex
	posts int
	spans []collectedSpan
}

type collectedSpan struct {
	service, name, traceID string
	// attrs are the span's attributes, values as strings.
	attrs map[string]string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.posts++
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range sp.GetAttributes() {
					v := kv.GetValue()
					if _, ok := v.GetValue().(*commonv1.AnyValue_IntValue); ok {
						attrs[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
					} else {
						attrs[kv.GetKey()] = v.GetStringValue()
					}
				}
				c.spans = append(c.spans, collectedSpan{service, sp.GetName(), hex.EncodeToString(sp.GetTraceId()), attrs})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

var listenRe = regexp.MustCompile(`msg=listening listener=api addr=(\S+)`)

// TestTracesExported: with --otel-endpoint the gateway's server span of a
// request reaches the collector as an OTLP/HTTP POST /v1/traces, under
// service.name stargate-gateway and in the client's trace (the same trace
// id the hub sees in traceparent), with the attributes docs/gateway.md#tracing
// lists, flushed on shutdown after the drain (before the batcher's own 2 s
// tick). Without a routing key the span has no stargate.routing_key.
// The global tracer provider and propagator are restored afterwards.
func TestTracesExported(t *testing.T) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	col := &collector{}
	colSrv := httptest.NewServer(col)
	defer colSrv.Close()
	var hubTrace sync.Map
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hubTrace.Store("traceparent", r.Header.Get("traceparent"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`)
	}))
	defer hub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--insecure-no-auth",
			"--drain-timeout", "1s", "--hub-url", hub.URL, "--otel-sample-ratio", "1"},
			func(k string) string {
				if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
					return colSrv.URL
				}
				return ""
			}, &bytes.Buffer{}, &errb)
	}()
	addr := errb.waitFor(t, listenRe, done)[1]
	errb.waitFor(t, readyRe, done)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/embeddings", strings.NewReader(`{"model":"m","input":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	req.Header.Set("X-Request-Id", "req-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()

	// The batcher holds spans up to 2 s; the shutdown flush must send them.
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.posts == 0 {
		t.Fatalf("the collector received no POST /v1/traces; log: %s", errb.String())
	}
	wantAttrs := map[string]string{"http.request.method": "POST", "url.path": "/v1/embeddings", "http.request_id": "req-1",
		"gateway.routing_key": "", "http.response.status_code": "200"}
	found := false
	for _, s := range col.spans {
		if s.service != "stargate-gateway" || s.name != "POST /v1/embeddings" || s.traceID != traceID {
			continue
		}
		found = true
		for k, v := range wantAttrs {
			if got, ok := s.attrs[k]; !ok || got != v {
				t.Errorf("span attribute %s = %q (%v), want %q", k, got, ok, v)
			}
		}
		if got, ok := s.attrs["stargate.routing_key"]; ok {
			t.Errorf("span attribute stargate.routing_key = %q without a routing key", got)
		}
	}
	if !found {
		t.Fatalf("spans %+v: no server span POST /v1/embeddings of service stargate-gateway in trace %s", col.spans, traceID)
	}
	if tp, _ := hubTrace.Load("traceparent"); !strings.Contains(tp.(string), traceID) {
		t.Fatalf("hub traceparent %q", tp)
	}
}
