package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const demoModel = "demo-model"

// turnResult is what one streamed request reported.
type turnResult struct {
	conversation int
	turn         int
	cluster      string
	promptTokens int64
	cachedTokens int64
	ttft         time.Duration
	reply        string
	// seen is whether the conversation ran on this cluster before; last
	// whether its previous turn did.
	seen, last bool
}

// systemPrompt is a long, conversation-specific prefix (about 2k tokens at
// 4 characters per token), the kind of context a cache saves.
func systemPrompt(conv int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are assistant number %d. ", conv)
	for i := 0; b.Len() < 8_000; i++ {
		fmt.Fprintf(&b, "Rule %d.%d: keep a session where its KV cache is; a warm prefix prefills fast. ", conv, i)
	}
	return b.String()
}

// runConversations sends conversations one after another through the hub,
// each turn re-sending the whole history as a chat client does.
func runConversations(ctx context.Context, hubURL string, conversations, turns int) ([]turnResult, error) {
	client := openai.NewClient(option.WithBaseURL(hubURL+"/v1"), option.WithAPIKey("demo"), option.WithMaxRetries(0))
	var out []turnResult
	for c := 1; c <= conversations; c++ {
		msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(systemPrompt(c))}
		served := map[string]bool{}
		prev := ""
		for t := 1; t <= turns; t++ {
			msgs = append(msgs, openai.UserMessage(fmt.Sprintf("Question %d of conversation %d: why does routing matter?", t, c)))
			r, err := streamTurn(ctx, client, c, t, msgs)
			if err != nil {
				return out, err
			}
			r.seen, r.last = served[r.cluster], r.cluster == prev
			served[r.cluster], prev = true, r.cluster
			out = append(out, r)
			msgs = append(msgs, openai.AssistantMessage(r.reply))
		}
	}
	return out, nil
}

// estimateTokens is the gateway's rule of thumb (4 characters per token);
// the hub needs x-input-tokens on every request.
func estimateTokens(msgs []openai.ChatCompletionMessageParamUnion) int {
	n := 0
	for _, m := range msgs {
		if s := m.GetContent().AsAny(); s != nil {
			if str, ok := s.(*string); ok {
				n += len(*str)
			}
		}
	}
	return max(n/4, 1)
}

func streamTurn(ctx context.Context, client openai.Client, conv, turn int, msgs []openai.ChatCompletionMessageParamUnion) (turnResult, error) {
	var resp *http.Response
	start := time.Now()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         demoModel,
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	},
		option.WithHeader("x-request-id", fmt.Sprintf("demo-c%d-t%d-%d", conv, turn, start.UnixNano())),
		option.WithHeader("x-model", demoModel),
		option.WithHeader("x-input-tokens", itoa(estimateTokens(msgs))),
		option.WithResponseInto(&resp),
	)
	defer func() { _ = stream.Close() }()
	res := turnResult{conversation: conv, turn: turn}
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
		return res, fmt.Errorf("conversation %d turn %d: %w", conv, turn, err)
	}
	if resp != nil {
		res.cluster = resp.Header.Get("x-stargate-cluster-id")
	}
	res.reply = reply.String()
	return res, nil
}

func printResults(w io.Writer, rs []turnResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "conversation\tturn\tcluster\tprompt tokens\tcached tokens\tTTFT\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%s\t\n", r.conversation, r.turn, r.cluster, r.promptTokens, r.cachedTokens, r.ttft.Round(100*time.Microsecond))
	}
	_ = tw.Flush()
	var warm, cold, moved int
	var warmTTFT, coldTTFT time.Duration
	for _, r := range rs {
		if r.turn > 1 && !r.last {
			moved++
		}
		if r.cachedTokens > 0 {
			warm++
			warmTTFT += r.ttft
		} else {
			cold++
			coldTTFT += r.ttft
		}
	}
	fmt.Fprintf(w, "\n%d requests: %d started warm", len(rs), warm)
	if warm > 0 {
		fmt.Fprintf(w, " (mean TTFT %s)", (warmTTFT / time.Duration(warm)).Round(100*time.Microsecond))
	}
	fmt.Fprintf(w, ", %d cold", cold)
	if cold > 0 {
		fmt.Fprintf(w, " (mean TTFT %s)", (coldTTFT / time.Duration(cold)).Round(100*time.Microsecond))
	}
	fmt.Fprintf(w, "; %d follow-up turns moved to another cluster than their previous turn.\n", moved)
	fmt.Fprintln(w, "power-of-n does not know about sessions; the affinity algorithms keep them where their cache is.")
}

// verify states what the run must show: every turn served, a turn on the
// cluster of its previous turn hits the cache, a turn on a cluster the
// conversation never used misses it.
func verify(rs []turnResult) []string {
	var problems []string
	for _, r := range rs {
		id := fmt.Sprintf("conversation %d turn %d on %q", r.conversation, r.turn, r.cluster)
		switch {
		case r.cluster == "":
			problems = append(problems, id+": no x-stargate-cluster-id on the response")
		case r.last && r.cachedTokens == 0:
			problems = append(problems, id+": same cluster as the previous turn but no cached tokens")
		case !r.seen && r.cachedTokens != 0:
			problems = append(problems, fmt.Sprintf("%s: first visit of this conversation but %d cached tokens", id, r.cachedTokens))
		}
	}
	return problems
}
