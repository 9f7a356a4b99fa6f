package estimate

import (
	"bytes"
	"encoding/json"

	"github.com/stargate-router/stargate/gateway/internal/request"
)

// Text is est(s): 0 for the empty string, else 5 + ceil(len(s)/4).
func Text(s string) int64 {
	if s == "" {
		return 0
	}
	return 5 + int64((len(s)+3)/4)
}

// JSON is est over a raw JSON value: 0 when absent or null, else Text of
// its compact encoding.
func JSON(raw []byte) int64 {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	return 5 + int64((compactLen(raw)+3)/4)
}

// compactLen is the length of raw without insignificant whitespace,
// without allocating a compacted copy.
func compactLen(raw []byte) int {
	n, inStr, esc := 0, false, false
	for _, c := range raw {
		switch {
		case inStr:
			n++
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
			n++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			n++
		}
	}
	return n
}

// Input is the input-token estimate of r
// (docs/design/sessions.md#token-estimate).
func Input(r *request.Request) int64 {
	switch r.Endpoint {
	case request.Chat:
		return chat(r.Chat)
	case request.Responses:
		return responses(r.Resp)
	case request.Completions:
		return promptTokens(r.Prompt)
	default:
		var n int64
		for _, in := range r.Inputs {
			n += promptTokens(in)
		}
		return n
	}
}

// promptTokens estimates a string, or an array of strings or token ids.
func promptTokens(raw []byte) int64 {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return Text(s)
		}
	}
	if len(raw) > 0 && raw[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			var n int64
			for _, it := range list {
				it = bytes.TrimSpace(it)
				if len(it) > 0 && it[0] == '"' {
					n += promptTokens(it)
				} else {
					n++ // one token id
				}
			}
			return n
		}
	}
	return JSON(raw)
}

func chat(c *request.ChatBody) int64 {
	var n int64
	for i := range c.Messages {
		n += message(&c.Messages[i])
	}
	n += JSON(c.Tools) + JSON(c.Functions) + JSON(c.ToolChoice) + JSON(c.FunctionCall) + JSON(c.ResponseFormat) + JSON(c.Metadata)
	n += stop(c.Stop) + Text(c.User) + Text(c.ReasoningFormat) + Text(c.ReasoningEffort)
	return n
}

func message(m *request.Message) int64 {
	n := int64(3 + 2)
	n += content(&m.Content)
	if m.Name != nil {
		n += Text(*m.Name) + 1
	}
	n += Text(m.ToolCallID) + Text(m.Reasoning) + Text(m.Channel) + JSON(m.ToolCalls) + JSON(m.FunctionCall)
	return n
}

// content counts text as floor(len/4) with no +5, and other parts as est
// of their JSON, as upstream Stargate's gateway does so the hub sees the
// same estimates behind either gateway.
func content(c *request.Content) int64 {
	switch {
	case c.IsText:
		return int64(len(c.Text) / 4)
	case c.Parts != nil:
		var n int64
		for i := range c.Parts {
			p := &c.Parts[i]
			if p.HasText && (p.Type == "text" || p.Type == "input_text" || p.Type == "output_text") {
				n += int64(len(p.Text) / 4)
			} else {
				n += JSON(p.Raw)
			}
		}
		return n
	}
	return JSON(c.Raw)
}

func stop(raw []byte) int64 {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return Text(s)
	}
	var list []string
	_ = json.Unmarshal(raw, &list)
	var n int64
	for _, s := range list {
		n += Text(s)
	}
	return n
}

// responses estimates the Responses request as upstream Stargate's gateway
// does, through the chat request it would convert it to: instructions as a
// system message, input items as messages, plus est("auto") for the
// reasoning_format that conversion sets.
func responses(r *request.ResponsesBody) int64 {
	n := JSON(r.Tools) + JSON(r.ToolChoice) + JSON(r.Metadata) + Text(r.User) + Text("auto")
	if r.Instructions != "" {
		n += 5 + int64(len(r.Instructions)/4)
	}
	if r.InputString != nil {
		return n + 5 + int64(len(*r.InputString)/4)
	}
	for i := range r.Items {
		if m := &r.Items[i]; m.Role != "" {
			n += message(m)
		} else {
			n += 5 + JSON(m.Content.Raw)
		}
	}
	return n
}

// MaxOutput is the output reservation: the request's maximum, else def
// (--rate-limit-default-max-output-tokens, 1 by default: an unknown
// output is charged when usage arrives rather than guessed up front).
func MaxOutput(r *request.Request, def int64) int64 {
	if r.MaxOutput > 0 {
		return r.MaxOutput
	}
	return def
}
