package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	promptprefix "github.com/stargate-router/stargate/gateway/internal/prefix"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

func TestMain(m *testing.M) {
	// expirable.NewLRU starts a reaper goroutine that never exits (the
	// library has no Close).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"),
		// memberlist's Shutdown does not wait for a probe already waiting on
		// its ack timeout; that goroutine ends by itself.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// TestChatNonStreamAggregates: a non-streaming chat goes upstream as a
// stream with include_usage and comes back as one chat.completion with
// usage (incl. cached tokens); no hub-internal header reaches the client.
func TestChatNonStreamAggregates(t *testing.T) {
	h := newHarness(t, opts{})
	resp, body := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"abc","stream_options":{"foo":1}}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	_, up := h.hub.last()
	var sent map[string]any
	_ = json.Unmarshal(up, &sent)
	so, _ := sent["stream_options"].(map[string]any)
	if sent["stream"] != true || so["include_usage"] != true || so["foo"] != float64(1) {
		t.Fatalf("upstream body %s: want stream true and include_usage merged", up)
	}
	var out struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role, Content string
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "chat.completion" || out.Choices[0].Message.Content != "Hello" || out.Choices[0].Message.Role != "assistant" ||
		out.Choices[0].FinishReason != "stop" || out.Usage.PromptTokensDetails.CachedTokens != 8 || out.Model != "m" {
		t.Fatalf("aggregated %s", body)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-stargate-") || strings.HasPrefix(strings.ToLower(k), "x-inference-server-") {
			t.Errorf("internal header %s leaked", k)
		}
	}
	if got := resp.Header.Get("x-multi-turn-session-id"); got != "abc" {
		t.Errorf("x-multi-turn-session-id = %q, want the raw prompt_cache_key", got)
	}
	if resp.Header.Get("x-request-id") == "" {
		t.Error("no x-request-id on the response")
	}
}

// TestResponsesNonStream: a non-streaming Responses client gets the
// terminal response object.
func TestResponsesNonStream(t *testing.T) {
	h := newHarness(t, opts{})
	resp, body := h.post("/v1/responses", `{"model":"m","input":"hi","conversation":"conv-1"}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `"status":"completed"`) || !strings.Contains(body, `"cached_tokens":4`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	req, up := h.hub.last()
	if !strings.Contains(string(up), `"stream":true`) {
		t.Errorf("upstream body %s", up)
	}
	if got := resp.Header.Get("x-multi-turn-session-id"); got != "conv-1" {
		t.Errorf("session id %q", got)
	}
	if req.Header.Get("x-token-estimate") == req.Header.Get("x-input-tokens") {
		t.Errorf("responses x-token-estimate should include the output maximum")
	}
}

// TestStreamFlushesPerEvent: the first event reaches the client while the
// hub still holds the rest, and the last cluster is stored before the
// stream ends (docs/design/sessions.md#last-cluster-tracking).
func TestStreamFlushesPerEvent(t *testing.T) {
	store := &notifyStore{LRU: lastcluster.NewLRU(100, time.Minute), set: make(chan struct{})}
	h := newHarness(t, opts{store: store})
	h.hub.gate, h.hub.firstOut = make(chan struct{}), make(chan struct{})
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"prompt_cache_key":"s1"}`))
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, `"Hel"`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	// The write is asynchronous; it must complete while the hub still
	// holds the rest of the stream (the gate is closed only afterwards).
	<-store.set
	key := lastcluster.Key("", "m", "mt:v1:session:"+sha("s1"))
	if v, ok, _ := store.Get(context.Background(), key); !ok || v != "cluster-a" {
		t.Fatalf("stored %q, %v", v, ok)
	}
	close(h.hub.gate)
	rest, _ := br.ReadString(0)
	if !strings.Contains(rest, "[DONE]") {
		t.Fatalf("rest of stream %q", rest)
	}
}

// TestSpoofedHeadersNeverReachHub: whatever hub-facing header a client
// sends, on every endpoint and with the feature on or off, the hub sees
// only the gateway's own values. (x-priority is refused with 400 instead:
// TestClientPriorityRejected.)
func TestSpoofedHeadersNeverReachHub(t *testing.T) {
	spoof := map[string]string{
		"X-Stargate-Last-Cluster-Id": "evil", "X-Cache-Affinity-Key": "mt:v1:session:evil",
		"X-Stargate-Max-Wait-Ms": "1", "X-Stargate-Anything": "1", "X-Input-Tokens": "999999",
		"X-Token-Estimate": "1", "X-Model": "other", "X-Routing-Key": "rk", "X-Routing-Method": "random",
		"X-Request-Slo-Ms": "1", "X-Max-Wait-Ms": "1", "X-Inference-Server-Id": "x",
		"X-Stargate-Prompt-Prefix": "1.16.1.AAAAAAAAAAA", "Authorization": "Bearer k1",
	}
	bodies := map[string]string{
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		"/v1/responses":        `{"model":"m","input":"x","stream":true}`,
		"/v1/completions":      `{"model":"m","prompt":"x"}`,
		"/v1/embeddings":       `{"model":"m","input":"x"}`,
	}
	for _, feature := range []bool{false, true} {
		o := opts{keys: []config.APIKey{{Key: "k1", Principal: "p"}}, promptPrefix: feature}
		if feature {
			o.store = lastcluster.NewLRU(10, time.Minute)
		}
		h := newHarness(t, o)
		for path, body := range bodies {
			resp, b := h.post(path, body, spoof)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
			}
			req, _ := h.hub.last()
			for k := range spoof {
				got := req.Header.Get(k)
				switch k {
				case "X-Input-Tokens", "X-Token-Estimate":
					if got == "999999" || got == "1" && k == "X-Token-Estimate" && path != "/v1/embeddings" {
						t.Errorf("%s: %s = %q passed through", path, k, got)
					}
				case "X-Model":
					if got != "m" {
						t.Errorf("%s: x-model %q", path, got)
					}
				case "X-Cache-Affinity-Key":
					if got == spoof[k] {
						t.Errorf("%s: client affinity key reached the hub", path)
					}
				default:
					if got != "" {
						t.Errorf("%s (feature %v): %s = %q reached the hub", path, feature, k, got)
					}
				}
			}
		}
	}
}

// TestPromptPrefixToHub: with PromptPrefix on, the hub receives the
// gateway's own summary of the prompt (never the client's), on every
// generating endpoint; with it off, or for embeddings, none.
func TestPromptPrefixToHub(t *testing.T) {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	bodies := map[request.Endpoint]string{
		request.Chat:        `{"model":"m","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"hi"}]}`,
		request.Responses:   `{"model":"m","instructions":"` + long + `","input":"hi","stream":true}`,
		request.Completions: `{"model":"m","prompt":"` + long + `"}`,
		request.Embeddings:  `{"model":"m","input":"` + long + `"}`,
	}
	spoof := map[string]string{headers.StargatePromptPrefix: "1.16.1.AAAAAAAAAAA"}
	for _, on := range []bool{false, true} {
		h := newHarness(t, opts{promptPrefix: on})
		for e, body := range bodies {
			resp, b := h.post(e.Path(), body, spoof)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", e, resp.StatusCode, b)
			}
			req, _ := h.hub.last()
			got := req.Header.Get(headers.StargatePromptPrefix)
			want := ""
			if on && e != request.Embeddings {
				r, _ := request.Parse(e, []byte(body))
				want = promptprefix.Header(r, []byte(body))
				if want == "" {
					t.Fatalf("%s: no summary for a %d-byte prompt", e, len(long))
				}
			}
			if got != want {
				t.Fatalf("on=%v %s: hub got x-stargate-prompt-prefix %q, want %q", on, e, got, want)
			}
			if got != "" {
				if s, err := prefixhash.ParseHeader(got); err != nil || s.TotalBlocks < len(long)/prefixhash.DefaultBlockBytes {
					t.Fatalf("%s: header %q: %+v, %v", e, got, s, err)
				}
			}
		}
	}
}

// TestHeadersToHub: session precedence and the contract headers.
func TestHeadersToHub(t *testing.T) {
	models := config.Models{"m": {RequestSLOMs: 1500, MaxWaitMs: 2000, RoutingMethod: "pulsar"}}
	h := newHarness(t, opts{models: models})
	resp, body := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"abc"}`,
		map[string]string{"x-multi-turn-session-id": "hdr", "x-request-id": "req-1"})
	if resp.StatusCode != 200 {
		t.Fatal(body)
	}
	req, _ := h.hub.last()
	want := map[string]string{
		"x-cache-affinity-key": "mt:v1:session:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"x-request-id":         "req-1", "x-model": "m", "x-request-slo-ms": "1500", "x-max-wait-ms": "2000",
		"x-routing-method": "pulsar", "x-multi-turn-session-id": "",
	}
	for k, v := range want {
		if got := req.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if req.Header.Get("x-input-tokens") == "" {
		t.Error("x-input-tokens missing")
	}
	// An invalid header fails even when prompt_cache_key is valid.
	resp, _ = h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"abc"}`,
		map[string]string{"x-multi-turn-session-id": strings.Repeat("a", 257)})
	if resp.StatusCode != 400 {
		t.Errorf("overlong session header: %d", resp.StatusCode)
	}
	resp, _ = h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"a\u0001b"}`, nil)
	if resp.StatusCode != 400 {
		t.Errorf("control char in prompt_cache_key: %d", resp.StatusCode)
	}
}

func TestAuthAndLimits(t *testing.T) {
	h := newHarness(t, opts{keys: []config.APIKey{{Key: "secret", Principal: "alice"}}})
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	if resp, b := h.post("/v1/chat/completions", body, nil); resp.StatusCode != 401 || !strings.Contains(b, `"type":"authentication_error"`) {
		t.Errorf("no key: %d %s", resp.StatusCode, b)
	}
	if resp, _ := h.post("/v1/chat/completions", body, map[string]string{"Authorization": "Bearer nope"}); resp.StatusCode != 401 {
		t.Errorf("bad key: %d", resp.StatusCode)
	}
	if resp, _ := h.post("/v1/chat/completions", body, map[string]string{"Authorization": "Bearer secret"}); resp.StatusCode != 200 {
		t.Errorf("good key: %d", resp.StatusCode)
	}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	if resp, b := h.post("/v1/chat/completions", big, map[string]string{"Authorization": "Bearer secret"}); resp.StatusCode != 413 || !strings.Contains(b, "request_too_large") {
		t.Errorf("big body: %d %s", resp.StatusCode, b)
	}
	if resp, _ := h.post("/v1/chat/completions", `{"model":"m"}`, map[string]string{"Authorization": "Bearer secret"}); resp.StatusCode != 400 {
		t.Errorf("no messages: %d", resp.StatusCode)
	}
	if resp, _ := h.post("/v1/chat/completions", `not json`, map[string]string{"Authorization": "Bearer secret"}); resp.StatusCode != 400 {
		t.Errorf("bad json: %d", resp.StatusCode)
	}
	if got := counter(h.m.AuthRequests, "invalid"); got != 1 {
		t.Errorf("auth invalid = %v", got)
	}
}

// TestLastClusterHint: the second turn of an eligible session carries the
// first turn's cluster; payload sessions count skipped; non-2xx never
// writes.
func TestLastClusterHint(t *testing.T) {
	store := lastcluster.NewLRU(100, time.Minute)
	h := newHarness(t, opts{store: store})
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"sess"}`
	h.post("/v1/chat/completions", body, nil)
	req, _ := h.hub.last()
	if got := req.Header.Get("x-stargate-last-cluster-id"); got != "" {
		t.Fatalf("first turn hint %q", got)
	}
	h.tracker.Wait(context.Background())
	h.post("/v1/chat/completions", body, nil)
	req, _ = h.hub.last()
	if got := req.Header.Get("x-stargate-last-cluster-id"); got != "cluster-a" {
		t.Fatalf("second turn hint %q, want cluster-a", got)
	}
	h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"payload"}]}`, nil)
	if got := counter(h.m.LastClusterLookup, "skipped"); got != 1 {
		t.Errorf("skipped = %v", got)
	}
	h.hub.status = 503
	resp, b := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"prompt_cache_key":"other"}`, nil)
	if resp.StatusCode != 503 || !strings.Contains(b, "upstream says no") {
		t.Fatalf("hub 503 passed as %d %s", resp.StatusCode, b)
	}
	h.tracker.Wait(context.Background())
	if store.Len() != 1 {
		t.Errorf("store has %d entries; a non-2xx must not write", store.Len())
	}
	if got := counter(h.m.LastClusterWrite, "success"); got != 2 {
		t.Errorf("writes success = %v, want 2", got)
	}
}

// blockingStore never answers a Get before the test ends: a store slower
// than any deadline.
type blockingStore struct {
	release chan struct{}
	err     error
}

func (b *blockingStore) Get(context.Context, string) (string, bool, error) {
	if b.err != nil {
		return "", false, b.err
	}
	<-b.release
	return "", false, nil
}

func (b *blockingStore) Set(context.Context, string, string, time.Duration) error { return b.err }

// TestSlowAndFailingStore: a store slower than the deadline or failing
// outright never fails the request; timeout and error are counted.
func TestSlowAndFailingStore(t *testing.T) {
	slow := &blockingStore{release: make(chan struct{})}
	h := newHarness(t, opts{store: slow, timeout: 20 * time.Millisecond})
	defer close(slow.release)
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"prompt_cache_key":"sess"}`
	if resp, b := h.post("/v1/chat/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("slow store: %d %s", resp.StatusCode, b)
	}
	if got := counter(h.m.LastClusterLookup, "timeout"); got != 1 {
		t.Errorf("timeout = %v", got)
	}
	failing := &blockingStore{err: errors.New("store down")}
	h2 := newHarness(t, opts{store: failing})
	if resp, _ := h2.post("/v1/chat/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("failing store: %d", resp.StatusCode)
	}
	h2.tracker.Wait(context.Background())
	if counter(h2.m.LastClusterLookup, "error") != 1 || counter(h2.m.LastClusterWrite, "error") != 1 {
		t.Errorf("error counts lookup=%v write=%v", counter(h2.m.LastClusterLookup, "error"), counter(h2.m.LastClusterWrite, "error"))
	}
}

// TestRateLimited: the third request in a window of a 2 rpm limit is a
// 429 with Retry-After and x-ratelimit-* headers; a new window admits.
func TestRateLimited(t *testing.T) {
	h := newHarness(t, opts{
		models: config.Models{"*": {RequestsPerMinute: 2, TokensPerMinute: 1000}},
		limiter: func(m *metrics.Metrics, clk clock.Clock) *ratelimit.Limiter {
			return ratelimit.New(ratelimit.NewLocal(clk), ratelimit.Config{FailOpen: true, StoreTimeout: time.Second}, clk, m, nil)
		},
	})
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	for i := range 2 {
		if resp, b := h.post("/v1/chat/completions", body, nil); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := h.post("/v1/chat/completions", body, nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("x-ratelimit-remaining-requests") != "0" ||
		resp.Header.Get("x-ratelimit-limit-requests") != "2" || !strings.Contains(b, "rate_limit_exceeded") {
		t.Fatalf("third: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if h.hub.count() != 2 {
		t.Errorf("hub saw %d requests", h.hub.count())
	}
	h.clock.Advance(time.Minute)
	if resp, _ := h.post("/v1/chat/completions", body, nil); resp.StatusCode != 200 {
		t.Fatalf("next window: %d", resp.StatusCode)
	}
}

func TestModelsAndRoutes(t *testing.T) {
	h := newHarness(t, opts{})
	resp, err := h.ts.Client().Get(h.ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("models %d", resp.StatusCode)
	}
	resp, _ = h.ts.Client().Get(h.ts.URL + "/v1/chat/completions")
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET chat: %d", resp.StatusCode)
	}
	resp, _ = h.ts.Client().Get(h.ts.URL + "/nope")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown route: %d", resp.StatusCode)
	}
}

// TestConcurrentRequests exercises the handler under -race.
func TestConcurrentRequests(t *testing.T) {
	h := newHarness(t, opts{store: lastcluster.NewLRU(100, time.Minute)})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			stream := i%2 == 0
			b, _ := json.Marshal(map[string]any{"model": "m", "stream": stream, "prompt_cache_key": "s",
				"messages": []map[string]string{{"role": "user", "content": "x"}}})
			req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/v1/chat/completions", strings.NewReader(string(b)))
			resp, err := h.ts.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
}

// notifyStore signals its first Set.
type notifyStore struct {
	*lastcluster.LRU
	set  chan struct{}
	once sync.Once
}

func (n *notifyStore) Set(ctx context.Context, k, v string, ttl time.Duration) error {
	err := n.LRU.Set(ctx, k, v, ttl)
	n.once.Do(func() { close(n.set) })
	return err
}

// TestStreamUsageForSettlement: with a token limit, a chat stream whose
// client did not ask for usage is sent upstream with include_usage, the
// usage chunk is dropped on the way back, and the reservation settles on
// the reported usage (12 tokens) rather than the reservation.
func TestStreamUsageForSettlement(t *testing.T) {
	h := newHarness(t, opts{
		models: config.Models{"*": {TokensPerMinute: 100}},
		limiter: func(m *metrics.Metrics, clk clock.Clock) *ratelimit.Limiter {
			return ratelimit.New(ratelimit.NewLocal(clk), ratelimit.Config{FailOpen: true, StoreTimeout: time.Second}, clk, m, nil)
		},
	})
	body := `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	resp, b := h.post("/v1/chat/completions", body, nil)
	if resp.StatusCode != 200 || strings.Contains(b, `"usage"`) || !strings.Contains(b, "[DONE]") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	_, up := h.hub.last()
	if !strings.Contains(string(up), `"include_usage":true`) {
		t.Fatalf("upstream body %s", up)
	}
	// 100 - 12 settled = 88 left: a 60-token reservation still fits, which
	// it would not had the first request kept its 50+ token reservation...
	resp, _ = h.post("/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":70,"messages":[{"role":"user","content":"hello"}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("second request: %d (first did not settle on usage)", resp.StatusCode)
	}
}

// TestHubDownWritesNothing: a transport error is a 502 in the OpenAI
// shape and never writes the last-cluster store.
func TestHubDownWritesNothing(t *testing.T) {
	store := lastcluster.NewLRU(10, time.Minute)
	h := newHarness(t, opts{store: store})
	h.hub.srv.Close()
	resp, b := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"prompt_cache_key":"s"}`, nil)
	if resp.StatusCode != 502 || !strings.Contains(b, `"type":"server_error"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	h.tracker.Wait(context.Background())
	if store.Len() != 0 || counter(h.m.UpstreamRequests, "hub", "error", "error", "none") != 1 {
		t.Fatalf("store %d entries, upstream errors %v", store.Len(), counter(h.m.UpstreamRequests, "hub", "error", "error", "none"))
	}
}

// TestRoutingKeyPrefix: with --routing-key-prefix the hub gets the split
// model and routing key, and the client sees its own model string in
// streamed chunks and in the aggregated completion.
func TestRoutingKeyPrefix(t *testing.T) {
	h := newHarness(t, opts{})
	h.srv.d.RoutingKeyPrefix = true
	resp, b := h.post("/v1/chat/completions", `{"model":"fn/m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(b, `"model":"fn/m"`) || strings.Contains(b, `"model":"m"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	req, up := h.hub.last()
	if req.Header.Get("x-model") != "m" || req.Header.Get("x-routing-key") != "fn" || !strings.Contains(string(up), `"model":"m"`) {
		t.Fatalf("hub got %v %s", req.Header, up)
	}
	_, b = h.post("/v1/chat/completions", `{"model":"fn/m","messages":[{"role":"user","content":"x"}]}`, nil)
	if !strings.Contains(b, `"model":"fn/m"`) {
		t.Fatalf("aggregated %s", b)
	}
	if resp, _ := h.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 400 {
		t.Fatalf("unprefixed model: %d", resp.StatusCode)
	}
}

// TestTraceContextPropagates: the client's traceparent continues to the
// hub (same trace id) even with the default no-op tracer.
func TestTraceContextPropagates(t *testing.T) {
	h := newHarness(t, opts{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, map[string]string{"traceparent": tp})
	req, _ := h.hub.last()
	if got := req.Header.Get("traceparent"); !strings.Contains(got, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Fatalf("traceparent at hub %q", got)
	}
}
