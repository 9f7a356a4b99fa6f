package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
)

// set changes the fake hub's answer under its lock, between requests.
func (h *fakeHub) set(f func(*fakeHub)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// noSessionHeader fails the test when the hub's x-stargate-session-state
// reached the client, in any letter case.
func noSessionHeader(t *testing.T, name string, resp *http.Response) {
	t.Helper()
	for k, v := range resp.Header {
		if strings.EqualFold(k, "x-stargate-session-state") {
			t.Errorf("%s: x-stargate-session-state %q reached the client", name, v)
		}
	}
}

// TestSessionMetrics: the session series by value, through the handler
// against a hub that sets x-stargate-session-state. The hub takes 2 s
// (fake clock) to answer, so every first token is at 2 s. The fake hub's
// chat usage is 10 prompt tokens, 8 cached; Responses' is 7 input, 4
// cached; embeddings' is 3 prompt, none cached.
func TestSessionMetrics(t *testing.T) {
	h := newHarness(t, opts{})
	h.hub.onServe = func() { h.clock.Advance(2 * time.Second) }
	const (
		chatStream = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`
		chat       = `{"model":"m","messages":[{"role":"user","content":"x"}]}`
		responses  = `{"model":"m","input":"x"}`
		embeddings = `{"model":"m","input":"x"}`
	)
	for _, c := range []struct {
		name, session, path, body string
		status                    int
	}{
		{"streamed chat, returning", "returning", "/v1/chat/completions", chatStream, 200},
		{"aggregated chat, new", "new", "/v1/chat/completions", chat, 200},
		{"aggregated Responses, stale", "stale", "/v1/responses", responses, 200},
		{"an unknown class is none", "Returning", "/v1/chat/completions", chat, 200},
		{"no header is none", "", "/v1/embeddings", embeddings, 200},
		{"a non-2xx is not counted", "returning", "/v1/chat/completions", chat, 503},
	} {
		h.hub.set(func(f *fakeHub) { f.session, f.status = c.session, c.status })
		resp, b := h.post(c.path, c.body, nil)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		noSessionHeader(t, c.name, resp)
	}

	wantSeries(t, "session_requests_total", h.m.SessionRequests, map[string]float64{
		"chat_completions|returning|none": 1,
		"chat_completions|new|none":       1,
		"responses|stale|none":            1,
		"chat_completions|none|none":      1,
		"embeddings|none|none":            1,
	})
	wantSeries(t, "session_prompt_tokens_total", h.m.SessionPromptTokens, map[string]float64{
		"returning|hit|none": 8, "returning|miss|none": 2,
		"new|hit|none": 8, "new|miss|none": 2,
		"stale|hit|none": 4, "stale|miss|none": 3,
		// The unknown class's chat (8 and 2) and the embeddings (0 and 3).
		"none|hit|none": 8, "none|miss|none": 5,
	})
	// Streamed and aggregated answers alike; embeddings carry no events,
	// so no first token.
	for _, c := range []struct {
		endpoint, session string
		count             uint64
	}{
		{"chat_completions", "returning", 1},
		{"chat_completions", "new", 1},
		{"responses", "stale", 1},
		{"chat_completions", "none", 1},
		{"embeddings", "none", 0},
	} {
		n, sum, _ := histogram(t, h.reg, "llm_api_gateway_session_first_token_seconds",
			map[string]string{"endpoint": c.endpoint, "session_state": c.session, "function_id": "none"})
		if n != c.count || sum != 2*float64(c.count) {
			t.Errorf("session_first_token_seconds{%s,%s}: count %d sum %v, want %d %v", c.endpoint, c.session, n, sum, c.count, 2*float64(c.count))
		}
	}
	if n := testutil.CollectAndCount(h.m.SessionFirstToken); n != 4 {
		t.Errorf("session_first_token_seconds has %d series, want 4", n)
	}
	// The stream metric still counts only the streamed answer.
	if n, sum, _ := histogram(t, h.reg, "llm_api_gateway_stream_first_token_seconds",
		map[string]string{"endpoint": "chat_completions"}); n != 1 || sum != 2 {
		t.Errorf("stream_first_token_seconds: count %d sum %v, want 1 2", n, sum)
	}
	// No request carried a last-cluster hint (tracking is off).
	wantSeries(t, "last_cluster_hint_results_total", h.m.HintResults, map[string]float64{"followed": 0, "moved": 0})
}

// wantSeries checks that vec holds exactly the series of want (label
// values joined by "|") with their values: a series outside want, such as
// one with an echoed label value, fails the count.
func wantSeries(t *testing.T, name string, vec *prometheus.CounterVec, want map[string]float64) {
	t.Helper()
	if n := testutil.CollectAndCount(vec); n != len(want) {
		t.Errorf("%s: %d series, want %d", name, n, len(want))
	}
	for labels, v := range want {
		if got := testutil.ToFloat64(vec.WithLabelValues(strings.Split(labels, "|")...)); got != v {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, v)
		}
	}
}

// TestLastClusterHintResults: a hinted request served on its hinted
// cluster counts followed, one served elsewhere moved; requests without a
// hint and non-2xx answers count nothing. Both results start at 0.
func TestLastClusterHintResults(t *testing.T) {
	store := lastcluster.NewLRU(100, time.Minute)
	h := newHarness(t, opts{store: store})
	results := func(name string, want map[string]float64) {
		t.Helper()
		wantSeries(t, name+": last_cluster_hint_results_total", h.m.HintResults, want)
	}
	results("before traffic", map[string]float64{"followed": 0, "moved": 0})
	const body = `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"sess"}`
	turn := func(name string, wantStatus int, want map[string]float64) {
		t.Helper()
		resp, b := h.post("/v1/chat/completions", body, nil)
		if resp.StatusCode != wantStatus {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
		h.tracker.Wait(context.Background())
		results(name, want)
	}
	// No hint yet: nothing counted; cluster-a is remembered.
	turn("first turn", 200, map[string]float64{"followed": 0, "moved": 0})
	// Hint cluster-a, served on cluster-a.
	turn("followed", 200, map[string]float64{"followed": 1, "moved": 0})
	// Hint cluster-a, served on cluster-b (now remembered).
	h.hub.set(func(f *fakeHub) { f.cluster = "cluster-b" })
	turn("moved", 200, map[string]float64{"followed": 1, "moved": 1})
	if req, _ := h.hub.last(); req.Header.Get("x-stargate-last-cluster-id") != "cluster-a" {
		t.Fatalf("the moved turn's hint %q, want cluster-a", req.Header.Get("x-stargate-last-cluster-id"))
	}
	// Hint cluster-b, but the hub refuses: not counted.
	h.hub.set(func(f *fakeHub) { f.status = 503 })
	turn("non-2xx", 503, map[string]float64{"followed": 1, "moved": 1})
	// A payload session is never hinted.
	h.hub.set(func(f *fakeHub) { f.status = 200 })
	if resp, _ := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"payload"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("payload session: %d", resp.StatusCode)
	}
	results("payload session", map[string]float64{"followed": 1, "moved": 1})
}

// TestSessionTokensFromBrokenUsage: a usage with negative or inconsistent
// counts neither panics the handler nor moves a counter backwards; cached
// tokens count as hits only up to the prompt tokens. (JSON's last
// duplicate key wins, so usageExtra overrides the fake hub's
// prompt_tokens of 10; cached_tokens stays 8.)
func TestSessionTokensFromBrokenUsage(t *testing.T) {
	h := newHarness(t, opts{})
	h.hub.set(func(f *fakeHub) { f.session = "returning" })
	const body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`
	for _, c := range []struct {
		extra     string
		hit, miss float64
	}{
		// hit and miss are cumulative over the cases.
		{`,"prompt_tokens":-5`, 0, 0},   // nothing counted
		{`,"prompt_tokens":5`, 5, 0},    // 8 cached, capped at 5: 5 hits, no miss
		{`,"prompt_tokens":20`, 13, 12}, // 8 hits, 12 misses
	} {
		h.hub.set(func(f *fakeHub) { f.usageExtra = c.extra })
		resp, b := h.post("/v1/chat/completions", body, nil)
		if resp.StatusCode != 200 || !strings.Contains(b, "[DONE]") {
			t.Fatalf("%s: %d %s", c.extra, resp.StatusCode, b)
		}
		if got := counter(h.m.SessionPromptTokens, "returning", "hit", "none"); got != c.hit {
			t.Errorf("%s: hit = %v, want %v", c.extra, got, c.hit)
		}
		if got := counter(h.m.SessionPromptTokens, "returning", "miss", "none"); got != c.miss {
			t.Errorf("%s: miss = %v, want %v", c.extra, got, c.miss)
		}
	}
	// The negative prompt count added nothing to llm_tokens_total either,
	// and every request recorded its whole usage: a panic on the negative
	// count would have skipped the completion tokens and the provider time
	// after it (the client would not see it: its stream was already out).
	if got := counter(h.m.Tokens, "chat_completions", "prompt", "true", "none"); got != 25 {
		t.Errorf("llm_tokens_total{prompt} = %v, want 25", got)
	}
	if got := counter(h.m.Tokens, "chat_completions", "completion", "true", "none"); got != 3*2 {
		t.Errorf("llm_tokens_total{completion} = %v, want 6", got)
	}
	if n, _, _ := histogram(t, h.reg, "llm_api_gateway_provider_time_seconds", map[string]string{"phase": "total"}); n != 3 {
		t.Errorf("provider_time_seconds{phase=total}: count %d, want 3", n)
	}
}

// TestCopyHeadersDropsSessionState: the response filter removes the hub's
// session state in any letter case (a hub is not bound to net/http's
// canonical keys), keeping the headers a client may see.
func TestCopyHeadersDropsSessionState(t *testing.T) {
	for _, k := range []string{"X-Stargate-Session-State", "x-stargate-session-state", "X-STARGATE-SESSION-STATE"} {
		dst := http.Header{}
		copyHeaders(dst, http.Header{k: {"returning"}, "Content-Type": {"text/event-stream"}, "X-Kv-Cache-Hit": {"true"}})
		if _, ok := dst[k]; ok || len(dst) != 2 {
			t.Errorf("%s: copied %v", k, dst)
		}
	}
}
