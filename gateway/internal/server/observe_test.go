package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/clock"
)

// apiCalls are one valid request per API route.
var apiCalls = []struct{ method, path, body string }{
	{http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
	{http.MethodPost, "/v1/responses", `{"model":"m","input":"x"}`},
	{http.MethodPost, "/v1/completions", `{"model":"m","prompt":"x"}`},
	{http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`},
	{http.MethodGet, "/v1/models", ""},
}

func (h *harness) do(method, path, body string, hdr http.Header) (*http.Response, string) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestClientPriorityRejected: a client-supplied x-priority, in any letter
// case and even empty, gets 400 in the OpenAI error shape on every API
// route and never reaches the hub (docs/design/headers.md#client-facing-headers);
// auth still runs first, so a request without a key gets 401.
func TestClientPriorityRejected(t *testing.T) {
	h := newHarness(t, opts{keys: []config.APIKey{{Key: "k1", Principal: "p"}}})
	auth := []string{"Bearer k1"}
	for _, c := range apiCalls {
		for _, pri := range []http.Header{
			{"X-Priority": {"0"}},
			{"X-Priority": {""}},
			{"x-PRIORITY": {"7"}}, // sent on the wire as written; the server canonicalises it
		} {
			hdr := http.Header{"Authorization": auth}
			for k, v := range pri {
				hdr[k] = v
			}
			resp, b := h.do(c.method, c.path, c.body, hdr)
			var got struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    string  `json:"code"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(b), &got); err != nil {
				t.Fatalf("%s %v: body %q: %v", c.path, pri, b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" ||
				got.Error.Message != "X-Priority is a reserved header and cannot be set by the client" ||
				got.Error.Type != "invalid_request_error" || got.Error.Code != "reserved_header" {
				t.Errorf("%s %v: %d %s", c.path, pri, resp.StatusCode, b)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Errorf("%s: no x-request-id on the 400", c.path)
			}
		}
		// Auth before the priority check: no key is 401, not 400.
		if resp, b := h.do(c.method, c.path, c.body, http.Header{"X-Priority": {"1"}}); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a key: %d %s", c.path, resp.StatusCode, b)
		}
		// Without the header the same request is served.
		if resp, b := h.do(c.method, c.path, c.body, http.Header{"Authorization": auth}); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, b)
		}
		if got := counter(h.m.HTTPRequests, c.method, c.path, "400", "none"); got != 3 {
			t.Errorf("%s: http_requests_total{status=400} = %v, want 3", c.path, got)
		}
	}
	// Only the five header-free requests reached the hub.
	if n := h.hub.count(); n != len(apiCalls) {
		t.Fatalf("hub saw %d requests, want %d", n, len(apiCalls))
	}
}

// TestAuthMetrics: every key check is counted and timed by result.
func TestAuthMetrics(t *testing.T) {
	h := newHarness(t, opts{keys: []config.APIKey{{Key: "k1", Principal: "p"}}})
	const body = `{"model":"m","input":"x"}`
	h.post("/v1/embeddings", body, map[string]string{"Authorization": "Bearer k1"})
	h.post("/v1/embeddings", body, map[string]string{"Authorization": "Bearer k1"})
	h.post("/v1/embeddings", body, map[string]string{"Authorization": "Bearer nope"})
	h.post("/v1/embeddings", body, nil)
	h.post("/v1/embeddings", body, map[string]string{"Authorization": "Basic k1"})
	for result, want := range map[string]uint64{"ok": 2, "invalid": 1, "missing": 2} {
		if got := counter(h.m.AuthRequests, result); got != float64(want) {
			t.Errorf("auth_requests_total{result=%s} = %v, want %d", result, got, want)
		}
		// The fake clock does not move during the check: every sample is 0.
		n, sum, ok := histogram(t, h.reg, "llm_api_gateway_auth_request_duration_seconds", map[string]string{"result": result})
		if !ok || n != want || sum != 0 {
			t.Errorf("auth_request_duration_seconds{result=%s}: count %d sum %v (%v), want %d 0", result, n, sum, ok, want)
		}
	}
}

// TestAuthDurationPreInitialised: the auth series exist at 0 before any
// request.
func TestAuthDurationPreInitialised(t *testing.T) {
	h := newHarness(t, opts{})
	for _, r := range metrics.AuthResults {
		if n, _, ok := histogram(t, h.reg, "llm_api_gateway_auth_request_duration_seconds", map[string]string{"result": r}); !ok || n != 0 {
			t.Errorf("result=%s: %d %v", r, n, ok)
		}
		if got := counter(h.m.AuthRequests, r); got != 0 {
			t.Errorf("auth_requests_total{result=%s} = %v", r, got)
		}
	}
}

// TestProviderTimePhases: queue, prompt and completion come from the
// backend's usage (queue_time, prompt_time, completion_time), total is the
// gateway's wall time of the exchange (3 s on the fake clock); the usage's
// own total_time is not used. A backend without these fields gives only
// total.
func TestProviderTimePhases(t *testing.T) {
	h := newHarness(t, opts{})
	h.hub.usageExtra = `,"queue_time":0.25,"prompt_time":0.5,"completion_time":1.5,"total_time":2.25`
	h.hub.onServe = func() { h.clock.Advance(3 * time.Second) }
	// Non-streaming (aggregated) and streaming with usage.
	if resp, b := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp, b := h.post("/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, stream := range []string{"false", "true"} {
		for phase, want := range map[string]float64{"queue": 0.25, "prompt": 0.5, "completion": 1.5, "total": 3} {
			n, sum, ok := histogram(t, h.reg, "llm_api_gateway_provider_time_seconds",
				map[string]string{"endpoint": "chat_completions", "phase": phase, "stream": stream, "function_id": "none"})
			if !ok || n != 1 || sum != want {
				t.Errorf("stream=%s phase=%s: count %d sum %v (%v), want 1 %v", stream, phase, n, sum, ok, want)
			}
		}
	}
	// Embeddings usage has no phase times: only total.
	h.post("/v1/embeddings", `{"model":"m","input":"x"}`, nil)
	for phase, want := range map[string]uint64{"queue": 0, "prompt": 0, "completion": 0, "total": 1} {
		n, _, _ := histogram(t, h.reg, "llm_api_gateway_provider_time_seconds", map[string]string{"endpoint": "embeddings", "phase": phase})
		if n != want {
			t.Errorf("embeddings phase=%s: count %d, want %d", phase, n, want)
		}
	}
}

// TestActiveRequestsByRoutingKey: an in-flight request is counted under its
// routing key once the body named it, and under "none" before; both series
// are back at 0 when it ends.
func TestActiveRequestsByRoutingKey(t *testing.T) {
	h := newHarness(t, opts{})
	h.srv.d.RoutingKeyPrefix = true
	h.hub.gate, h.hub.firstOut = make(chan struct{}), make(chan struct{})
	done := make(chan string)
	go func() {
		_, b := h.post("/v1/chat/completions", `{"model":"fn/m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
		done <- b
	}()
	<-h.hub.firstOut
	active := func(fn string) float64 {
		return testutil.ToFloat64(h.m.HTTPActive.WithLabelValues(http.MethodPost, "/v1/chat/completions", fn))
	}
	if fn, none := active("fn"), active("none"); fn != 1 || none != 0 {
		t.Errorf("in flight: fn=%v none=%v, want 1 0", fn, none)
	}
	close(h.hub.gate)
	if b := <-done; !strings.Contains(b, "[DONE]") {
		t.Fatalf("stream %q", b)
	}
	if fn, none := active("fn"), active("none"); fn != 0 || none != 0 {
		t.Errorf("after: fn=%v none=%v", fn, none)
	}
	if got := counter(h.m.HTTPRequests, http.MethodPost, "/v1/chat/completions", "200", "fn"); got != 1 {
		t.Errorf("http_requests_total{function_id=fn} = %v", got)
	}
}

// TestRateLimitHeaders: the rate-limit headers
// (docs/design/sessions.md#rate-limits) by value, on admitted and refused
// requests. The fake clock starts 20 s into a minute window; after
// 0.5 s more the window ends in 39.5 s: x-ratelimit-reset-* is "39.5s" and
// Retry-After rounds up to 40.
func TestRateLimitHeaders(t *testing.T) {
	h := newHarness(t, opts{
		models: config.Models{"m": {RequestsPerMinute: 3, TokensPerMinute: 100}, "t": {TokensPerMinute: 50}},
		limiter: func(m *metrics.Metrics, clk clock.Clock) *ratelimit.Limiter {
			return ratelimit.New(ratelimit.NewLocal(clk), ratelimit.Config{FailOpen: true, StoreTimeout: time.Second}, clk, m, nil)
		},
	})
	h.clock.Advance(500 * time.Millisecond)
	// "hello" estimates 3+2+floor(5/4) = 6 input tokens; the reservation is
	// that plus max_tokens, settled later to the fake hub's usage total, 12.
	body := func(model string, maxTokens int) string {
		return `{"model":"` + model + `","stream":true,"max_tokens":` + itoa(maxTokens) + `,"messages":[{"role":"user","content":"hello"}]}`
	}
	check := func(name string, resp *http.Response, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got, present := resp.Header[http.CanonicalHeaderKey(k)]; v == "" && present || v != "" && (len(got) != 1 || got[0] != v) {
				t.Errorf("%s: %s = %q, want %q", name, k, got, v)
			}
		}
	}
	resp, b := h.post("/v1/chat/completions", body("m", 4), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// 6 input + 4 output reserved of 100; 1 request of 3.
	check("first", resp, map[string]string{
		"X-Ratelimit-Limit-Tokens": "100", "X-Ratelimit-Remaining-Tokens": "90", "X-Ratelimit-Reset-Tokens": "39.5s",
		"X-Ratelimit-Limit-Requests": "3", "X-Ratelimit-Remaining-Requests": "2", "X-Ratelimit-Reset-Requests": "39.5s",
		"Retry-After": "", "X-Should-Retry": "",
	})
	// The gateway asked upstream for usage (a stream to a token-limited
	// model), so the reservation of 10 settled to the usage total of 12:
	// 88 left. The next one reserves 6+80: 2 left, and 1 request.
	resp, _ = h.post("/v1/chat/completions", body("m", 80), nil)
	check("second", resp, map[string]string{"X-Ratelimit-Remaining-Tokens": "2", "X-Ratelimit-Remaining-Requests": "1"})
	// The second settles at 12: 2 + 86 - 12 = 76 left. A request of 6+80
	// tokens no longer fits: 429, and the refused request does not count
	// against the request limit (1 left, as before it).
	resp, b = h.post("/v1/chat/completions", body("m", 80), nil)
	if resp.StatusCode != 429 || !strings.Contains(b, `"code":"rate_limit_exceeded"`) || !strings.Contains(b, `"type":"rate_limit_error"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	check("refused", resp, map[string]string{
		"X-Ratelimit-Limit-Tokens": "100", "X-Ratelimit-Remaining-Tokens": "76", "X-Ratelimit-Reset-Tokens": "39.5s",
		"X-Ratelimit-Limit-Requests": "3", "X-Ratelimit-Remaining-Requests": "1", "X-Ratelimit-Reset-Requests": "39.5s",
		"Retry-After": "40", "X-Should-Retry": "",
	})
	// A token-only model reports no request headers.
	resp, _ = h.post("/v1/chat/completions", body("t", 1), nil)
	check("token-only", resp, map[string]string{"X-Ratelimit-Limit-Tokens": "50", "X-Ratelimit-Remaining-Tokens": "43",
		"X-Ratelimit-Limit-Requests": "", "X-Ratelimit-Remaining-Requests": "", "X-Ratelimit-Reset-Requests": ""})
	// A model without limits gets no rate-limit headers at all.
	resp, _ = h.post("/v1/chat/completions", body("free", 1), nil)
	check("unlimited", resp, map[string]string{"X-Ratelimit-Limit-Tokens": "", "X-Ratelimit-Limit-Requests": "", "Retry-After": ""})
	// 999 ms before the window ends: reset "999ms", Retry-After rounds up
	// to 1.
	h.clock.Advance(39500*time.Millisecond - 999*time.Millisecond)
	resp, _ = h.post("/v1/chat/completions", body("m", 95), nil)
	check("late", resp, map[string]string{"X-Ratelimit-Reset-Tokens": "999ms", "Retry-After": "1"})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestSetRateLimitHeaders: Retry-After is the ceiling of the wait in whole
// seconds, and X-Should-Retry: false appears only on a refusal whose
// Retry-After is over 60 (our one-minute windows never wait longer, so
// this is checked on the header writer).
func TestSetRateLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		wait        time.Duration
		allowed     bool
		retry       int
		shouldRetry string
	}{
		{60 * time.Second, false, 60, ""},
		{60*time.Second + time.Millisecond, false, 61, "false"},
		{90 * time.Second, true, 90, ""},
		{1500 * time.Millisecond, false, 2, ""},
		{0, false, 1, ""},
	} {
		h := http.Header{}
		setRateLimitHeaders(h, ratelimit.Decision{Allowed: tc.allowed, RetryAfter: tc.wait,
			Tokens: &ratelimit.Dim{Limit: 10, Remaining: 3, Reset: tc.wait + 1500*time.Microsecond}})
		if got := retryAfterSeconds(tc.wait); got != tc.retry {
			t.Errorf("%v: Retry-After %d, want %d", tc.wait, got, tc.retry)
		}
		if got := h.Get("X-Should-Retry"); got != tc.shouldRetry {
			t.Errorf("%v allowed=%v: X-Should-Retry %q, want %q", tc.wait, tc.allowed, got, tc.shouldRetry)
		}
		if want := (tc.wait + time.Millisecond).String(); h.Get("X-Ratelimit-Reset-Tokens") != want {
			t.Errorf("%v: reset %q, want %q", tc.wait, h.Get("X-Ratelimit-Reset-Tokens"), want)
		}
		if h.Get("X-Ratelimit-Limit-Tokens") != "10" || h.Get("X-Ratelimit-Remaining-Tokens") != "3" || h.Get("X-Ratelimit-Limit-Requests") != "" {
			t.Errorf("%v: %v", tc.wait, h)
		}
	}
}

// TestRequestMetrics: one streamed and one aggregated chat, by value. The
// hub takes 2 s (fake clock) to answer; the stream's rest arrives 1 s after
// its first event.
func TestRequestMetrics(t *testing.T) {
	h := newHarness(t, opts{})
	h.hub.onServe = func() { h.clock.Advance(2 * time.Second) }
	h.hub.gate, h.hub.firstOut = make(chan struct{}), make(chan struct{})
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`))
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	// The first token is timed before its event is written.
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"Hel"`) {
		t.Fatalf("first line %q %v", line, err)
	}
	if got := testutil.ToFloat64(h.m.HTTPActive.WithLabelValues("POST", "/v1/chat/completions", "none")); got != 1 {
		t.Errorf("http_active_requests in flight = %v", got)
	}
	h.clock.Advance(time.Second)
	close(h.hub.gate)
	_, _ = io.Copy(io.Discard, br)
	_ = resp.Body.Close()
	h.hub.mu.Lock()
	h.hub.gate, h.hub.firstOut = nil, nil
	h.hub.mu.Unlock()
	if resp, b := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}

	type hist struct {
		name   string
		labels map[string]string
		count  uint64
		sum    float64
	}
	route := map[string]string{"method": "POST", "route": "/v1/chat/completions", "status": "200", "function_id": "none"}
	up := map[string]string{"upstream": "hub", "result": "success", "status": "200", "function_id": "none"}
	for _, c := range []hist{
		{"llm_api_gateway_http_request_duration_seconds", route, 2, 3 + 2},
		{"llm_api_gateway_upstream_request_duration_seconds", up, 2, 2 + 2},
		{"llm_api_gateway_stream_first_token_seconds", map[string]string{"endpoint": "chat_completions", "function_id": "none"}, 1, 2},
		{"llm_api_gateway_stream_duration_seconds", map[string]string{"endpoint": "chat_completions", "status": "completed", "function_id": "none"}, 1, 3},
		{"llm_api_gateway_provider_time_seconds", map[string]string{"endpoint": "chat_completions", "phase": "total", "stream": "true"}, 1, 3},
		{"llm_api_gateway_provider_time_seconds", map[string]string{"endpoint": "chat_completions", "phase": "total", "stream": "false"}, 1, 2},
	} {
		if n, sum, ok := histogram(t, h.reg, c.name, c.labels); !ok || n != c.count || sum != c.sum {
			t.Errorf("%s%v: count %d sum %v (%v), want %d %v", c.name, c.labels, n, sum, ok, c.count, c.sum)
		}
	}
	if got := counter(h.m.HTTPRequests, "POST", "/v1/chat/completions", "200", "none"); got != 2 {
		t.Errorf("http_requests_total = %v", got)
	}
	if got := testutil.ToFloat64(h.m.HTTPActive.WithLabelValues("POST", "/v1/chat/completions", "none")); got != 0 {
		t.Errorf("http_active_requests after = %v", got)
	}
	if got := counter(h.m.UpstreamRequests, "hub", "success", "200", "none"); got != 2 {
		t.Errorf("upstream_requests_total = %v", got)
	}
	// The fake hub's usage: 10 prompt (8 cached), 2 completion, 12 total.
	for _, stream := range []string{"true", "false"} {
		for typ, want := range map[string]float64{"prompt": 10, "completion": 2, "total": 12, "cached": 8} {
			if got := counter(h.m.Tokens, "chat_completions", typ, stream, "none"); got != want {
				t.Errorf("llm_tokens_total{token_type=%s,stream=%s} = %v, want %v", typ, stream, got, want)
			}
		}
	}
}

// TestModelURIAllowlist: a model whose uris do not list the path is
// refused with 400 on /v1/responses always, and on the other endpoints only
// with the allowlist enabled; every miss is counted per endpoint.
func TestModelURIAllowlist(t *testing.T) {
	calls := map[string]string{
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		"/v1/responses":        `{"model":"m","input":"x"}`,
		"/v1/completions":      `{"model":"m","prompt":"x"}`,
		"/v1/embeddings":       `{"model":"m","input":"x"}`,
	}
	for _, enforce := range []bool{false, true} {
		h := newHarness(t, opts{models: config.Models{"m": {URIs: []string{"v1/chat/completions/"}}}})
		h.srv.d.ModelURIAllowlist = enforce
		served := 0
		for path, body := range calls {
			resp, b := h.post(path, body, nil)
			want := 200
			if path == "/v1/responses" || enforce && path != "/v1/chat/completions" {
				want = 400
			}
			if want == 200 {
				served++
			}
			if resp.StatusCode != want {
				t.Errorf("enforce=%v %s: %d %s, want %d", enforce, path, resp.StatusCode, b, want)
			}
			if want == 400 && !strings.Contains(b, `"message":"model \"m\" does not support `+path+`"`) {
				t.Errorf("%s: body %s", path, b)
			}
		}
		for ep, n := range map[string]float64{"chat_completions": 0, "responses": 1, "completions": 1, "embeddings": 1} {
			if got := counter(h.m.AllowlistMisses, ep); got != n {
				t.Errorf("enforce=%v: model_uri_allowlist_rejections_total{endpoint=%s} = %v, want %v", enforce, ep, got, n)
			}
		}
		// Only the served requests reached the hub.
		if n := h.hub.count(); n != served {
			t.Errorf("enforce=%v: hub saw %d requests, want %d", enforce, n, served)
		}
	}
}
