package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

// setFault sets the mock engine's injected fault (docs/mock-engine.md,
// "Fault injection").
func (e *env) setFault(h hub, spec string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, h.engine+"/test-control/fault", strings.NewReader(spec))
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.cl.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("setting fault %s: %d %s", spec, resp.StatusCode, b)
	}
}

// TestEngineFaultsReachTheClient: through the whole stack, an engine that
// dies mid-answer (the pylon and the hub abort their streams in turn)
// reaches an official-SDK client as a stream error after the tokens that
// were sent, on chat and Responses, and as a 502 to a client that did not
// stream; an engine that never answers costs a client
// --hub-response-header-timeout, then a 504.
func TestEngineFaultsReachTheClient(t *testing.T) {
	e := newEnv(t)
	h := e.backend()
	gw, _ := e.gateway(h, "--insecure-no-auth", "--hub-response-header-timeout", "2s")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("k"),
		option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a long story.")}

	e.setFault(h, `{"mode":"drop","after_tokens":2}`)
	t.Run("ChatStreamCut", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs})
		tokens := 0
		for s.Next() {
			for _, c := range s.Current().Choices {
				if c.Delta.Content != "" {
					tokens++
				}
			}
		}
		var se *ssestream.StreamError
		if !errors.As(s.Err(), &se) || !strings.Contains(se.Message, "upstream_stream_interrupted") || tokens != 2 {
			t.Fatalf("%d tokens, stream error %v; want the 2 tokens sent, then an ssestream.StreamError", tokens, s.Err())
		}
	})
	t.Run("ResponsesStreamCut", func(t *testing.T) {
		s := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a long story.")}})
		for s.Next() {
			if s.Current().Type == "response.completed" {
				t.Fatal("a cut Responses stream completed")
			}
		}
		var se *ssestream.StreamError
		if !errors.As(s.Err(), &se) {
			t.Fatalf("stream error %v, want an ssestream.StreamError", s.Err())
		}
	})
	t.Run("ChatNotStreamedCut", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway {
			t.Fatalf("err %v, want a 502", err)
		}
	})

	e.setFault(h, `{"mode":"hang"}`)
	t.Run("EngineHangs", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusGatewayTimeout || apiErr.Code != "upstream_timeout" {
			t.Fatalf("err %v, want a 504 upstream_timeout", err)
		}
	})

	e.setFault(h, `{"mode":"none"}`)
	t.Run("Recovered", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs})
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); err != nil || n == 0 {
			t.Fatal(fmt.Sprint(n, " chunks, err ", err))
		}
	})
}
