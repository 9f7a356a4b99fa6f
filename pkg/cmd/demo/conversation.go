package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const demoModel = "demo-model"

// turnResult is what one streamed request reported.
type turnResult struct {
	label        string
	engine       string
	promptTokens int64
	cachedTokens int64
	ttft         time.Duration
	reply        string
}

// document stands in for a long system prompt (about 4k tokens at 4
// characters per token), the kind of prefix a cache saves.
func document() string {
	var b strings.Builder
	for i := 0; b.Len() < 16_000; i++ {
		fmt.Fprintf(&b, "Section %d. Routing keeps a session where its KV cache is; prefill of a warm prefix is cheap. ", i)
	}
	return b.String()
}

// twoTurns runs turn 1 on engine A, then turn 2 (which re-sends turn 1 and
// its reply) on A, where its prefix is cached, and on B, where it is not.
func twoTurns(ctx context.Context, urlA, urlB string) ([]turnResult, error) {
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(document()),
		openai.UserMessage("Summarise the routing rule in one sentence."),
	}
	t1, err := streamTurn(ctx, urlA, "A", "turn 1 (new session)", msgs)
	if err != nil {
		return nil, err
	}
	msgs = append(msgs, openai.AssistantMessage(t1.reply), openai.UserMessage("And why does it lower time to first token?"))
	warm, err := streamTurn(ctx, urlA, "A", "turn 2, same engine", msgs)
	if err != nil {
		return nil, err
	}
	cold, err := streamTurn(ctx, urlB, "B", "turn 2, other engine", msgs)
	if err != nil {
		return nil, err
	}
	return []turnResult{t1, warm, cold}, nil
}

func streamTurn(ctx context.Context, baseURL, engine, label string, msgs []openai.ChatCompletionMessageParamUnion) (turnResult, error) {
	client := openai.NewClient(option.WithBaseURL(baseURL+"/v1"), option.WithAPIKey("demo"), option.WithMaxRetries(0))
	start := time.Now()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         demoModel,
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer func() { _ = stream.Close() }()
	res := turnResult{label: label, engine: engine}
	var reply strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" && res.ttft == 0 {
				res.ttft = time.Since(start)
			}
			reply.WriteString(c.Delta.Content)
		}
		if chunk.Usage.PromptTokens > 0 {
			res.promptTokens = chunk.Usage.PromptTokens
			res.cachedTokens = chunk.Usage.PromptTokensDetails.CachedTokens
		}
	}
	if err := stream.Err(); err != nil {
		return res, fmt.Errorf("%s on engine %s: %w", label, engine, err)
	}
	res.reply = reply.String()
	return res, nil
}

func printResults(w io.Writer, rs []turnResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "request\tengine\tprompt tokens\tcached tokens\tTTFT\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t\n", r.label, r.engine, r.promptTokens, r.cachedTokens, r.ttft.Round(100*time.Microsecond))
	}
	_ = tw.Flush()
}

// verdict reports whether the run showed the effect: the warm turn hit the
// cache and the cold one did not.
func verdict(rs []turnResult) bool {
	return len(rs) == 3 && rs[0].cachedTokens == 0 && rs[1].cachedTokens > 0 && rs[2].cachedTokens == 0
}
