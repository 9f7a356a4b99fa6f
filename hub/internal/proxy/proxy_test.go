package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// A model nothing advertises is a 404 carrying x-stargate-error-code, at
// once; a model advertised only as inactive is known, so it is a 503
// model_temporarily_unavailable with Retry-After, here at once because
// x-max-wait-ms: 0 leaves no wait (docs/hub.md#routing).
func TestNoCandidates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)

	hdr := validHeaders()
	hdr.Set(headers.Model, "nobody-serves-this")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: status %d, want 404", resp.StatusCode)
	}
	if got := resp.Header.Get(headers.StargateErrorCode); got != headers.ErrorCodeNoEligibleCandidates {
		t.Errorf("x-stargate-error-code = %q", got)
	}
	if e := openAIError(t, resp, body); e.Code != headers.ErrorCodeNoEligibleCandidates || e.Type != openai.TypeNotFound {
		t.Errorf("error %+v", e)
	}

	// The same model under another routing key is another target.
	hdr = validHeaders()
	hdr.Set(headers.RoutingKey, "other-key")
	if resp, _ := h.do(hdr, chatBody); resp.StatusCode != http.StatusNotFound {
		t.Errorf("model m under another routing key: status %d, want 404", resp.StatusCode)
	}

	hdr = validHeaders()
	hdr.Set(headers.Model, "idle")
	hdr.Set(headers.MaxWaitMs, "0")
	resp, body = h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("registered but inactive: status %d, want 503", resp.StatusCode)
	}
	// [L]: every pre-upstream rejection names its class in the header.
	if got := resp.Header.Get(headers.StargateErrorCode); got != ErrorCodeModelUnavailable {
		t.Errorf("503 x-stargate-error-code %q, want %s", got, ErrorCodeModelUnavailable)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("503 Retry-After %q, want 1", got)
	}
	if e := openAIError(t, resp, body); e.Code != ErrorCodeModelUnavailable || e.Type != openai.TypeServer {
		t.Errorf("error %+v", e)
	}

	if len(h.hits()) != 0 {
		t.Errorf("backends called: %v", h.hits())
	}
	wantSeries(t, "requests_total", h.m.requests, series{
		"rk|nobody-serves-this||404": 1,
		"other-key|m||404":           1,
		"rk|idle||503":               1,
	})
	wantSeries(t, "model_unavailable_waits_total", h.m.backendWaits, series{"rk|idle|timed_out": 1})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{})
	wantSeries(t, "routing_selections_total", h.m.selections, series{})
	// No active cluster is not a capacity rejection.
	wantSeries(t, "admission_rejections_total", h.m.admissions, series{})
	for m, want := range map[string]float64{model: 3, "solo": 1} {
		if got := testutil.ToFloat64(h.m.activeInference.WithLabelValues(rk, m)); got != want {
			t.Errorf("active_inference_servers{%s} = %v, want %v", m, got, want)
		}
	}
}

// The answer is streamed: the client holds event 1 before the backend
// writes event 2.
func TestStreamingRelaysEventByEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	next := make(chan struct{})
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, sseChunk1)
		_ = rc.Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, sseChunk2)
		_ = rc.Flush()
		_, _ = io.WriteString(w, sseDone)
	})

	resp := h.send(context.Background(), validHeaders(), chatBody)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev != sseChunk1 {
		t.Fatalf("event 1 = %q", ev)
	}
	close(next) // only now may the backend write event 2
	if ev := readEvent(t, br); ev != sseChunk2 {
		t.Fatalf("event 2 = %q", ev)
	}
	if ev := readEvent(t, br); ev != sseDone {
		t.Fatalf("event 3 = %q", ev)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after [DONE]: %q, %v", rest, err)
	}
	h.inflight.Wait()
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|200": 1})
}

// The client response keeps the upstream status, body and ordinary
// headers, loses the pylon's retry signal and error code, and names the
// serving backend, its URL and its cluster
// (docs/design/hub-request.md#one-attempt, step 7).
func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.backends["a1"].handle(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range map[string]string{
			headers.StargateRetryable:       "false",
			headers.StargateRetryReason:     "whatever",
			headers.StargateRetryAfterMs:    "10",
			headers.StargateExpectedQueueMs: "7",
			headers.StargateErrorCode:       "upstream_code",
			headers.StargateClusterID:       "spoofed-cluster",
			headers.InferenceServerID:       "spoofed-id",
			headers.KVCacheHit:              "true",
			headers.KVCacheHitTokens:        "64",
			"Content-Type":                  "text/event-stream",
			"X-Custom":                      "kept",
		} {
			w.Header().Set(k, v)
		}
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, sseChunk1+sseDone)
	})
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK || body != sseChunk1+sseDone {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	for _, k := range []string{headers.StargateRetryable, headers.StargateRetryReason, headers.StargateRetryAfterMs,
		headers.StargateExpectedQueueMs, headers.StargateErrorCode} {
		if v, ok := resp.Header[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("%s reached the client: %q", k, v)
		}
	}
	for k, want := range map[string]string{
		headers.StargateClusterID:  "ca",
		headers.InferenceServerID:  "a1",
		headers.InferenceServerURL: "http://a1.pylon:8000",
		headers.KVCacheHit:         "true",
		headers.KVCacheHitTokens:   "64",
		"X-Custom":                 "kept",
	} {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := resp.Header.Values("Set-Cookie"); !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Errorf("Set-Cookie = %q", got)
	}
}

// What the pylon receives: the client's headers and body unchanged, minus
// the routing method, the session hint and every hub-owned x-stargate-*
// header a caller may have sent; plus the hub's own queue estimate for
// the chosen cluster (docs/design/hub-request.md#one-attempt, step 3).
func TestForwardedRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	hdr := validHeaders()
	hdr.Set(headers.RoutingMethod, "power_of_two")
	hdr.Set(headers.CacheAffinityKey, "mt:v1:session:0123")
	hdr.Set(headers.Priority, "3")
	hdr.Set(headers.MaxWaitMs, "250")
	hdr.Set(headers.RequestSLOMs, "1500")
	hdr.Set(headers.StargateMaxWaitMs, "30000")
	hdr.Set(headers.TokenEstimate, "300")
	hdr.Set(headers.NVCFTargetRegion, "us-east")
	hdr.Set(headers.OutputTokens, "16")
	hdr.Set("Authorization", "Bearer sk-test")
	hdr.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	hdr.Add("X-Multi", "one")
	hdr.Add("X-Multi", "two")
	// What only the hub may say, and the hint the hub consumes.
	hdr.Set(headers.StargateLastClusterID, "cb")
	hdr.Set(headers.StargateExpectedQueueMs, "999999")
	hdr.Set(headers.StargateRetryable, "true")
	hdr.Set(headers.StargateRetryReason, "queue_estimate_mismatch")
	hdr.Set(headers.StargateRetryAfterMs, "5")
	hdr.Set(headers.StargateErrorCode, "spoofed")
	hdr.Set(headers.StargateSessionState, "returning")

	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions?api-version=2", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	got := h.backends["a1"].requests()
	if len(got) != 1 {
		t.Fatalf("a1 received %d requests; hits %v", len(got), h.hits())
	}
	r := got[0]
	if r.Method != http.MethodPost || r.URI != "/v1/chat/completions?api-version=2" || r.Body != chatBody {
		t.Errorf("received %s %s %q", r.Method, r.URI, r.Body)
	}
	for _, k := range []string{headers.RequestID, headers.Model, headers.InputTokens, headers.RoutingKey,
		headers.CacheAffinityKey, headers.Priority, headers.MaxWaitMs, headers.RequestSLOMs, headers.StargateMaxWaitMs,
		headers.TokenEstimate, headers.NVCFTargetRegion, headers.OutputTokens, "Authorization", "Traceparent", "Content-Type"} {
		if g, w := r.Header.Get(k), hdr.Get(k); g != w {
			t.Errorf("forwarded %s = %q, want %q", k, g, w)
		}
	}
	if g := r.Header.Values("X-Multi"); !slices.Equal(g, []string{"one", "two"}) {
		t.Errorf("X-Multi = %q", g)
	}
	// Priority 3 looks up key 0 of the map {0:120, 5:300}.
	if g := r.Header.Values(headers.StargateExpectedQueueMs); !slices.Equal(g, []string{qestA}) {
		t.Errorf("x-stargate-expected-queue-ms = %q, want [%s]", g, qestA)
	}
	for _, k := range []string{headers.RoutingMethod, headers.StargateLastClusterID, headers.StargateRetryable,
		headers.StargateRetryReason, headers.StargateRetryAfterMs, headers.StargateErrorCode, headers.StargateSessionState} {
		if v, ok := r.Header[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("%s forwarded: %q", k, v)
		}
	}
}

// When the cluster's queue estimate is undefined the header is omitted,
// even if the caller sent one.
func TestExpectedQueueOmittedWhenUndefined(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	hdr := validHeaders()
	hdr.Set(headers.Model, "solo")
	hdr.Set(headers.StargateExpectedQueueMs, "5")
	if resp, body := h.do(hdr, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	got := h.backends["s1"].requests()
	if len(got) != 1 {
		t.Fatalf("s1 received %d requests", len(got))
	}
	if v, ok := got[0].Header[http.CanonicalHeaderKey(headers.StargateExpectedQueueMs)]; ok {
		t.Errorf("x-stargate-expected-queue-ms forwarded for an undefined estimate: %q", v)
	}
}

// Hop-by-hop headers and Host never reach the pylon (no HTTP client sends
// most of them, so this checks the header set directly).
func TestForwardHeadersDropsHopByHop(t *testing.T) {
	t.Parallel()
	in := http.Header{
		"Connection": {"keep-alive"}, "Proxy-Connection": {"x"}, "Keep-Alive": {"timeout=5"},
		"Transfer-Encoding": {"chunked"}, "Te": {"trailers"}, "Trailer": {"X-T"}, "Upgrade": {"h2c"},
		"Host":                   {"hub"},
		"X-Routing-Method":       {"power-of-n"},
		"Authorization":          {"Bearer x"},
		"X-Stargate-Max-Wait-Ms": {"100"},
	}
	out := forwardHeaders(in)
	if len(out) != 2 || out.Get("Authorization") != "Bearer x" || headers.First(out, headers.StargateMaxWaitMs) != "100" {
		t.Errorf("forwarded %v", out)
	}
	if len(in) != 11 {
		t.Errorf("forwardHeaders modified its input: %v", in)
	}
}

// The forwarded names the hub knows are filed in lower case, the form the
// tunnel's HTTP/2 client sends as it is (it lowers any other name into a
// new string on every request), and the attempt's own values replace the
// inbound copies instead of going out beside them.
func TestForwardHeadersLowerCase(t *testing.T) {
	t.Parallel()
	in := http.Header{
		"X-Request-Id": {"r1"}, "X-Model": {"m"}, "X-Input-Tokens": {"12"}, "X-Token-Estimate": {"12"},
		"X-Output-Tokens": {"16"}, "X-Cache-Affinity-Key": {"mt:v1:pck:in"}, "X-Stargate-Deadline-Ms": {"900"},
		"X-Stargate-Aggregated": {"true"}, "Content-Type": {"application/json"}, "Traceparent": {"00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"},
	}
	out := forwardHeaders(in)
	for _, k := range []string{headers.RequestID, headers.Model, headers.InputTokens, headers.TokenEstimate,
		headers.OutputTokens, headers.CacheAffinityKey, headers.StargateDeadlineMs, headers.StargateAggregated} {
		if len(out[k]) != 1 || out[k][0] != in.Get(k) {
			t.Errorf("%s filed as %v; want %q under its lower-case name", k, out, in.Get(k))
		}
	}
	// Names the hub does not set keep the canonical key the propagator
	// and net/http use.
	if out["Content-Type"] == nil || out["Traceparent"] == nil {
		t.Errorf("forwarded %v; want Content-Type and Traceparent as they came", out)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header = in
	clk := clock.NewFake(t0)
	p := &Proxy{cfg: Config{Clock: clk}}
	req := &request{backendKey: "mt:v1:pck:hub", deadline: t0.Add(time.Second)}
	o, err := outbound(context.Background(), r, req, &routing.Decision{QueueEstimateKnown: true, QueueEstimateMs: 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.forwardDeadline(o, req)
	for name, want := range map[string]string{headers.CacheAffinityKey: "mt:v1:pck:hub", headers.StargateDeadlineMs: "1000",
		headers.StargateExpectedQueueMs: "7"} {
		var got []string
		for k, vs := range o.Header {
			if strings.EqualFold(k, name) {
				got = append(got, vs...)
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("attempt sends %s %q; want only %q", name, got, want)
		}
	}
}

// A 429 queue_estimate_mismatch is retried on the sibling backend of the
// same cluster, with the same queue estimate, and its reservation is
// released at once (docs/design/hub-request.md#retries,
// docs/design/routing-state.md#reservations).
func TestQueueMismatchRetriesSibling(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var mu sync.Mutex
	first := ""
	for _, id := range []string{"a1", "a2"} {
		h.backends[id].handle(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			isFirst := first == ""
			if isFirst {
				first = id
			}
			mu.Unlock()
			if isFirst {
				retryable(http.StatusTooManyRequests, headers.ReasonQueueEstimateMismatch)(w, r)
				return
			}
			ok(w, r)
		})
	}
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK || body != sseChunk1+sseDone {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	served := resp.Header.Get(headers.InferenceServerID)
	mu.Lock()
	defer mu.Unlock()
	if first == "" || served == first || !slices.Contains([]string{"a1", "a2"}, served) ||
		resp.Header.Get(headers.StargateClusterID) != "ca" {
		t.Fatalf("first attempt on %q, served by %q in %q: want the sibling in ca", first, served, resp.Header.Get(headers.StargateClusterID))
	}
	if hits := h.hits(); len(hits) != 2 || hits["a1"] != 1 || hits["a2"] != 1 {
		t.Errorf("hits %v, want a1 and a2 once each", hits)
	}
	for _, id := range []string{"a1", "a2"} {
		if q := h.backends[id].requests()[0].Header.Get(headers.StargateExpectedQueueMs); q != qestA {
			t.Errorf("%s got x-stargate-expected-queue-ms %q, want %s (estimated once per cluster selection)", id, q, qestA)
		}
	}
	if got := h.pendingOn(); !slices.Equal(got, []string{served}) {
		t.Errorf("pending reservations on %v, want only the sibling's (%s): the mismatch must release its own", got, served)
	}
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|" + served + "|200": 1})
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{
		"rk|m|" + first + "|upstream_429":  1,
		"rk|m|" + served + "|upstream_200": 1,
	})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|queue_estimate_mismatch": 1})
	wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|power-of-n|primary": 1})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{})
}

// A retryable answer with another reason fails the whole cluster: the load
// balancer runs again without it and the sibling is never tried. The
// reservation stays (only a mismatch releases one).
func TestRetryableAnswerExcludesCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reason, wantReason string
		status                   int
	}{
		{"503 pylon reason", headers.ReasonUpstreamAdmissionRejected, headers.ReasonUpstreamAdmissionRejected, http.StatusServiceUnavailable},
		{"429 pylon reason", headers.ReasonLocalConnectFailure, headers.ReasonLocalConnectFailure, http.StatusTooManyRequests},
		{"503 no reason", "", "retryable_upstream_response", http.StatusServiceUnavailable},
		{"503 blank reason", "  ", "retryable_upstream_response", http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if tc.reason == "" {
				h.backends["a1"].handle(answer(tc.status, headers.StargateRetryable, "TRUE"))
			} else {
				h.backends["a1"].handle(retryable(tc.status, tc.reason))
			}
			resp, body := h.do(validHeaders(), chatBody)
			if resp.StatusCode != http.StatusOK || body != sseChunk1+sseDone {
				t.Fatalf("status %d body %q", resp.StatusCode, body)
			}
			if resp.Header.Get(headers.InferenceServerID) != "b1" || resp.Header.Get(headers.StargateClusterID) != "cb" {
				t.Errorf("served by %s in %s, want b1 in cb", resp.Header.Get(headers.InferenceServerID), resp.Header.Get(headers.StargateClusterID))
			}
			if hits := h.hits(); len(hits) != 2 || hits["a1"] != 1 || hits["b1"] != 1 {
				t.Errorf("hits %v, want a1 then b1", hits)
			}
			// cb's estimate: no priority map and nothing queued, so 0 (defined).
			if q := h.backends["b1"].requests()[0].Header.Values(headers.StargateExpectedQueueMs); !slices.Equal(q, []string{"0"}) {
				t.Errorf("b1 got x-stargate-expected-queue-ms %q, want [0]", q)
			}
			if got := h.pendingOn(); !slices.Equal(got, []string{"a1", "b1"}) {
				t.Errorf("pending reservations on %v, want [a1 b1]", got)
			}
			wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|" + tc.wantReason: 1})
			wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|power-of-n|primary": 2})
			wantSeries(t, "proxy_attempts_total", h.m.attempts, series{
				"rk|m|a1|upstream_" + itoa(tc.status): 1,
				"rk|m|b1|upstream_200":                1,
			})
			wantSeries(t, "requests_total", h.m.requests, series{"rk|m|b1|200": 1})
		})
	}
}

// Without the pylon's signal (or with an explicit false) a 429/503 passes
// through unchanged; with --proxy-require-pylon-retry-signal=false a
// missing signal allows the retry but an explicit false still blocks it.
func TestRetrySignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		require   bool
		status    int
		signal    string // "" = header absent
		wantRetry bool
	}{
		{"429 no signal", true, http.StatusTooManyRequests, "", false},
		{"503 no signal", true, http.StatusServiceUnavailable, "", false},
		{"503 false", true, http.StatusServiceUnavailable, "false", false},
		{"503 garbage", true, http.StatusServiceUnavailable, "yes", false},
		{"500 true is not a retryable status", true, http.StatusInternalServerError, "true", false},
		{"signal off: 503 no signal", false, http.StatusServiceUnavailable, "", true},
		{"signal off: 429 false", false, http.StatusTooManyRequests, "false", false},
		{"signal off: 502 no signal", false, http.StatusBadGateway, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, func(c *Config) { c.RequirePylonRetrySignal = tc.require })
			kv := []string{"Retry-After", "1", "X-Upstream", "yes", headers.StargateRetryReason, headers.ReasonUpstreamAdmissionRejected}
			if tc.signal != "" {
				kv = append(kv, headers.StargateRetryable, tc.signal)
			}
			h.backends["a1"].handle(answer(tc.status, kv...))
			resp, body := h.do(validHeaders(), chatBody)
			if tc.wantRetry {
				if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "b1" {
					t.Fatalf("status %d from %s, want a retry served by b1", resp.StatusCode, resp.Header.Get(headers.InferenceServerID))
				}
				wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|" + headers.ReasonUpstreamAdmissionRejected: 1})
				return
			}
			if resp.StatusCode != tc.status || body != `{"upstream_status":`+itoa(tc.status)+`}` {
				t.Fatalf("status %d body %q, want the upstream %d passed through", resp.StatusCode, body, tc.status)
			}
			if resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Upstream") != "yes" ||
				resp.Header.Get(headers.StargateRetryable) != "" || resp.Header.Get(headers.StargateRetryReason) != "" ||
				resp.Header.Get(headers.InferenceServerID) != "a1" {
				t.Errorf("passed-through headers %v", resp.Header)
			}
			if hits := h.hits(); len(hits) != 1 || hits["a1"] != 1 {
				t.Errorf("hits %v, want a1 only", hits)
			}
			wantSeries(t, "proxy_retries_total", h.m.retries, series{})
			wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{})
			wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|" + itoa(tc.status): 1})
		})
	}
}

// With --proxy-max-request-retries 1, a2's 503 uses the one retry (a
// mismatch on a1 before it uses none: it has its own bound); b1's 503 is
// returned as is and counted as exhausted with the pylon's reason
// (docs/design/hub-request.md#retries).
func TestRequestRetriesExhausted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.MaxRequestRetries = 1 })
	// A fresh store's round robin starts at a1.
	h.backends["a1"].handle(retryable(http.StatusTooManyRequests, headers.ReasonQueueEstimateMismatch))
	h.backends["a2"].handle(retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected))
	h.backends["b1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-From", "b1")
		retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected)(w, r)
	})
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable || body != `{"upstream_status":503}` || resp.Header.Get("X-From") != "b1" {
		t.Fatalf("status %d body %q headers %v, want b1's 503", resp.StatusCode, body, resp.Header)
	}
	if resp.Header.Get(headers.StargateRetryable) != "" || resp.Header.Get(headers.StargateRetryReason) != "" ||
		resp.Header.Get(headers.StargateRetryAfterMs) != "" || resp.Header.Get(headers.StargateClusterID) != "cb" {
		t.Errorf("response headers %v", resp.Header)
	}
	if hits := h.hits(); len(hits) != 3 || hits["a1"] != 1 || hits["a2"] != 1 || hits["b1"] != 1 {
		t.Errorf("hits %v", hits)
	}
	if got := h.pendingOn(); !slices.Equal(got, []string{"a2", "b1"}) {
		t.Errorf("pending reservations on %v, want [a2 b1]", got)
	}
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|queue_estimate_mismatch": 1, "rk|m|upstream_admission_rejected": 1})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|upstream_admission_rejected": 1})
	wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|power-of-n|primary": 2})
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{
		"rk|m|a1|upstream_429": 1, "rk|m|a2|upstream_503": 1, "rk|m|b1|upstream_503": 1,
	})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|b1|503": 1})
}

// --proxy-max-request-retries 0: the first retryable answer is final.
func TestNoRequestRetriesConfigured(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.MaxRequestRetries = 0 })
	h.backends["a1"].handle(retryable(http.StatusServiceUnavailable, "engine_draining"))
	if resp, _ := h.do(validHeaders(), chatBody); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d", resp.StatusCode)
	}
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|engine_draining": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})
}

// x-stargate-max-wait-ms: 0 disables retries of both kinds; the mismatch
// reservation is still released.
func TestRetryBudgetZero(t *testing.T) {
	t.Parallel()
	t.Run("retryable answer", func(t *testing.T) {
		h := newHarness(t, nil)
		h.backends["a1"].handle(retryable(http.StatusTooManyRequests, headers.ReasonQueueEstimateMismatch))
		hdr := validHeaders()
		hdr.Set(headers.StargateMaxWaitMs, "0")
		resp, body := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusTooManyRequests || body != `{"upstream_status":429}` {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		if hits := h.hits(); len(hits) != 1 {
			t.Errorf("hits %v", hits)
		}
		if n := h.pending(); n != 0 {
			t.Errorf("%d pending reservations, want the mismatch's released", n)
		}
		wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|retry_budget_exhausted": 1})
		wantSeries(t, "proxy_retries_total", h.m.retries, series{})
		wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|429": 1})
	})
	t.Run("transport failure", func(t *testing.T) {
		h := newHarness(t, nil)
		h.backends["a1"].srv.Close()
		hdr := validHeaders()
		hdr.Set(headers.StargateMaxWaitMs, "0")
		resp, body := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		openAIError(t, resp, body)
		if hits := h.hits(); len(hits) != 0 {
			t.Errorf("hits %v", hits)
		}
		wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|retry_budget_exhausted": 1})
		wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|502": 1})
	})
	t.Run("a disabled budget header is not read", func(t *testing.T) {
		h := newHarness(t, nil, func(c *Config) { c.RetryBudgetHeader = "" })
		h.backends["a1"].handle(retryable(http.StatusTooManyRequests, headers.ReasonQueueEstimateMismatch))
		hdr := validHeaders()
		hdr.Set(headers.StargateMaxWaitMs, "not-a-number")
		resp, _ := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "a2" {
			t.Fatalf("status %d from %s, want a2's 200", resp.StatusCode, resp.Header.Get(headers.InferenceServerID))
		}
		if got := h.backends["a2"].requests()[0].Header.Get(headers.StargateMaxWaitMs); got != "not-a-number" {
			t.Errorf("forwarded budget header %q", got)
		}
	})
	t.Run("another budget header name", func(t *testing.T) {
		h := newHarness(t, nil, func(c *Config) { c.RetryBudgetHeader = "x-retry-budget-ms" })
		h.backends["a1"].handle(retryable(http.StatusTooManyRequests, headers.ReasonQueueEstimateMismatch))
		hdr := validHeaders()
		hdr.Set("x-retry-budget-ms", "bad")
		resp, body := h.do(hdr, chatBody)
		if resp.StatusCode != http.StatusBadRequest || openAIError(t, resp, body).Param != "x-retry-budget-ms" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		hdr.Set("x-retry-budget-ms", "0")
		if resp, _ := h.do(hdr, chatBody); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("budget 0 under the configured name: status %d", resp.StatusCode)
		}
	})
}

// A transport failure fails the backend and tries its sibling
// (connect_failover); the reservation on the failed backend stays.
func TestTransportFailureFailsOverToSibling(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// A fresh store's round robin starts at the first backend by id, so the
	// first attempt goes to a1.
	h.backends["a1"].srv.Close()
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headers.InferenceServerID) != "a2" || body != sseChunk1+sseDone {
		t.Fatalf("status %d from %q body %q, want a2's 200", resp.StatusCode, resp.Header.Get(headers.InferenceServerID), body)
	}
	if got := h.pendingOn(); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("pending reservations on %v, want [a1 a2]", got)
	}
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|proxy_502": 1, "rk|m|a2|upstream_200": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|connect_failover": 1})
	wantSeries(t, "routing_selections_total", h.m.selections, series{"rk|m|power-of-n|primary": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a2|200": 1})
}

// When every backend fails the connect retries run out: 502, OpenAI-shaped.
func TestAllTransportsFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, id := range []string{"a1", "a2", "b1"} {
		h.backends[id].srv.Close()
	}
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if e := openAIError(t, resp, body); e.Type != openai.TypeServer {
		t.Errorf("error %+v", e)
	}
	for _, k := range []string{headers.InferenceServerID, headers.StargateClusterID} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("a hub-generated 502 carries %s %q", k, v)
		}
	}
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|proxy_502": 1, "rk|m|a2|proxy_502": 1, "rk|m|b1|proxy_502": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|connect_failover": 2})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|connect_retries_exhausted": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|b1|502": 1})
}

// With connect retries to spare, running out of backends ends in the bare
// 503 of "nothing eligible" (docs/design/hub-request.md#routing-pass),
// counted as no_eligible_backend.
func TestEveryClusterFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.MaxConnectRetries = 10 })
	delete(h.tun, "a1") // no tunnel is a transport failure too
	h.backends["a2"].srv.Close()
	h.backends["b1"].srv.Close()
	resp, body := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	openAIError(t, resp, body)
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|connect_failover": 3})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|no_eligible_backend": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||503": 1})
}

// The routing wait applies only while some cluster is still eligible: once
// every cluster has failed, x-max-wait-ms does not delay the 503
// (docs/design/hub-request.md#routing-pass: an exhausted pass takes no
// wait). The clock never moves, so any wait would hang the request.
func TestNoRoutingWaitOnceEveryClusterFailed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk), func(c *Config) { c.MaxRequestRetries = 10 })
	for _, id := range []string{"a1", "a2", "b1"} {
		h.backends[id].handle(retryable(http.StatusServiceUnavailable, headers.ReasonUpstreamAdmissionRejected))
	}
	hdr := validHeaders()
	hdr.Set(headers.MaxWaitMs, "60000")
	res := wait(t, h.sendAsync(context.Background(), hdr), "the response")
	if res.err != nil || res.status != http.StatusServiceUnavailable || res.header.Get(headers.InferenceServerID) != "" {
		t.Fatalf("response %+v, want the hub's own 503", res)
	}
	h.inflight.Wait()
	wantSeries(t, "proxy_retries_total", h.m.retries, series{"rk|m|upstream_admission_rejected": 2})
	wantSeries(t, "proxy_retry_exhausted_total", h.m.exhaustedTotal, series{"rk|m|no_eligible_backend": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m||503": 1})
}

// Cancelling the client request while the backend streams cancels the
// backend's request.
func TestClientCancelReachesBackend(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cancelled := make(chan struct{})
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, sseChunk1)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.send(ctx, validHeaders(), chatBody)
	defer func() { _ = resp.Body.Close() }()
	if ev := readEvent(t, bufio.NewReader(resp.Body)); ev != sseChunk1 {
		t.Fatalf("event 1 = %q", ev)
	}
	cancel()
	wait(t, cancelled, "the backend's request context to be cancelled")
	h.inflight.Wait()
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|upstream_200": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})
}

// Cancelling the client before the backend answers cancels the attempt and
// is recorded as 499 without any retry.
func TestClientCancelBeforeHead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	entered, cancelled := make(chan struct{}), make(chan struct{})
	h.backends["a1"].handle(func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		close(cancelled)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header = validHeaders()
		resp, err := h.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	wait(t, entered, "the backend to receive the request")
	cancel()
	if err := wait(t, errc, "the client to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("client error %v", err)
	}
	wait(t, cancelled, "the backend's request context to be cancelled")
	h.inflight.Wait()
	if hits := h.hits(); len(hits) != 1 {
		t.Errorf("hits %v: a cancelled request must not be retried", hits)
	}
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{"rk|m|a1|proxy_499": 1})
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|499": 1})
	wantSeries(t, "proxy_retries_total", h.m.retries, series{})
}

// An upstream stream that breaks after the head must not look complete to
// the client: the hub aborts the client stream instead of ending it
// cleanly (docs/design/hub-request.md#streaming).
func TestUpstreamBreakTruncatesClientStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	next := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-next:
		default:
			close(next)
		}
	})
	h.backends["a1"].handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, sseChunk1)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	})
	resp := h.send(context.Background(), validHeaders(), chatBody)
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev != sseChunk1 {
		t.Fatalf("event 1 = %q", ev)
	}
	close(next)
	rest, err := io.ReadAll(br)
	if err == nil {
		t.Fatalf("the client saw a clean end of stream after %q; want a truncated one", rest)
	}
	h.inflight.Wait()
	wantSeries(t, "requests_total", h.m.requests, series{"rk|m|a1|200": 1})
}

// A backend identity that is not a valid header value cannot be reported
// to the client: 500 (docs/design/hub-request.md#status-codes).
func TestInvalidBackendIdentityIs500(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, id, cluster, url string }{
		{"id", "bad\x01id", "cbad", "http://ok"},
		{"url", "badurl", "cbad", "http://x\r\nX-Injected: 1"},
		{"cluster", "badcluster", "c\x7f", "http://ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			reg := &protocol.Registration{V: protocol.Version, Models: map[string]protocol.ModelEntry{
				"odd": {Status: protocol.StatusActive, Stats: &protocol.ModelStats{LastMeanInputTPS: 1000}},
			}}
			h.addBackend(state.Backend{ID: tc.id, ClusterID: tc.cluster, URL: tc.url, RoutingKey: rk}, reg)
			hdr := validHeaders()
			hdr.Set(headers.Model, "odd")
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusInternalServerError {
				t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
			}
			if resp.Header.Get("X-Injected") != "" {
				t.Errorf("header injection: %v", resp.Header)
			}
			openAIError(t, resp, body)
			wantSeries(t, "requests_total", h.m.requests, series{"rk|odd|" + tc.id + "|500": 1})
		})
	}
}

// A Config without clock, logger or metrics still serves.
func TestZeroDependencies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	p := New(Defaults(), h.store, h.tun, fixedResolver{lb.Route{Algorithm: "power-of-n", Picker: h.p.gen.Load().Resolver.(PowerOfNResolver).Picker}})
	w := serveLocal(p, "POST", validHeaders(), chatBody)
	if w.Code != http.StatusOK || w.Body.String() != sseChunk1+sseDone {
		t.Fatalf("status %d body %q", w.Code, w.Body)
	}
	hdr := validHeaders()
	hdr.Set(headers.RoutingMethod, "bogus") // logs a warning
	if w := serveLocal(New(Defaults(), h.store, h.tun, h.p.gen.Load().Resolver), "POST", hdr, chatBody); w.Code != http.StatusBadRequest {
		t.Fatalf("status %d", w.Code)
	}
}

// Concurrent requests under -race: every one is served and counted once.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	const n = 40
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := range n {
		wg.Go(func() {
			hdr := validHeaders()
			hdr.Set(headers.RequestID, "req-"+itoa(i))
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header = hdr
			resp, err := h.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("status %d", s)
		}
	}
	h.inflight.Wait()
	total := 0.0
	for _, id := range []string{"a1", "a2", "b1"} {
		total += testutil.ToFloat64(h.m.requests.WithLabelValues(rk, model, id, "200"))
	}
	if total != n {
		t.Errorf("requests_total sums to %v, want %d", total, n)
	}
	if got := testutil.ToFloat64(h.m.selections.WithLabelValues(rk, model, "power-of-n", "primary")); got != n {
		t.Errorf("selections %v", got)
	}
	if got := h.pending(); got != n {
		t.Errorf("%d pending reservations, want %d (they last until the next heartbeat)", got, n)
	}
}
