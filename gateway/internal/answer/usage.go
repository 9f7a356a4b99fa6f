package answer

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fastjson"
)

// Usage is token usage as the backend reported it.
type Usage struct {
	Prompt, Completion, Total, Cached int64
	// Phases are the provider times the backend reported in the usage
	// (the Groq-style queue_time, prompt_time and completion_time, in
	// seconds), in that order, only those present and >= 0.
	Phases []PhaseTime
}

// PhaseTime is one provider-time phase of a usage object.
type PhaseTime struct {
	// Phase is queue, prompt or completion.
	Phase   string
	Seconds float64
}

type wireUsage struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	InputTokens         *int64 `json:"input_tokens"`
	OutputTokens        *int64 `json:"output_tokens"`
	TotalTokens         *int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	QueueTime      *float64 `json:"queue_time"`
	PromptTime     *float64 `json:"prompt_time"`
	CompletionTime *float64 `json:"completion_time"`
}

// ParseUsage reads a chat/completions/embeddings or Responses usage
// object; ok is false when raw holds none.
func ParseUsage(raw json.RawMessage) (Usage, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return Usage{}, false
	}
	var w wireUsage
	if json.Unmarshal(raw, &w) != nil {
		return Usage{}, false
	}
	var u Usage
	switch {
	case w.PromptTokens != nil:
		u.Prompt = *w.PromptTokens
	case w.InputTokens != nil:
		u.Prompt = *w.InputTokens
	default:
		return Usage{}, false
	}
	if w.CompletionTokens != nil {
		u.Completion = *w.CompletionTokens
	} else if w.OutputTokens != nil {
		u.Completion = *w.OutputTokens
	}
	u.Total = u.Prompt + u.Completion
	if w.TotalTokens != nil {
		u.Total = *w.TotalTokens
	}
	if w.PromptTokensDetails != nil {
		u.Cached = w.PromptTokensDetails.CachedTokens
	} else if w.InputTokensDetails != nil {
		u.Cached = w.InputTokensDetails.CachedTokens
	}
	for _, p := range [...]struct {
		name string
		v    *float64
	}{{"queue", w.QueueTime}, {"prompt", w.PromptTime}, {"completion", w.CompletionTime}} {
		if p.v != nil && *p.v >= 0 {
			u.Phases = append(u.Phases, PhaseTime{Phase: p.name, Seconds: *p.v})
		}
	}
	return u, true
}

// BodyUsage reads the top-level usage of a JSON response body.
func BodyUsage(body []byte) (Usage, bool) {
	var env struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(body, &env) != nil {
		return Usage{}, false
	}
	return ParseUsage(env.Usage)
}

// EventInfo is what one streamed event tells the gateway.
type EventInfo struct {
	// Usage is set when the event carried usage (chat's final chunk, the
	// Responses terminal event).
	Usage *Usage
	// Output is true when the event carries generated output (for the
	// first-token metric).
	Output bool
	// Terminal is true for response.completed / failed / incomplete.
	Terminal bool
	// UsageOnly is true for chat's final usage chunk (usage, no choices),
	// which the gateway drops when it asked for usage on the client's
	// behalf.
	UsageOnly bool
	// Error is true for an error event: data with a non-null top-level
	// "error" (what the OpenAI SDKs treat as a stream error) or a
	// Responses event of type "error". The client has then been told the
	// stream failed, so the gateway adds no error event of its own.
	Error bool
	// Seq is the event's sequence_number (Responses events carry one),
	// 0 when absent; the gateway numbers an error event it adds after it.
	Seq int64
}

// eventFields are the members of an event Inspect reads.
type eventFields struct {
	Type     string          `json:"type"`
	Usage    json.RawMessage `json:"usage"`
	Response *struct {
		Usage json.RawMessage `json:"usage"`
	} `json:"response"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Delta string          `json:"delta"`
	Error json.RawMessage `json:"error"`
	// Seq stays raw so that an odd value costs only itself, not the
	// rest of what the event tells.
	Seq json.RawMessage `json:"sequence_number"`
}

// Inspect reads one event's data. It tolerates anything: an event it
// cannot parse tells it nothing. The common events are read by
// inspectScan, the rest by encoding/json, with the same result.
func Inspect(data []byte) EventInfo {
	if info, ok := inspectScan(data); ok {
		return info
	}
	return inspectJSON(data)
}

// inspectJSON is Inspect by encoding/json.
func inspectJSON(data []byte) EventInfo {
	var ev eventFields
	if json.Unmarshal(data, &ev) != nil {
		return EventInfo{}
	}
	output := false
	for _, c := range ev.Choices {
		if c.Text != "" || c.Delta.Content != "" || c.Delta.ReasoningContent != "" || len(c.Delta.ToolCalls) > 0 {
			output = true
		}
	}
	var respUsage json.RawMessage
	if ev.Response != nil {
		respUsage = ev.Response.Usage
	}
	return eventInfo(ev.Type, ev.Usage, respUsage, ev.Delta, ev.Error, ev.Seq, len(ev.Choices), output)
}

// eventInfo is what an event's members tell: its type, usage, the usage
// of its response, its top-level delta, error and sequence number, how
// many choices it has and whether one carries output.
func eventInfo(typ string, usage, respUsage json.RawMessage, delta string, errv, seq json.RawMessage, choices int, output bool) EventInfo {
	var info EventInfo
	info.Seq, _ = strconv.ParseInt(string(seq), 10, 64)
	info.Error = typ == "error" || len(errv) > 0 && string(errv) != "null"
	if u, ok := ParseUsage(usage); ok {
		info.Usage = &u
		info.UsageOnly = choices == 0 && typ == ""
	}
	switch typ {
	case "response.completed", "response.failed", "response.incomplete":
		info.Terminal = true
		if u, ok := ParseUsage(respUsage); ok {
			info.Usage = &u
		}
	case "response.output_text.delta":
		info.Output = delta != ""
	}
	info.Output = info.Output || output
	return info
}

// WithModel returns the SSE event "data: <data with model replaced>\n\n";
// ok is false when data is not a JSON object with a model.
func WithModel(data []byte, model string) ([]byte, bool) {
	var p fastjson.Parser
	v, err := p.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject || v.Get("model") == nil {
		return nil, false
	}
	var a fastjson.Arena
	v.Set("model", a.NewString(model))
	out := append([]byte("data: "), v.MarshalTo(nil)...)
	return append(out, '\n', '\n'), true
}
