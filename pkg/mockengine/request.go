package mockengine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// chatRequest is the part of a chat completion request the engine models.
// Unknown fields are ignored, as a real server does.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a string, an array of parts, or null. Decoding into any
	// avoids a custom unmarshaler, which would make encoding/json validate
	// every message twice.
	Content any `json:"content"`
}

// contentText flattens a message's content to the text the engine sees:
// text parts are concatenated, other parts (images, audio) stand in with
// their JSON, since they occupy the prompt too.
func contentText(i int, c any) (string, *openai.Error) {
	return partsText(fmt.Sprintf("messages[%d].content", i), c)
}

// partsText is contentText for any field: param names the field in errors.
// The flattening is prefixhash's prompt layout, shared with the gateway.
func partsText(param string, c any) (string, *openai.Error) {
	switch v := c.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []any:
		var sb strings.Builder
		for _, p := range v {
			part, ok := p.(map[string]any)
			if !ok {
				return "", openai.BadRequest(param, "invalid_type", "%s parts must be objects", param)
			}
			typ, _ := part["type"].(string)
			if text, ok := part["text"].(string); ok && prefixhash.IsTextPart(typ) {
				sb.WriteString(text)
				continue
			}
			_ = prefixhash.WriteJSON(&sb, part)
		}
		return sb.String(), nil
	default:
		return "", openai.BadRequest(param, "invalid_type", "%s must be a string, an array of parts or null", param)
	}
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is the part of a legacy completion request the engine
// models.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
}

// generation is what every generating endpoint hands the engine: the prompt
// bytes the KV cache sees, and how the reply extends them for the next turn.
type generation struct {
	kind         string // "chat", "completion" or "responses"
	model        string
	prompt       []byte
	stream       bool
	includeUsage bool
	maxTokens    *int
}

// parseChat decodes and validates a chat completion body.
func parseChat(body []byte) (*generation, *openai.Error) {
	var req chatRequest
	if e := openai.DecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if len(req.Messages) == 0 {
		return nil, openai.BadRequest("messages", "missing_field", "field \"messages\" is required and must be a non-empty array")
	}
	texts := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, openai.BadRequest("messages", "missing_field", "messages[%d].role is required", i)
		}
		t, e := contentText(i, m.Content)
		if e != nil {
			return nil, e
		}
		texts[i] = t
	}
	if e := checkModel(req.Model); e != nil {
		return nil, e
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	if e := checkMaxTokens(maxTokens); e != nil {
		return nil, e
	}
	return &generation{
		kind:         "chat",
		model:        req.Model,
		prompt:       renderChat(req.Tools, req.Messages, texts),
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		maxTokens:    maxTokens,
	}, nil
}

// parseCompletion decodes and validates a legacy completion body.
func parseCompletion(body []byte) (*generation, *openai.Error) {
	var req completionRequest
	if e := openai.DecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if e := checkModel(req.Model); e != nil {
		return nil, e
	}
	prompt, e := completionPrompt(req.Prompt)
	if e != nil {
		return nil, e
	}
	if e := checkMaxTokens(req.MaxTokens); e != nil {
		return nil, e
	}
	return &generation{
		kind:         "completion",
		model:        req.Model,
		prompt:       []byte(prompt),
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		maxTokens:    req.MaxTokens,
	}, nil
}

func checkModel(model string) *openai.Error {
	if strings.TrimSpace(model) == "" {
		return openai.BadRequest("model", "missing_field", "field \"model\" is required")
	}
	return nil
}

func checkMaxTokens(n *int) *openai.Error {
	if n != nil && *n < 1 {
		return openai.BadRequest("max_tokens", "invalid_value", "max_tokens must be >= 1, got %d", *n)
	}
	return nil
}

// completionPrompt accepts a string or an array holding exactly one string;
// token-id prompts and batches are out of the mock's scope and say so.
func completionPrompt(raw json.RawMessage) (string, *openai.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", openai.BadRequest("prompt", "missing_field", "field \"prompt\" is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var arr []string
	if err := json.Unmarshal(raw, &arr); err == nil && len(arr) == 1 {
		return arr[0], nil
	}
	return "", openai.BadRequest("prompt", "invalid_type", "field \"prompt\" must be a string or an array of exactly one string")
}

// renderChat lays a conversation out as the bytes the KV cache hashes, in
// prefixhash's prompt layout: the tools' JSON when present, then
// "role:content\n" per message. The reply is appended as
// "assistant:<text>\n" (replyBytes), which is exactly how the next turn
// renders once the client re-sends it, so that turn hits the blocks this one
// produced.
func renderChat(tools json.RawMessage, msgs []chatMessage, texts []string) []byte {
	n := len(tools) + 1
	for i, m := range msgs {
		n += len(m.Role) + len(texts[i]) + 2
	}
	b := bytes.NewBuffer(make([]byte, 0, n))
	prefixhash.WriteTools(b, tools)
	for i, m := range msgs {
		prefixhash.WriteMessage(b, m.Role, texts[i])
	}
	return b.Bytes()
}

// replyBytes is how a reply extends the prompt in the KV cache.
func (g *generation) replyBytes(text string) []byte {
	if g.kind == "completion" {
		return []byte(text)
	}
	b := bytes.NewBuffer(make([]byte, 0, len(text)+len(prefixhash.ReplyRole)+2))
	prefixhash.WriteMessage(b, prefixhash.ReplyRole, text)
	return b.Bytes()
}
