package answer

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
)

// ErrEmptyStream means the upstream stream carried no chunk with choices;
// the gateway answers 502, since it has nothing to build an answer from.
var ErrEmptyStream = errors.New("upstream stream carried no choices")

// ErrNoTerminal means a Responses stream ended without a terminal event.
var ErrNoTerminal = errors.New("responses stream ended without a terminal response event")

// UpstreamError is an error event in a chat stream (data with a top-level
// "error", as vLLM and OpenAI send when generation fails mid-stream): the
// answer is not whole, so it must not be aggregated into one.
type UpstreamError struct {
	// Message is the event's error message, or its raw error value when
	// that has no message.
	Message string
}

func (e *UpstreamError) Error() string { return "upstream stream error: " + e.Message }

// upstreamError reads an error event's "error" value: an object with a
// message, or anything else taken as it is.
func upstreamError(raw json.RawMessage) *UpstreamError {
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return &UpstreamError{Message: obj.Message}
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return &UpstreamError{Message: str}
	}
	return &UpstreamError{Message: string(raw)}
}

type chunk struct {
	ID                string          `json:"id"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	ServiceTier       *string         `json:"service_tier"`
	Usage             json.RawMessage `json:"usage"`
	Choices           []chunkChoice   `json:"choices"`
	Error             json.RawMessage `json:"error"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
	Text         string          `json:"text"`
	Delta        struct {
		Role             string          `json:"role"`
		Content          *string         `json:"content"`
		ReasoningContent string          `json:"reasoning_content"`
		Reasoning        string          `json:"reasoning"`
		Refusal          *string         `json:"refusal"`
		FunctionCall     *functionCall   `json:"function_call"`
		ToolCalls        []toolCallDelta `json:"tool_calls"`
	} `json:"delta"`
	// content holds Delta.Content's string when chunkScan decoded it,
	// so a content piece costs no allocation of its own.
	content string
}

type functionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type toolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type choiceAcc struct {
	role            string
	content         strings.Builder
	hasContent      bool
	reasoning       strings.Builder
	refusal         *strings.Builder
	finish          *string
	fc              *functionCall
	tools           map[int]*toolCallDelta
	logprobsContent []json.RawMessage
}

// ChatAggregator folds chat.completion.chunk events into one
// chat.completion, as upstream Stargate's gateway does
// (docs/gateway.md#non-streaming-answers): the first chunk gives id,
// created and fingerprint; content, reasoning and refusals are
// concatenated per choice; tool calls are merged per index (first
// non-empty id/type/name wins, arguments are concatenated); usage is the
// last chunk's.
type ChatAggregator struct {
	started     bool
	id          string
	created     int64
	model       string
	fingerprint *string
	tier        *string
	usage       json.RawMessage
	choices     map[int]*choiceAcc
	output      bool
	// scratch is the decode target of every chunk chunkScan reads, its
	// choices reused from chunk to chunk.
	scratch chunk
}

// Add folds one event's data in. Unparseable data is an error (the
// stream is corrupt), and so is an error event (*UpstreamError). data is
// not kept: it may be reused once Add returns.
func (a *ChatAggregator) Add(data []byte) error {
	c, err := a.decode(data)
	if err != nil {
		return err
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return upstreamError(c.Error)
	}
	if !a.started {
		a.started = true
		a.id, a.created, a.model, a.fingerprint, a.tier = c.ID, c.Created, c.Model, c.SystemFingerprint, c.ServiceTier
		a.choices = map[int]*choiceAcc{}
	}
	if len(c.Usage) > 0 && string(c.Usage) != "null" {
		a.usage = c.Usage
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		a.output = a.output || ch.carriesOutput()
		a.choice(ch.Index).add(ch)
	}
	return nil
}

// decode reads one chunk: by chunkScan, or by encoding/json for what
// chunkScan refuses, which also says why data is not a chunk.
func (a *ChatAggregator) decode(data []byte) (*chunk, error) {
	a.scratch = chunk{Choices: a.scratch.Choices[:0]}
	d := chunkScan{b: data, c: &a.scratch, header: !a.started}
	if d.scan() {
		return &a.scratch, nil
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Output reports whether any chunk added so far carried generated output,
// by the rule Inspect applies to a streamed chunk, so the gateway can time
// the first token of an aggregated answer without parsing chunks twice.
func (a *ChatAggregator) Output() bool { return a.output }

// carriesOutput is Inspect's output rule for one choice of a chunk.
func (ch *chunkChoice) carriesOutput() bool {
	d := &ch.Delta
	return ch.Text != "" || (d.Content != nil && *d.Content != "") || d.ReasoningContent != "" || len(d.ToolCalls) > 0
}

// choice returns the accumulator of choice index, created on first use.
func (a *ChatAggregator) choice(index int) *choiceAcc {
	acc := a.choices[index]
	if acc == nil {
		acc = &choiceAcc{tools: map[int]*toolCallDelta{}}
		a.choices[index] = acc
	}
	return acc
}

// add folds one chunk's delta for this choice in.
func (acc *choiceAcc) add(ch *chunkChoice) {
	d := &ch.Delta
	if d.Role != "" && acc.role == "" {
		acc.role = d.Role
	}
	if d.Content != nil {
		acc.content.WriteString(*d.Content)
		acc.hasContent = true
	}
	if ch.Text != "" {
		acc.content.WriteString(ch.Text)
		acc.hasContent = true
	}
	acc.reasoning.WriteString(d.ReasoningContent)
	acc.reasoning.WriteString(d.Reasoning)
	if d.Refusal != nil {
		if acc.refusal == nil {
			acc.refusal = &strings.Builder{}
		}
		acc.refusal.WriteString(*d.Refusal)
	}
	if d.FunctionCall != nil {
		if acc.fc == nil {
			acc.fc = &functionCall{}
		}
		if acc.fc.Name == "" {
			acc.fc.Name = d.FunctionCall.Name
		}
		acc.fc.Arguments += d.FunctionCall.Arguments
	}
	for i := range d.ToolCalls {
		acc.addToolCall(&d.ToolCalls[i])
	}
	if ch.FinishReason != nil {
		acc.finish = ch.FinishReason
	}
	if lp := logprobContent(ch.Logprobs); lp != nil {
		acc.logprobsContent = append(acc.logprobsContent, lp...)
	}
}

// addToolCall merges a tool-call delta by its index: the first non-empty
// id, type and name win, arguments are concatenated.
func (acc *choiceAcc) addToolCall(tc *toolCallDelta) {
	t := acc.tools[tc.Index]
	if t == nil {
		t = &toolCallDelta{Index: tc.Index}
		acc.tools[tc.Index] = t
	}
	if t.ID == "" {
		t.ID = tc.ID
	}
	if t.Type == "" {
		t.Type = tc.Type
	}
	if t.Function.Name == "" {
		t.Function.Name = tc.Function.Name
	}
	t.Function.Arguments += tc.Function.Arguments
}

func logprobContent(raw json.RawMessage) []json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var lp struct {
		Content []json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &lp)
	return lp.Content
}

// Usage is the raw usage of the last chunk that carried one.
func (a *ChatAggregator) Usage() json.RawMessage { return a.usage }

// The shapes of the aggregated answer.
type (
	outToolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function functionCall `json:"function"`
	}
	outMessage struct {
		Role             string        `json:"role"`
		Content          *string       `json:"content"`
		ReasoningContent string        `json:"reasoning_content,omitempty"`
		Refusal          *string       `json:"refusal,omitempty"`
		FunctionCall     *functionCall `json:"function_call,omitempty"`
		ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
	}
	outChoice struct {
		Index        int             `json:"index"`
		Message      *outMessage     `json:"message,omitempty"`
		Text         *string         `json:"text,omitempty"`
		FinishReason *string         `json:"finish_reason"`
		Logprobs     json.RawMessage `json:"logprobs"`
	}
	completion struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
		ServiceTier       *string         `json:"service_tier,omitempty"`
		Choices           []outChoice     `json:"choices"`
		Usage             json.RawMessage `json:"usage,omitempty"`
	}
)

// Result returns the chat.completion JSON. model, when non-empty,
// replaces the upstream model (the client's original string, with its
// routing-key prefix). object is "chat.completion" or "text_completion".
func (a *ChatAggregator) Result(model, object string) ([]byte, error) {
	if !a.started || len(a.choices) == 0 {
		return nil, ErrEmptyStream
	}
	if model == "" {
		model = a.model
	}
	out := completion{ID: a.id, Object: object, Created: a.created, Model: model,
		SystemFingerprint: a.fingerprint, ServiceTier: a.tier, Usage: a.usage}
	for _, i := range slices.Sorted(maps.Keys(a.choices)) {
		out.Choices = append(out.Choices, a.choices[i].result(i, object))
	}
	return json.Marshal(out)
}

// result is the accumulated choice: its text for a text_completion, its
// message otherwise.
func (acc *choiceAcc) result(index int, object string) outChoice {
	c := outChoice{Index: index, FinishReason: acc.finish, Logprobs: json.RawMessage("null")}
	if len(acc.logprobsContent) > 0 {
		b, _ := json.Marshal(map[string]any{"content": acc.logprobsContent})
		c.Logprobs = b
	}
	text := acc.content.String()
	if object == "text_completion" {
		c.Text = &text
		return c
	}
	c.Message = acc.message(&text)
	return c
}

// message is the assistant message: role (assistant by default), content
// (null for a pure tool call), reasoning, refusal, the legacy function
// call and the tool calls sorted by index (type "function" by default).
func (acc *choiceAcc) message(text *string) *outMessage {
	m := &outMessage{Role: acc.role, ReasoningContent: acc.reasoning.String(), FunctionCall: acc.fc}
	if m.Role == "" {
		m.Role = "assistant"
	}
	if acc.hasContent || len(acc.tools) == 0 {
		m.Content = text
	}
	if acc.refusal != nil {
		r := acc.refusal.String()
		m.Refusal = &r
	}
	for _, ti := range slices.Sorted(maps.Keys(acc.tools)) {
		t := acc.tools[ti]
		typ := t.Type
		if typ == "" {
			typ = "function"
		}
		m.ToolCalls = append(m.ToolCalls, outToolCall{ID: t.ID, Type: typ, Function: t.Function})
	}
	return m
}

// Terminal returns the response object of a Responses terminal event
// (response.completed, response.failed, response.incomplete); ok is false
// for any other event.
func Terminal(data []byte) (json.RawMessage, bool) {
	var ev struct {
		Type     string          `json:"type"`
		Response json.RawMessage `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return nil, false
	}
	switch ev.Type {
	case "response.completed", "response.failed", "response.incomplete":
		return ev.Response, len(ev.Response) > 0
	}
	return nil, false
}
