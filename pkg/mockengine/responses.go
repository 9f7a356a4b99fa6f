package mockengine

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/stargate-router/stargate/pkg/openai"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// responsesRequest is the part of a Responses API request the engine models.
// Unknown fields (tools, previous_response_id, reasoning, …) are ignored.
type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

// parseResponses decodes and validates a Responses body. The prompt renders
// exactly as chat does ("role:content\n" per message, instructions first as
// "system:"), so a conversation that re-sends its previous output as an
// assistant message hits the cache as a chat conversation would; items that
// are not messages (function calls and their outputs, references) occupy the
// prompt as their JSON text on a line of their own.
func parseResponses(body []byte) (*generation, *openai.Error) {
	var req responsesRequest
	if e := openai.DecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if e := checkModel(req.Model); e != nil {
		return nil, e
	}
	var b bytes.Buffer
	if req.Instructions != nil {
		prefixhash.WriteMessage(&b, prefixhash.InstructionsRole, *req.Instructions)
	}
	if e := writeResponsesInput(&b, req.Input); e != nil {
		return nil, e
	}
	if n := req.MaxOutputTokens; n != nil && *n < 1 {
		return nil, openai.BadRequest("max_output_tokens", "invalid_value", "max_output_tokens must be >= 1, got %d", *n)
	}
	return &generation{
		kind:      "responses",
		model:     req.Model,
		prompt:    b.Bytes(),
		stream:    req.Stream,
		maxTokens: req.MaxOutputTokens,
	}, nil
}

// writeResponsesInput renders input in prefixhash's prompt layout: a string
// is one user message; an array holds items.
func writeResponsesInput(b *bytes.Buffer, raw json.RawMessage) *openai.Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return openai.BadRequest("input", "missing_field", "field \"input\" is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		prefixhash.WriteMessage(b, prefixhash.InputRole, s)
		return nil
	}
	var items []any
	if err := json.Unmarshal(raw, &items); err != nil {
		return openai.BadRequest("input", "invalid_type", "field \"input\" must be a string or an array of items")
	}
	if len(items) == 0 {
		return openai.BadRequest("input", "missing_field", "field \"input\" must be a non-empty string or array")
	}
	for i, it := range items {
		switch v := it.(type) {
		case string:
			prefixhash.WriteMessage(b, prefixhash.InputRole, v)
		case map[string]any:
			role, hasRole := v["role"]
			typ, _ := v["type"].(string)
			if !hasRole || (typ != "" && typ != "message") {
				_ = prefixhash.WriteItem(b, v)
				continue
			}
			r, ok := role.(string)
			if !ok || r == "" {
				return openai.BadRequest(fmt.Sprintf("input[%d].role", i), "invalid_type", "input[%d].role must be a non-empty string", i)
			}
			text, e := partsText(fmt.Sprintf("input[%d].content", i), v["content"])
			if e != nil {
				return e
			}
			prefixhash.WriteMessage(b, r, text)
		default:
			return openai.BadRequest(fmt.Sprintf("input[%d]", i), "invalid_type", "input[%d] must be an object or a string", i)
		}
	}
	return nil
}

// responsesUsage is the Responses API usage object.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	TotalTokens        int `json:"total_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// messageID is the id of a response's one output message.
func (r *run) messageID() string { return "msg-" + r.requestID }

// responseObject is the Responses API response: in progress (no output, no
// usage) or completed with the text generated.
func (r *run) responseObject(created int64, completed bool, text string, generated int) map[string]any {
	obj := map[string]any{
		"id": r.requestID, "object": "response", "created_at": created, "model": r.g.model,
		"status": "in_progress", "output": []any{}, "usage": nil, "error": nil, "incomplete_details": nil,
		"parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
	}
	if r.g.maxTokens != nil {
		obj["max_output_tokens"] = *r.g.maxTokens
	}
	if !completed {
		return obj
	}
	u := &responsesUsage{InputTokens: r.promptTokens, OutputTokens: generated, TotalTokens: r.promptTokens + generated}
	u.InputTokensDetails.CachedTokens = r.cachedTokens
	obj["status"] = "completed"
	obj["usage"] = u
	obj["output"] = []any{map[string]any{
		"type": "message", "id": r.messageID(), "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
	}}
	return obj
}

// streamResponses sends a Responses stream (docs/mock-engine.md#responses):
// named events response.created at once, one response.output_text.delta
// per token, then response.completed with the whole output and usage; no
// [DONE]. It returns the tokens that reached the client.
func (r *run) streamResponses() int {
	rc, ok := r.startSSE()
	if !ok || r.dropNow(0) {
		return 0
	}
	created := r.e.clock.Now().Unix()
	seq := 0
	send := func(typ string, payload map[string]any) bool {
		payload["type"] = typ
		payload["sequence_number"] = seq
		seq++
		b, err := json.Marshal(payload)
		if err != nil {
			return false
		}
		buf := make([]byte, 0, len(b)+len(typ)+16)
		buf = append(buf, "event: "...)
		buf = append(buf, typ...)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
		if _, err := r.w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("response.created", map[string]any{"response": r.responseObject(created, false, "", 0)}) {
		return 0
	}
	if !r.sleep(r.firstTokenDelay()) {
		return 0
	}
	r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, 0, false)
	sent := 0
	for i, tok := range r.tokens {
		if i > 0 && !r.sleep(r.tokenDelay(i)) {
			return sent
		}
		if !send("response.output_text.delta", map[string]any{
			"response_id": r.requestID, "item_id": r.messageID(), "output_index": 0, "content_index": 0,
			"delta": tok, "logprobs": []any{},
		}) {
			return sent
		}
		sent++
		if i == 0 {
			r.e.metrics.ttft.Observe(r.e.clock.Since(r.arrived).Seconds())
		}
		r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, sent, false)
		if r.dropNow(sent) {
			return sent
		}
	}
	if !send("response.completed", map[string]any{"response": r.responseObject(created, true, joinTokens(r.tokens), sent)}) {
		return sent
	}
	r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, sent, true)
	return sent
}
