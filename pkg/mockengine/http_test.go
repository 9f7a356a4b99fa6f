package mockengine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/headers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sdk(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

// longSystem is a system prompt of several KV blocks.
var longSystem = strings.Repeat("The prefix cache keeps every full block it has seen. ", 40)

func TestSDKChatNonStreaming(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:     "any-model-name",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(longSystem), openai.UserMessage("hi")},
		MaxTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "any-model-name" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("response = %+v", resp)
	}
	if resp.Usage.CompletionTokens != 5 || resp.Usage.PromptTokens < 100 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+5 {
		t.Fatalf("usage = %+v", resp.Usage)
	}
	if got := len(strings.Fields(resp.Choices[0].Message.Content)); got != 5 {
		t.Fatalf("content %q has %d words, want one per token", resp.Choices[0].Message.Content, got)
	}
	if resp.Choices[0].FinishReason != "length" {
		t.Fatalf("finish_reason %q, want length: max_tokens stopped generation", resp.Choices[0].FinishReason)
	}
}

func TestSDKChatStreamingAndTwoTurnCache(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(longSystem), openai.UserMessage("first question")}
	turn := func() (string, openai.CompletionUsage, int) {
		stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model: "test-model", Messages: msgs,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var text strings.Builder
		var u openai.CompletionUsage
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			chunks++
			for _, choice := range ch.Choices {
				text.WriteString(choice.Delta.Content)
			}
			if ch.Usage.TotalTokens > 0 {
				u = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return text.String(), u, chunks
	}
	reply, u1, chunks := turn()
	// role + 8 tokens + stop + usage
	if chunks != 11 || u1.CompletionTokens != 8 {
		t.Fatalf("turn 1: %d chunks, usage %+v", chunks, u1)
	}
	if u1.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1 of a new conversation reported %d cached tokens", u1.PromptTokensDetails.CachedTokens)
	}
	msgs = append(msgs, openai.AssistantMessage(reply), openai.UserMessage("second question"))
	_, u2, _ := turn()
	if u2.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("turn 2 reported no cached tokens")
	}
	// The reply's own blocks are cached too: turn 2 hits beyond turn 1's prompt.
	if u2.PromptTokensDetails.CachedTokens <= u1.PromptTokens-16 {
		t.Fatalf("turn 2 cached %d tokens, want more than turn 1's prompt minus its tail (%d): output was not appended",
			u2.PromptTokensDetails.CachedTokens, u1.PromptTokens-16)
	}
	if u2.PromptTokensDetails.CachedTokens > u2.PromptTokens {
		t.Fatalf("cached %d > prompt %d", u2.PromptTokensDetails.CachedTokens, u2.PromptTokens)
	}
}

func TestSDKCompletions(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	prompt := longSystem + "Once upon a time"
	resp, err := c.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:  "test-model",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Usage.CompletionTokens != 8 {
		t.Fatalf("response = %+v", resp)
	}
	// Continuing the text re-sends prompt+completion: it hits both.
	stream := c.Completions.NewStreaming(t.Context(), openai.CompletionNewParams{
		Model:         "test-model",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt + resp.Choices[0].Text + " and then")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	var cached int64
	var text strings.Builder
	for stream.Next() {
		ch := stream.Current()
		for _, choice := range ch.Choices {
			text.WriteString(choice.Text)
		}
		if ch.Usage.TotalTokens > 0 {
			cached = ch.Usage.PromptTokensDetails.CachedTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if cached <= resp.Usage.PromptTokens-16 || text.Len() == 0 {
		t.Fatalf("continuation cached %d tokens (first prompt %d), text %q", cached, resp.Usage.PromptTokens, text.String())
	}
}

func TestSDKModels(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	page, err := c.Models.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "test-model" {
		t.Fatalf("models = %+v", page.Data)
	}
}

func TestBadInput(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBodyBytes = 4096
	_, url := startServer(t, cfg)
	cases := []struct {
		name, path, method, body string
		hdr                      map[string]string
		status                   int
		code, param              string
	}{
		{"malformed json", "/v1/chat/completions", "POST", `{"model":`, nil, 400, "invalid_json", ""},
		{"empty body", "/v1/chat/completions", "POST", ``, nil, 400, "invalid_json", ""},
		{"missing model", "/v1/chat/completions", "POST", `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, "missing_field", "model"},
		{"missing messages", "/v1/chat/completions", "POST", `{"model":"m"}`, nil, 400, "missing_field", "messages"},
		{"messages not array", "/v1/chat/completions", "POST", `{"model":"m","messages":"hi"}`, nil, 400, "invalid_type", "messages"},
		{"model not string", "/v1/chat/completions", "POST", `{"model":7,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_type", "model"},
		{"content wrong type", "/v1/chat/completions", "POST", `{"model":"m","messages":[{"role":"user","content":5}]}`, nil, 400, "invalid_type", "messages[0].content"},
		{"stream not bool", "/v1/chat/completions", "POST", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_type", "stream"},
		{"missing role", "/v1/chat/completions", "POST", `{"model":"m","messages":[{"content":"x"}]}`, nil, 400, "missing_field", "messages"},
		{"max_tokens zero", "/v1/chat/completions", "POST", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_value", "max_tokens"},
		{"bad x-output-tokens", "/v1/chat/completions", "POST", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, map[string]string{"x-output-tokens": "-3"}, 400, "invalid_header", ""},
		{"too large", "/v1/chat/completions", "POST", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, nil, 413, "request_too_large", ""},
		{"prompt missing", "/v1/completions", "POST", `{"model":"m"}`, nil, 400, "missing_field", "prompt"},
		{"prompt token ids", "/v1/completions", "POST", `{"model":"m","prompt":[1,2,3]}`, nil, 400, "invalid_type", "prompt"},
		{"wrong method", "/v1/chat/completions", "GET", ``, nil, 405, "method_not_allowed", ""},
		{"unknown path", "/v1/nope", "GET", ``, nil, 404, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			e := decodeError(t, resp)
			if e.Error.Code != c.code || e.Error.Param != c.param {
				t.Fatalf("error = %+v, want code %q param %q", e.Error, c.code, c.param)
			}
		})
	}
}

func TestStatsStreamEvents(t *testing.T) {
	e, url := startServer(t, fastConfig())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/pylon/v1/stats/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != `{"type":"ping","v":1}` {
		t.Fatalf("first line %q, want an immediate ping", lines.Text())
	}
	// The handler subscribes before it writes the first ping.
	if !e.stats.active() {
		t.Fatal("no subscriber registered after the first ping")
	}
	r := postJSON(t, url+"/v1/chat/completions", chatBody(true, "count me"), map[string]string{"x-request-id": "req-1", "x-output-tokens": "3"})
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	type ev struct {
		Type      string  `json:"type"`
		V         int     `json:"v"`
		RequestID string  `json:"request_id"`
		Processed *uint64 `json:"tokens_processed"`
		Generated *uint64 `json:"tokens_generated"`
		Finished  bool    `json:"finished"`
	}
	var got []string
	for lines.Scan() {
		var x ev
		if err := json.Unmarshal(lines.Bytes(), &x); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		if x.Type == "ping" {
			continue
		}
		if x.V != 1 || x.RequestID != "req-1" || x.Processed == nil || x.Generated == nil {
			t.Fatalf("event %q", lines.Text())
		}
		s := ""
		if x.Finished {
			s = " finished"
		}
		got = append(got, strconv.FormatUint(*x.Processed, 10)+","+strconv.FormatUint(*x.Generated, 10)+s)
		if x.Finished {
			break
		}
	}
	// (0,0) before prefill, (in,0) at first token, (in,k) per token, then finished.
	want := []string{"0,0", "4,0", "4,1", "4,2", "4,3", "4,3 finished"} // "user:count me\n" is 14 bytes: 4 tokens
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestStatsStreamDisabledAnswers404(t *testing.T) {
	cfg := fastConfig()
	cfg.DisableStatsStream = true
	_, url := startServer(t, cfg)
	resp, err := http.Get(url + "/pylon/v1/stats/stream")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
	decodeError(t, resp)
}

func TestTestControl(t *testing.T) {
	_, url := startServer(t, fastConfig())
	put := func(path, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, url+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r := put("/test-control/models/test-model", `{"chat_failure":true}`)
	r.Body.Close()
	resp := postJSON(t, url+"/v1/chat/completions", chatBody(false, "x"), nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("chat with chat_failure: status %d", resp.StatusCode)
	}
	if e := decodeError(t, resp); !strings.Contains(e.Error.Message, "mock chat failure enabled for model test-model") {
		t.Fatalf("message %q", e.Error.Message)
	}
	r = put("/test-control/models/test-model", `{"chat_failure":false}`)
	r.Body.Close()
	resp = postJSON(t, url+"/v1/chat/completions", chatBody(false, "x"), map[string]string{"x-request-id": "calibration-1"})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after clearing chat_failure: %d", resp.StatusCode)
	}
	if r := put("/test-control/discovery-models", `{"models":["a"," "]}`); r.StatusCode != 400 {
		t.Fatalf("blank model id accepted: %d", r.StatusCode)
	} else {
		decodeError(t, r)
	}
	r = put("/test-control/discovery-models", `{"models":["m1","m2"]}`)
	r.Body.Close()
	c := sdk(url)
	page, err := c.Models.List(t.Context())
	if err != nil || len(page.Data) != 2 || page.Data[1].ID != "m2" {
		t.Fatalf("models after change: %+v %v", page, err)
	}
	snapResp, err := http.Get(url + "/test-control")
	if err != nil {
		t.Fatal(err)
	}
	defer snapResp.Body.Close()
	var snap snapshotJSON
	if err := json.NewDecoder(snapResp.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, c := range snap.Counters {
		counts[c.Endpoint+"/"+c.RequestClass] += c.Count
	}
	if counts["chat_completions/api_gateway"] != 1 || counts["chat_completions/pylon_generated"] != 1 || snap.ModelDiscoveryRequests != 1 {
		t.Fatalf("snapshot counters %v discovery %d", counts, snap.ModelDiscoveryRequests)
	}
}

func TestKVStatsAndMetrics(t *testing.T) {
	_, url := startServer(t, fastConfig())
	for range 2 {
		r := postJSON(t, url+"/v1/chat/completions", chatBody(false, longSystem), nil)
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	resp, err := http.Get(url + "/kv-cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	var kv map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&kv)
	resp.Body.Close()
	if kv["model"] != "test-model" || kv["kv_cache_hit_count"] != float64(1) || kv["kv_cache_miss_count"] != float64(1) || kv["kv_cache_used_tokens"].(float64) <= 0 {
		t.Fatalf("kv stats %v", kv)
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:num_requests_running{model_name="test-model"} 0`,
		`vllm:num_requests_waiting{model_name="test-model"} 0`,
		`vllm:kv_cache_usage_perc{model_name="test-model"}`,
		`vllm:prefix_cache_queries_total{model_name="test-model"}`,
		`vllm:prefix_cache_hits_total{model_name="test-model"}`,
		`vllm:prompt_tokens_total{model_name="test-model"}`,
		`vllm:generation_tokens_total{model_name="test-model"} 16`,
		`vllm:time_to_first_token_seconds_count{model_name="test-model"} 2`,
		`vllm:request_success_total{finished_reason="stop",model_name="test-model"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// --engine-id and --cluster-id name the engine and its cluster on every
// inference answer; unset, no header.
func TestEngineIDHeader(t *testing.T) {
	for _, id := range []string{"", "cluster-a"} {
		cfg := fastConfig()
		cfg.EngineID = id
		cfg.ClusterID = id
		_, url := startServer(t, cfg)
		resp := postJSON(t, url+"/v1/chat/completions", `{"model":"`+cfg.ModelName+`","messages":[{"role":"user","content":"hi"}]}`, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got, ok := resp.Header[http.CanonicalHeaderKey(headers.MockEngineID)]; (id == "") == ok || (ok && got[0] != id) {
			t.Fatalf("engine id %q: header %v", id, got)
		}
		if got, ok := resp.Header[http.CanonicalHeaderKey(headers.MockClusterID)]; (id == "") == ok || (ok && got[0] != id) {
			t.Fatalf("cluster id %q: header %v", id, got)
		}
	}
}
