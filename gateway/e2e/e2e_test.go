package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAISDK drives gateway -> hub -> pylon -> mock engine with the
// official SDK: chat (non-streaming, aggregated by the gateway), a chat
// stream, a Responses call, and a multi-turn conversation keyed by
// prompt_cache_key whose later turns report cached tokens. The hub always
// requires the gateway's token (the stack is started with it, never
// depending on what a binary's --help happens to say), so every answer
// here also proves the gateway -> hub authentication, and a caller
// without the token is refused.
func TestOpenAISDK(t *testing.T) {
	e := newEnv(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("sk-e2e alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, gw, metricsURL := e.stack("--api-keys-file", keys, "--last-cluster-enabled")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("sk-e2e"),
		option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("HubRequiresTheGatewayToken", func(t *testing.T) {
		if status, b, err := e.hubGet(h, "/v1/models", false); err != nil || status != http.StatusUnauthorized {
			t.Fatalf("hub without the gateway token: %d %s %v, want 401", status, b, err)
		}
	})
	t.Run("Unauthorized", func(t *testing.T) {
		bad := openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("nope"),
			option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0))
		_, err := bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		var apiErr *openai.Error
		if !asAPIError(err, &apiErr) || apiErr.StatusCode != 401 {
			t.Fatalf("err = %v, want a 401", err)
		}
	})
	t.Run("Chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say something.")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Object != "chat.completion" || c.Usage.PromptTokens == 0 {
			t.Fatalf("completion %+v", c)
		}
	})
	t.Run("Stream", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream please.")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		var text strings.Builder
		chunks, usage := 0, int64(0)
		for s.Next() {
			ch := s.Current()
			chunks++
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage.TotalTokens
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || text.Len() == 0 || usage == 0 {
			t.Fatalf("%d chunks, text %q, usage %d", chunks, text.String(), usage)
		}
	})
	t.Run("Responses", func(t *testing.T) {
		r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there.")}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "completed" || r.OutputText() == "" || r.Usage.InputTokens == 0 {
			t.Fatalf("response %+v", r)
		}
	})
	t.Run("MultiTurnCachedTokens", func(t *testing.T) {
		msgs := []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(strings.Repeat("You are a helpful assistant with a long system prompt. ", 40)),
			openai.UserMessage("Turn one."),
		}
		var cached []int64
		for turn := range 3 {
			c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs,
				PromptCacheKey: openai.String("e2e-conversation")})
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
			cached = append(cached, c.Usage.PromptTokensDetails.CachedTokens)
			msgs = append(msgs, c.Choices[0].Message.ToParam(), openai.UserMessage("And another turn."))
		}
		if cached[1] == 0 || cached[2] == 0 {
			t.Fatalf("cached tokens per turn %v: later turns must reuse the cache", cached)
		}
	})
	t.Run("Metrics", func(t *testing.T) {
		resp, err := e.cl.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		for _, want := range []string{
			`llm_api_gateway_last_cluster_lookups_total{result="hit"}`,
			`llm_api_gateway_last_cluster_writes_total{result="success"}`,
			`llm_api_gateway_http_requests_total{function_id="none",method="POST",route="/v1/chat/completions",status="200"}`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(string(b), `llm_api_gateway_last_cluster_lookups_total{result="hit"} 0`) {
			t.Error("the multi-turn conversation never hit the last-cluster store")
		}
	})
}

func asAPIError(err error, target **openai.Error) bool {
	if err == nil {
		return false
	}
	e, ok := err.(*openai.Error) //nolint:errorlint // the SDK returns *openai.Error unwrapped
	if ok {
		*target = e
	}
	return ok
}
