package engineproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

func TestRequiredHeaders(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{})
	cases := []struct {
		name   string
		edit   func(http.Header)
		detail string
	}{
		{"no request id", func(hd http.Header) { hd.Del(headers.RequestID) }, "missing required x-request-id header"},
		{"blank request id", func(hd http.Header) { hd.Set(headers.RequestID, "  \t") }, "missing required x-request-id header"},
		{"no model", func(hd http.Header) { hd.Del(headers.Model) }, "missing required x-model header"},
		{"blank model", func(hd http.Header) { hd.Set(headers.Model, " ") }, "missing required x-model header"},
		{"no input tokens", func(hd http.Header) { hd.Del(headers.InputTokens) }, "missing required x-input-tokens header"},
		{"input tokens not a number", func(hd http.Header) { hd.Set(headers.InputTokens, "many") }, "invalid x-input-tokens header"},
		{"negative input tokens", func(hd http.Header) { hd.Set(headers.InputTokens, "-1") }, "invalid x-input-tokens header"},
		{"input tokens over u64", func(hd http.Header) { hd.Set(headers.InputTokens, "18446744073709551616") }, "invalid x-input-tokens header"},
		{"blank input tokens", func(hd http.Header) { hd.Set(headers.InputTokens, "") }, "invalid x-input-tokens header"},
		{"priority not a number", func(hd http.Header) { hd.Set(headers.Priority, "high") }, "invalid x-priority header"},
		{"priority over u32", func(hd http.Header) { hd.Set(headers.Priority, "4294967296") }, "invalid x-priority header"},
		{"negative priority", func(hd http.Header) { hd.Set(headers.Priority, "-3") }, "invalid x-priority header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hd := validHeaders("req-" + tc.name)
			tc.edit(hd)
			resp, b := h.post("/v1/chat/completions", hd, chatBody)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400 (body %s)", resp.StatusCode, b)
			}
			if p := problemBody(t, resp, b); p["detail"] != tc.detail {
				t.Fatalf("detail = %q, want %q", p["detail"], tc.detail)
			}
		})
	}
	// Bad headers are refused before the generation gate, the observer and
	// the engine.
	if n := len(h.tr.begun()); n != 0 {
		t.Fatalf("%d observers begun for refused requests", n)
	}
	if n := len(up.received()); n != 0 {
		t.Fatalf("engine contacted %d times", n)
	}

	// Optional headers, present and valid, are accepted: a routing key and
	// a padded priority.
	hd := validHeaders("req-ok")
	hd.Set(headers.Priority, " 7 ")
	hd.Set(headers.RoutingKey, "fn-1")
	if resp, b := h.post("/v1/chat/completions", hd, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("valid request: status %d (%s)", resp.StatusCode, b)
	}
	if obs := h.tr.begun(); len(obs) != 1 || obs[0].Info().Priority != 7 || obs[0].Info().RoutingKey != "fn-1" {
		t.Fatalf("observer info = %+v", obs[0].Info())
	}
}

// TestAggregatedHeader: x-stargate-aggregated is a hint read as true only
// for "true" (any case, padded); anything else, or none, keeps every event
// flushed, and no value is refused.
func TestAggregatedHeader(t *testing.T) {
	for v, want := range map[string]bool{"true": true, " TRUE ": true, "True": true, "false": false, "1": false, "yes": false, "": false} {
		hd := validHeaders("r")
		if v != "" {
			hd.Set(headers.StargateAggregated, v)
		}
		info, detail := requestHeaders(hd)
		if detail != "" || info.Aggregated != want {
			t.Errorf("%s %q: aggregated %v (%q), want %v", headers.StargateAggregated, v, info.Aggregated, detail, want)
		}
	}
}

func TestUnpublishedModel(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{unpublish: true})
	for _, model := range []string{testModel, "unknown-model"} {
		hd := validHeaders("req-1")
		hd.Set(headers.Model, model)
		resp, b := h.post("/v1/chat/completions", hd, chatBody)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: status = %d, want 503 (%s)", model, resp.StatusCode, b)
		}
		p := problemBody(t, resp, b)
		if got := resp.Header.Get(headers.StargateRetryable); got != "true" {
			t.Errorf("%s: %s = %q, want true", model, headers.StargateRetryable, got)
		}
		if got := resp.Header.Get(headers.StargateRetryReason); got != headers.ReasonModelGenerationUnavailable {
			t.Errorf("%s: %s = %q", model, headers.StargateRetryReason, got)
		}
		if p["reason"] != headers.ReasonModelGenerationUnavailable {
			t.Errorf("%s: body reason = %v", model, p["reason"])
		}
	}
	if got := h.metric("pylon_retryable_responses_total", "inference_server_id=pylon-test,reason=model_generation_unavailable,status=503"); got != 2 {
		t.Errorf("retryable_responses_total = %v, want 2", got)
	}
	if n := len(h.tr.begun()); n != 0 {
		t.Errorf("%d observers begun for an unpublished model", n)
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("engine contacted %d times", n)
	}
}

func TestBodyChecks(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{})
	cases := []struct {
		name, path, body, detail string
	}{
		{"empty", "/v1/chat/completions", "", "request body must be a JSON document"},
		{"blank", "/v1/chat/completions", " \n\t", "request body must be a JSON document"},
		{"truncated json", "/v1/chat/completions", `{"model":`, "request body must be a JSON document"},
		{"not json", "/v1/embeddings", `hello`, "request body must be a JSON document"},
		{"empty other path", "/v1/completions", "", "request body must be a JSON document"},
		{"chat without stream", "/v1/chat/completions", `{"model":"m","messages":[]}`, "/v1/chat/completions requests must set stream=true"},
		{"chat stream false", "/v1/chat/completions", `{"stream":false}`, "/v1/chat/completions requests must set stream=true"},
		{"chat stream string", "/v1/chat/completions", `{"stream":"true"}`, "/v1/chat/completions requests must set stream=true"},
		{"chat stream null", "/v1/chat/completions", `{"stream":null}`, "/v1/chat/completions requests must set stream=true"},
		{"chat body an array", "/v1/chat/completions", `[1,2]`, "/v1/chat/completions requests must set stream=true"},
		{"responses without stream", "/v1/responses", `{"input":"hi"}`, "/v1/responses requests must set stream=true"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := h.post(tc.path, validHeaders("req-"+strconv.Itoa(i)), tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400 (%s)", resp.StatusCode, b)
			}
			if p := problemBody(t, resp, b); p["detail"] != tc.detail {
				t.Fatalf("detail = %q, want %q", p["detail"], tc.detail)
			}
		})
	}
	h.waitServed(len(cases))
	// The observer was begun (step 4 precedes the body) and failed.
	for _, o := range h.tr.begun() {
		if s := o.State(); s != stats.Failed {
			t.Errorf("observer %s: state %v, want failed", o.Info().ID, s)
		}
	}
	if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=failed"); got != float64(len(cases)) {
		t.Errorf("requests_total{failed} = %v, want %d", got, len(cases))
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("engine contacted %d times", n)
	}
	if st, _ := h.coll.Stats(testModel); st.NumRunningQueries != 0 {
		t.Errorf("num_running_queries = %d after refused bodies", st.NumRunningQueries)
	}

	// Bodies that pass: embeddings need no stream flag, and a streamed
	// chat is forwarded.
	for _, c := range []struct{ path, body string }{
		{"/v1/embeddings", `{"model":"m","input":"x"}`},
		{"/v1/chat/completions", `{"stream":true}`},
		{"/v1/responses", `{"stream":true,"input":"x"}`},
		{"/v1/completions", `{"prompt":"x"}`},
	} {
		if resp, b := h.post(c.path, validHeaders("ok"), c.body); resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s: status %d (%s)", c.path, c.body, resp.StatusCode, b)
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	up := newScripted(t, okJSON)
	h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) { c.MaxBodyBytes = 64 }})
	body := `{"stream":true,"pad":"` + strings.Repeat("x", 100) + `"}`
	resp, b := h.post("/v1/chat/completions", validHeaders("big"), body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413 (%s)", resp.StatusCode, b)
	}
	problemBody(t, resp, b)
	if n := len(up.received()); n != 0 {
		t.Errorf("engine contacted %d times", n)
	}
}

func TestHealth(t *testing.T) {
	t.Run("default path keeps the query, no validation, no observation", func(t *testing.T) {
		up := newScripted(t, func(w http.ResponseWriter, _ *http.Request, _ recorded) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok")
		})
		h := newHarness(t, up.srv.URL, options{})
		resp := h.request(context.Background(), http.MethodGet, "/health?probe=1&x=y", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ok" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("health = %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		rec := up.received()
		if len(rec) != 1 || rec[0].Method != http.MethodGet || rec[0].Path != "/health" || rec[0].Query != "probe=1&x=y" {
			t.Fatalf("engine received %+v, want GET /health?probe=1&x=y", rec)
		}
		if n := len(h.tr.begun()); n != 0 {
			t.Errorf("health probe began %d observers", n)
		}
		if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status=complete"); got != 0 {
			t.Errorf("health probe counted as a request")
		}
	})

	t.Run("configured path first and cached", func(t *testing.T) {
		up := newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
			if r.URL.Path == "/custom/ready" {
				_, _ = io.WriteString(w, "ready")
				return
			}
			http.NotFound(w, r)
		})
		h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) { c.HealthPaths = []string{"/custom/ready"} }})
		for i := range 2 {
			resp := h.request(context.Background(), http.MethodGet, "/health?n="+strconv.Itoa(i), nil, "")
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "ready" {
				t.Fatalf("probe %d = %d %q", i, resp.StatusCode, b)
			}
		}
		rec := up.received()
		if len(rec) != 2 || rec[0].Path != "/custom/ready" || rec[1].Path != "/custom/ready" || rec[1].Query != "n=1" {
			t.Fatalf("engine received %+v", rec)
		}
	})

	t.Run("falls back to the defaults and closes refused answers", func(t *testing.T) {
		up := newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
			if r.URL.Path == "/v1/health/ready" {
				_, _ = io.WriteString(w, "fine")
				return
			}
			http.Error(w, "nope", http.StatusNotFound)
		})
		tr := &bodyTracker{next: http.DefaultTransport}
		h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) {
			c.HealthPaths = []string{"/a", "/b"}
			c.Client = &http.Client{Transport: tr}
		}})
		resp := h.request(context.Background(), http.MethodGet, "/health", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "fine" {
			t.Fatalf("probe = %d %q", resp.StatusCode, b)
		}
		var paths []string
		for _, r := range up.received() {
			paths = append(paths, r.Path)
		}
		if strings.Join(paths, " ") != "/a /b /health /v1/health/ready" {
			t.Fatalf("probe order = %v", paths)
		}
		h.waitServed(1)
		if open := tr.open.Load(); open != 0 {
			t.Fatalf("%d upstream health bodies left open", open)
		}
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})

	t.Run("every path failing passes the last answer on", func(t *testing.T) {
		up := newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
			http.Error(w, "down "+r.URL.Path, http.StatusServiceUnavailable)
		})
		h := newHarness(t, up.srv.URL, options{})
		resp := h.request(context.Background(), http.MethodGet, "/health", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "/v1/health/ready") {
			t.Fatalf("probe = %d %q", resp.StatusCode, b)
		}
	})

	t.Run("engine unreachable", func(t *testing.T) {
		h := newHarness(t, closedURL(t), options{})
		resp := h.request(context.Background(), http.MethodGet, "/health", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status = %d (%s)", resp.StatusCode, b)
		}
		problemBody(t, resp, b)
	})

	t.Run("mock engine", func(t *testing.T) {
		m := newMockEngine(t, nil)
		h := newHarness(t, m.srv.URL, options{})
		resp := h.request(context.Background(), http.MethodGet, "/health", nil, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
			t.Fatalf("mock health = %d %q", resp.StatusCode, b)
		}
	})

	t.Run("POST /health is an inference request", func(t *testing.T) {
		up := newScripted(t, okJSON)
		h := newHarness(t, up.srv.URL, options{})
		resp, b := h.post("/health", nil, "{}")
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status = %d (%s)", resp.StatusCode, b)
		}
	})
}

// bodyTracker counts upstream response bodies not yet closed.
type bodyTracker struct {
	next http.RoundTripper
	open atomic.Int64
}

func (b *bodyTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b.open.Add(1)
	resp.Body = &trackedBody{ReadCloser: resp.Body, open: &b.open}
	return resp, nil
}

type trackedBody struct {
	io.ReadCloser
	open   *atomic.Int64
	closed atomic.Bool
}

func (t *trackedBody) Close() error {
	if t.closed.CompareAndSwap(false, true) {
		t.open.Add(-1)
	}
	return t.ReadCloser.Close()
}

func TestUpstreamRequestHeaders(t *testing.T) {
	inbound := func() http.Header {
		hd := validHeaders("req-hdr")
		hd.Set(headers.Priority, "100")
		hd.Set(headers.RoutingKey, "fn-1")
		hd.Set(headers.CacheAffinityKey, "mt:v1:x:abc")
		hd.Set(headers.OutputTokens, "12")
		hd.Set(headers.TokenEstimate, "140")
		hd.Set(headers.StargateExpectedQueueMs, "5000")
		hd.Set(headers.StargateAggregated, "true")
		hd.Set(headers.StargateUpstreamRetryable, "true")
		hd.Set(headers.StargateRetryable, "true")
		hd.Set(headers.StargateRetryReason, "spoofed")
		hd.Set(headers.StargateRetryAfterMs, "1")
		hd.Set(headers.DynamoRequestPriority, "999999")
		hd.Set(headers.DynamoRequestStrictPriority, "1")
		hd.Set(headers.TunnelMethod, "DELETE")
		hd.Set(headers.TunnelPath, "/elsewhere")
		hd.Set("X-Engine-Retry", "true")
		hd.Set("Keep-Alive", "timeout=5")
		hd.Set("Proxy-Connection", "keep-alive")
		hd.Set("Te", "trailers")
		hd.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		return hd
	}
	stripped := []string{
		headers.StargateExpectedQueueMs, headers.StargateAggregated, headers.StargateUpstreamRetryable, headers.StargateRetryable,
		headers.StargateRetryReason, headers.StargateRetryAfterMs, headers.TunnelMethod, headers.TunnelPath,
		"X-Engine-Retry", "Keep-Alive", "Proxy-Connection", "Te",
	}
	kept := []string{
		headers.RequestID, headers.Model, headers.InputTokens, headers.Priority, headers.RoutingKey,
		headers.CacheAffinityKey, headers.OutputTokens, headers.TokenEstimate, "Content-Type", "Traceparent",
	}
	cases := []struct {
		name             string
		cfg              func(*Config)
		priority         string // "" removes x-priority
		wantPrio, strict string // "" = absent
	}{
		{"dynamo", nil, "100", "3500", "0"},
		{"dynamo absent priority", nil, "", "3600", "0"},
		{"dynamo zero priority", nil, "0", "3600", "0"},
		{"dynamo priority at ceiling", nil, "3600", "0", "0"},
		{"dynamo priority over ceiling", nil, "5000", "0", "0"},
		{"dynamo custom ceiling", func(c *Config) { c.PriorityCeiling = 10 }, "3", "7", "0"},
		{"dynamo upper case", func(c *Config) { c.UpstreamBackend = "DYNAMO" }, "1", "3599", "0"},
		{"passthrough", func(c *Config) { c.UpstreamBackend = "passthrough" }, "100", "", ""},
		{"passthrough mixed case", func(c *Config) { c.UpstreamBackend = "PassThrough" }, "100", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newScripted(t, okJSON)
			h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) {
				c.UpstreamRetryHeader = "x-engine-retry"
				if tc.cfg != nil {
					tc.cfg(c)
				}
			}})
			hd := inbound()
			if tc.priority == "" {
				hd.Del(headers.Priority)
			} else {
				hd.Set(headers.Priority, tc.priority)
			}
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
			resp, b := h.post("/v1/chat/completions?api-version=2&x=1", hd, body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d (%s)", resp.StatusCode, b)
			}
			rec := up.next(t)
			if rec.Method != http.MethodPost || rec.Path != "/v1/chat/completions" || rec.Query != "api-version=2&x=1" {
				t.Fatalf("engine got %s %s?%s", rec.Method, rec.Path, rec.Query)
			}
			if string(rec.Body) != body {
				t.Fatalf("engine body = %q", rec.Body)
			}
			for _, k := range stripped {
				if v, ok := rec.Header[http.CanonicalHeaderKey(k)]; ok {
					t.Errorf("%s reached the engine: %q", k, v)
				}
			}
			for _, k := range kept {
				if tc.priority == "" && k == headers.Priority {
					continue
				}
				if got, want := rec.Header.Get(k), hd.Get(k); got != want {
					t.Errorf("%s = %q at the engine, want %q", k, got, want)
				}
			}
			checkHeader := func(name, want string) {
				vs, ok := rec.Header[http.CanonicalHeaderKey(name)]
				switch {
				case want == "" && ok:
					t.Errorf("%s = %q at the engine, want absent", name, vs)
				case want != "" && (len(vs) != 1 || vs[0] != want):
					t.Errorf("%s = %q at the engine, want %q", name, vs, want)
				}
			}
			checkHeader(headers.DynamoRequestPriority, tc.wantPrio)
			checkHeader(headers.DynamoRequestStrictPriority, tc.strict)
		})
	}
}

// TestUpstreamRequestHeadersHopByHop covers the hop-by-hop names net/http
// will not carry across a real connection (Connection, Upgrade, Host,
// Transfer-Encoding, Trailer).
func TestUpstreamRequestHeadersHopByHop(t *testing.T) {
	px := New(Config{UpstreamBackend: "dynamo", PriorityCeiling: 3600, UpstreamRetryHeader: headers.StargateUpstreamRetryable}, nil, nil)
	in := http.Header{}
	for _, k := range append(append([]string{}, headers.HopByHop...), "Host", headers.RequestID) {
		in.Set(k, "v")
	}
	out := px.upstreamRequestHeaders(in, 0)
	for _, k := range append(append([]string{}, headers.HopByHop...), "Host") {
		if _, ok := out[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("%s forwarded", k)
		}
	}
	if out.Get(headers.RequestID) != "v" {
		t.Errorf("x-request-id dropped")
	}
	// The hub's head is the handler's own, and it is stripped in place
	// rather than copied.
	if in.Get("Connection") != "" || in.Get(headers.RequestID) != "v" {
		t.Errorf("the inbound header set was not the one stripped: %v", in)
	}
}

func TestRetryMapping(t *testing.T) {
	type answer struct {
		status int
		hdr    map[string]string
	}
	cases := []struct {
		name        string
		cfg         func(*Config)
		ans         func(now time.Time) answer
		retryable   bool
		retryAfter  string // "" = absent
		nonretry    string // nonretryable_failures_total reason, "" = none
		wantOutcome string
	}{
		{
			name: "429 marked, Retry-After seconds",
			ans: func(time.Time) answer {
				return answer{429, map[string]string{"X-Stargate-Upstream-Retryable": "true", "Retry-After": "3"}}
			},
			retryable: true, retryAfter: "3000",
		},
		{
			name: "503 marked, Retry-After HTTP date",
			ans: func(now time.Time) answer {
				return answer{503, map[string]string{"X-Stargate-Upstream-Retryable": " TRUE ", "Retry-After": now.Add(2 * time.Second).Format(http.TimeFormat)}}
			},
			retryable: true, retryAfter: "2000",
		},
		{
			name: "Retry-After date in the past",
			ans: func(now time.Time) answer {
				return answer{503, map[string]string{"X-Stargate-Upstream-Retryable": "true", "Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}}
			},
			retryable: true, retryAfter: "0",
		},
		{
			name: "unparseable Retry-After",
			ans: func(time.Time) answer {
				return answer{503, map[string]string{"X-Stargate-Upstream-Retryable": "true", "Retry-After": "soon"}}
			},
			retryable: true,
		},
		{
			name: "Retry-After not propagated",
			cfg:  func(c *Config) { c.PropagateRetryAfter = false },
			ans: func(time.Time) answer {
				return answer{429, map[string]string{"X-Stargate-Upstream-Retryable": "true", "Retry-After": "3"}}
			},
			retryable: true,
		},
		{
			name:     "503 without the upstream header",
			ans:      func(time.Time) answer { return answer{503, map[string]string{"Retry-After": "3"}} },
			nonretry: "missing_upstream_retry_header",
		},
		{
			name: "429 with the header false",
			ans: func(time.Time) answer {
				return answer{429, map[string]string{"X-Stargate-Upstream-Retryable": "false"}}
			},
			nonretry: "missing_upstream_retry_header",
		},
		{
			name:      "header not required",
			cfg:       func(c *Config) { c.RequireUpstreamRetryHeader = false },
			ans:       func(time.Time) answer { return answer{503, nil} },
			retryable: true,
		},
		{
			name:     "500 is never retryable",
			ans:      func(time.Time) answer { return answer{500, map[string]string{"X-Stargate-Upstream-Retryable": "true"}} },
			nonretry: "upstream_nonretryable_status",
		},
		{
			name:     "status outside the configured set",
			cfg:      func(c *Config) { c.RetryableStatusCodes = []int{503} },
			ans:      func(time.Time) answer { return answer{429, map[string]string{"X-Stargate-Upstream-Retryable": "true"}} },
			nonretry: "upstream_nonretryable_status",
		},
		{
			name:      "custom upstream retry header",
			cfg:       func(c *Config) { c.UpstreamRetryHeader = "x-engine-retry" },
			ans:       func(time.Time) answer { return answer{429, map[string]string{"X-Engine-Retry": "true"}} },
			retryable: true,
		},
		{
			name: "engine cannot spoof the retry signal on a 200",
			ans: func(time.Time) answer {
				return answer{200, map[string]string{"X-Stargate-Retryable": "true", "X-Stargate-Retry-Reason": "x", "X-Stargate-Retry-After-Ms": "5", "X-Stargate-Upstream-Retryable": "true"}}
			},
			wantOutcome: "complete",
		},
		{
			name: "engine cannot spoof the retry signal on a non-retryable 503",
			ans: func(time.Time) answer {
				return answer{503, map[string]string{"X-Stargate-Retryable": "true", "X-Stargate-Retry-Reason": "x", "X-Stargate-Retry-After-Ms": "5"}}
			},
			nonretry: "missing_upstream_retry_header",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h *harness
			up := newScripted(t, func(w http.ResponseWriter, _ *http.Request, _ recorded) {
				a := tc.ans(h.clk.Now())
				for k, v := range a.hdr {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Keep-Alive", "timeout=5")
				w.WriteHeader(a.status)
				_, _ = io.WriteString(w, `{"error":{"message":"engine says `+strconv.Itoa(a.status)+`"}}`)
			})
			h = newHarness(t, up.srv.URL, options{proxy: tc.cfg})
			resp, b := h.post("/v1/chat/completions", validHeaders("r"), chatBody)
			want := tc.ans(h.clk.Now()).status
			if resp.StatusCode != want {
				t.Fatalf("status = %d, want %d", resp.StatusCode, want)
			}
			if !strings.Contains(string(b), "engine says") {
				t.Errorf("engine body not passed through: %q", b)
			}
			for _, k := range []string{"X-Stargate-Upstream-Retryable", "X-Engine-Retry", "Keep-Alive"} {
				if v := resp.Header.Get(k); v != "" {
					t.Errorf("%s = %q reached the hub", k, v)
				}
			}
			gotRetryable := resp.Header.Get(headers.StargateRetryable)
			gotReason := resp.Header.Get(headers.StargateRetryReason)
			gotAfter := resp.Header.Get(headers.StargateRetryAfterMs)
			if tc.retryable {
				if gotRetryable != "true" || gotReason != headers.ReasonUpstreamAdmissionRejected {
					t.Errorf("retry signal = %q/%q, want true/upstream_admission_rejected", gotRetryable, gotReason)
				}
				if got := h.metric("pylon_retryable_responses_total", "inference_server_id=pylon-test,reason=upstream_admission_rejected,status="+strconv.Itoa(want)); got != 1 {
					t.Errorf("retryable_responses_total = %v, want 1", got)
				}
			} else if gotRetryable != "" || gotReason != "" || gotAfter != "" {
				t.Errorf("unexpected retry signal %q/%q/%q", gotRetryable, gotReason, gotAfter)
			}
			if gotAfter != tc.retryAfter {
				t.Errorf("%s = %q, want %q", headers.StargateRetryAfterMs, gotAfter, tc.retryAfter)
			}
			for _, reason := range []string{"missing_upstream_retry_header", "upstream_nonretryable_status"} {
				want := 0.0
				if reason == tc.nonretry {
					want = 1
				}
				if got := h.metric("pylon_nonretryable_failures_total", "inference_server_id=pylon-test,reason="+reason); got != want {
					t.Errorf("nonretryable_failures_total{%s} = %v, want %v", reason, got, want)
				}
			}
			outcome := tc.wantOutcome
			if outcome == "" {
				outcome = "failed"
			}
			h.waitServed(1)
			if got := h.metric("pylon_requests_total", "model=test-model,routing_key=,status="+outcome); got != 1 {
				t.Errorf("requests_total{%s} = %v, want 1", outcome, got)
			}
		})
	}
}

// TestMockEngineFailuresAreNotRetryable: the mock's injected chat failure
// (503) and its queue-full 429 carry no upstream retry header, so pylon
// must not mark them: only the engine's own retry header makes a 429 or
// 503 retryable.
func TestMockEngineFailuresAreNotRetryable(t *testing.T) {
	m := newMockEngine(t, nil)
	h := newHarness(t, m.srv.URL, options{})
	req, _ := http.NewRequest(http.MethodPut, m.srv.URL+"/test-control/models/"+testModel, strings.NewReader(`{"chat_failure":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()

	resp, b := h.post("/v1/chat/completions", validHeaders("r"), chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "chat_failure") {
		t.Fatalf("status = %d (%s)", resp.StatusCode, b)
	}
	if resp.Header.Get(headers.StargateRetryable) != "" {
		t.Errorf("mock chat failure marked retryable")
	}
	if got := h.metric("pylon_nonretryable_failures_total", "inference_server_id=pylon-test,reason=missing_upstream_retry_header"); got != 1 {
		t.Errorf("nonretryable_failures_total = %v, want 1", got)
	}
}

func TestConnectFailure(t *testing.T) {
	for _, retryable := range []bool{false, true} {
		t.Run("retryable="+strconv.FormatBool(retryable), func(t *testing.T) {
			h := newHarness(t, closedURL(t), options{proxy: func(c *Config) { c.LocalConnectFailuresRetryable = retryable }})
			resp, b := h.post("/v1/chat/completions", validHeaders("r"), chatBody)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status = %d (%s)", resp.StatusCode, b)
			}
			p := problemBody(t, resp, b)
			if p["reason"] != headers.ReasonLocalConnectFailure {
				t.Errorf("body reason = %v", p["reason"])
			}
			if got := resp.Header.Get(headers.StargateRetryReason); got != headers.ReasonLocalConnectFailure {
				t.Errorf("retry reason header = %q", got)
			}
			if got := resp.Header.Get(headers.StargateRetryable); (got == "true") != retryable {
				t.Errorf("%s = %q with the flag %v", headers.StargateRetryable, got, retryable)
			}
			ok, non := 0.0, 1.0
			if retryable {
				ok, non = 1, 0
			}
			if got := h.metric("pylon_retryable_responses_total", "inference_server_id=pylon-test,reason=local_connect_failure,status=503"); got != ok {
				t.Errorf("retryable_responses_total = %v, want %v", got, ok)
			}
			if got := h.metric("pylon_nonretryable_failures_total", "inference_server_id=pylon-test,reason=local_connect_failure"); got != non {
				t.Errorf("nonretryable_failures_total = %v, want %v", got, non)
			}
			h.waitServed(1)
			if obs := h.tr.begun(); len(obs) != 1 || obs[0].State() != stats.Failed {
				t.Errorf("observer not failed")
			}
		})
	}
}

// TestSendErrorAfterConnectAborts: an engine that takes the request and
// drops the connection without answering is not a connect failure; the
// stream is aborted instead of answered, since the engine may have begun
// the work.
func TestSendErrorAfterConnectAborts(t *testing.T) {
	up := newScripted(t, func(w http.ResponseWriter, _ *http.Request, _ recorded) {
		panic(http.ErrAbortHandler) // closes the connection without a response
	})
	h := newHarness(t, up.srv.URL, options{proxy: func(c *Config) { c.LocalConnectFailuresRetryable = true }})
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header = validHeaders("r")
	resp, err := h.client.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("got an answer %d %q, want the stream aborted", resp.StatusCode, b)
	}
	h.waitServed(1)
	if got := h.metric("pylon_retryable_responses_total", "inference_server_id=pylon-test,reason=local_connect_failure,status=503"); got != 0 {
		t.Errorf("a send error after connecting was reported as a connect failure")
	}
	if obs := h.tr.begun(); len(obs) != 1 || obs[0].State() != stats.Failed {
		t.Errorf("observer not failed")
	}
}

func TestAdmissionThreshold(t *testing.T) {
	const maxU = math.MaxUint64
	cases := []struct {
		expected, delta uint64
		factor          float64
		want            uint64
	}{
		{0, 25, 1.25, 25},
		{10, 25, 1.25, 35},
		{100, 25, 1.25, 125},
		{1000, 25, 1.25, 1250},
		{101, 0, 1.25, 127}, // ceil(126.25)
		{3, 0, 1.1, 4},      // ceil(3.3000000000000003)
		{7, 0, 0.5, 7},      // a factor under 1 never lowers the bar below expected+delta
		{100, 0, 0, 100},    // bad factors count as 1.0
		{100, 0, -2, 100},
		{100, 0, math.NaN(), 100},
		{100, 0, math.Inf(1), 100},
		{100, 0, math.Inf(-1), 100},
		{10, 0, 1e13, 100_000_000_000_000}, // large but finite factors are honoured
		{maxU, 25, 1.25, maxU},             // saturating sum and product
		{maxU - 10, 25, 1, maxU},
		{1 << 62, 0, 8, maxU},
		{maxU, 0, 1, maxU},
	}
	for _, tc := range cases {
		if got := admissionThreshold(tc.expected, tc.delta, tc.factor); got != tc.want {
			t.Errorf("admissionThreshold(%d, %d, %v) = %d, want %d", tc.expected, tc.delta, tc.factor, got, tc.want)
		}
	}
}

func TestRetryAfterMs(t *testing.T) {
	now := epoch
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{" 7 ", 7000, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"4294967296", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90000, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Mon, 02 Jan 2006", 0, false},
	}
	for _, tc := range cases {
		got, ok := retryAfterMs(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfterMs(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Defaults()
	good.UpstreamBaseURL = "http://127.0.0.1:8090"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		edit func(*Config)
		flag string
	}{
		{func(c *Config) { c.UpstreamBaseURL = "" }, "--upstream-http-base-url"},
		{func(c *Config) { c.UpstreamBaseURL = "ftp://x" }, "--upstream-http-base-url"},
		{func(c *Config) { c.RetryableStatusCodes = []int{99} }, "--pylon-retryable-upstream-status-codes"},
		{func(c *Config) { c.UpstreamRetryHeader = "" }, "--pylon-upstream-retry-header"},
		{func(c *Config) { c.QueueMismatchToleranceFactor = 0 }, "--pylon-queue-mismatch-tolerance-factor"},
		{func(c *Config) { c.QueueMismatchToleranceFactor = math.Inf(1) }, "--pylon-queue-mismatch-tolerance-factor"},
		{func(c *Config) { c.QueueMismatchToleranceFactor = math.NaN() }, "--pylon-queue-mismatch-tolerance-factor"},
		{func(c *Config) { c.QueueMismatchMinDelta = -time.Millisecond }, "--pylon-queue-mismatch-min-delta-ms"},
		{func(c *Config) { c.UpstreamBackend = "vllm" }, "--pylon-upstream-backend"},
	}
	for _, tc := range cases {
		c := good
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.flag)
		}
	}
	c := good
	c.UpstreamBackend = "Passthrough"
	if err := c.Validate(); err != nil {
		t.Errorf("case-insensitive backend refused: %v", err)
	}
}

// refCheckBody is checkBody as encoding/json defines it: the body valid,
// then decoded for its stream member.
func refCheckBody(endpoint Endpoint, path string, body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return "request body must be a JSON document"
	}
	if endpoint != EndpointChat && endpoint != EndpointResponses {
		return ""
	}
	var peek struct {
		Stream *bool `json:"stream"`
	}
	if json.Unmarshal(body, &peek) != nil || peek.Stream == nil || !*peek.Stream {
		return path + " requests must set stream=true"
	}
	return ""
}

// FuzzCheckBody: checkBody answers as refCheckBody does on any body, for
// chat and for embeddings.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{}`, `{"stream":true}`, `{"stream":false}`, `{"stream":null}`, `{"stream":"true"}`,
		`{"Stream":true}`, `{"STREAM":true,"stream":false}`, `{"stream":true,"stream":null}`, `{"stream":1,"stream":true}`,
		`{"\u0073tream":true}`, `{"ſtream":true}`, `{"stream" : true , "model":"m"}`, `{"messages":[{"stream":true}]}`,
		`{"stream":true,}`, `{"stream":true} x`, `{"a":{"stream":false},"stream":true}`, "{\"\xff\":1,\"stream\":true}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []Endpoint{EndpointChat, EndpointEmbeddings} {
			if got, want := checkBody(ep, "/p", body), refCheckBody(ep, "/p", body); got != want {
				t.Fatalf("checkBody(%s, %q) = %q, want %q", ep, body, got, want)
			}
		}
	})
}
