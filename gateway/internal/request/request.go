package request

import (
	"fmt"
	"strings"
	"sync"

	"github.com/valyala/fastjson"

	"github.com/stargate-router/stargate/pkg/openai"
)

// Endpoint is the API the body belongs to.
type Endpoint int

// The endpoints the gateway serves.
const (
	Chat Endpoint = iota
	Responses
	Completions
	Embeddings
)

// String returns the endpoint's name, used as a metric label.
func (e Endpoint) String() string {
	switch e {
	case Chat:
		return "chat_completions"
	case Responses:
		return "responses"
	case Completions:
		return "completions"
	default:
		return "embeddings"
	}
}

// Path returns the endpoint's API path, as routed and as sent to the hub.
func (e Endpoint) Path() string {
	switch e {
	case Chat:
		return "/v1/chat/completions"
	case Responses:
		return "/v1/responses"
	case Completions:
		return "/v1/completions"
	default:
		return "/v1/embeddings"
	}
}

// MaxEmbeddingInputs caps the entries of an embeddings input, as upstream
// Stargate's gateway does: OpenAI's own limit, so a client that works
// against OpenAI works here.
const MaxEmbeddingInputs = 2048

// Request is what the gateway reads from a body. Everything in it is a
// copy: the parse tree goes back to a pool as soon as Parse returns.
type Request struct {
	Endpoint Endpoint
	// Model is the body's model string as sent.
	Model string
	// Stream is the client's stream flag.
	Stream bool
	// IncludeUsage is the client's stream_options.include_usage.
	IncludeUsage bool
	// PromptCacheKey is the body's prompt_cache_key; nil when absent or
	// empty (an empty value falls through to the next source).
	PromptCacheKey *string
	// ConversationID is the Responses conversation id (object or string
	// form); nil when absent.
	ConversationID *string
	// MaxOutput is the requested output maximum, 0 when unset.
	MaxOutput int64

	// Chat holds the chat fields; nil for other endpoints.
	Chat *ChatBody
	// Resp holds the Responses fields.
	Resp *ResponsesBody
	// Prompt is the completions prompt (compact JSON).
	Prompt []byte
	// Inputs are the embeddings inputs, each compact JSON.
	Inputs [][]byte

	parser *fastjson.Parser
}

// parsers recycles fastjson parsers: a fresh one grows its value cache on
// every request, which costs more than the parse itself on large bodies.
var parsers sync.Pool

// release returns the parse tree's memory for reuse once every field the
// gateway keeps has been copied out of it.
func (r *Request) release() {
	if r.parser != nil {
		parsers.Put(r.parser)
		r.parser = nil
	}
}

// ChatBody is the subset of a chat request the estimate and the payload
// hash read. JSON-valued fields hold compact JSON, nil when absent.
type ChatBody struct {
	Messages        []Message
	Tools           []byte
	Functions       []byte
	ToolChoice      []byte
	FunctionCall    []byte
	ResponseFormat  []byte
	Metadata        []byte
	Stop            []byte
	User            string
	ReasoningFormat string
	ReasoningEffort string
}

// Message is one chat message (or Responses input message).
type Message struct {
	Role         string
	Content      Content
	Name         *string
	ToolCalls    []byte
	ToolCallID   string
	Reasoning    string
	FunctionCall []byte
	Channel      string
}

// Content is a message content: a string, an array of parts, or (rarely)
// any other JSON value.
type Content struct {
	// IsText is true when the content is a JSON string held in Text.
	IsText bool
	Text   string
	// Parts holds an array content.
	Parts []Part
	// Raw is the compact JSON of any other non-null shape.
	Raw []byte
}

// Part is one element of an array content.
type Part struct {
	// Type is the part's "type".
	Type string
	// Text is the part's "text" when it is a string (HasText).
	Text    string
	HasText bool
	// Raw is the part's compact JSON.
	Raw []byte
}

// ResponsesBody is the subset of a Responses request the gateway reads.
type ResponsesBody struct {
	// InputString is set when input is a string.
	InputString *string
	// Input is the compact JSON of an array input.
	Input []byte
	// Items are the array input's items: messages (Role set) or other
	// items (only Content.Raw set, holding the item's JSON).
	Items []Message
	// AnchorEnd is the length of Input's bytes up to and including the
	// first user message, -1 without one or for a string input.
	AnchorEnd int
	// Continues is set when previous_response_id is a non-empty string
	// (Request.Continues).
	Continues    bool
	Instructions string
	Tools        []byte
	ToolChoice   []byte
	Metadata     []byte
	User         string
}

// fieldErr is the 400 for a field of the wrong JSON type.
func fieldErr(field, want string) *openai.Error {
	return openai.BadRequest(field, "invalid_type", "field %q must be %s", field, want)
}

func str(v *fastjson.Value, field string) (string, bool, *openai.Error) {
	f := v.Get(field)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", false, nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", false, fieldErr(field, "a string")
	}
	return string(b), true, nil
}

func raw(v *fastjson.Value, field string) []byte {
	f := v.Get(field)
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil
	}
	return f.MarshalTo(nil)
}

func boolean(v *fastjson.Value, field string) (bool, *openai.Error) {
	f := v.Get(field)
	if f == nil || f.Type() == fastjson.TypeNull {
		return false, nil
	}
	b, err := f.Bool()
	if err != nil {
		return false, fieldErr(field, "a boolean")
	}
	return b, nil
}

// Parse decodes body for endpoint e in one pass (valyala/fastjson: the
// standard decoder costs several milliseconds on a 256 KiB chat body).
// Errors are 400s in the OpenAI shape naming the field.
func Parse(e Endpoint, body []byte) (*Request, *openai.Error) {
	if len(body) == 0 {
		return nil, openai.BadRequest("", "invalid_json", "request body is empty; expected a JSON object")
	}
	p, _ := parsers.Get().(*fastjson.Parser)
	if p == nil {
		p = &fastjson.Parser{}
	}
	root, err := p.ParseBytes(body)
	if err != nil {
		parsers.Put(p)
		return nil, openai.BadRequest("", "invalid_json", "request body is not valid JSON: %v", err)
	}
	r := &Request{Endpoint: e, parser: p}
	if root.Type() != fastjson.TypeObject {
		r.release()
		return nil, openai.BadRequest("", "invalid_json", "request body must be a JSON object")
	}
	r2, oe := r.parse(root)
	r.release()
	if oe != nil {
		return nil, oe
	}
	return r2, nil
}

func (r *Request) parse(root *fastjson.Value) (*Request, *openai.Error) {
	e := r.Endpoint
	model, ok, oe := str(root, "model")
	if oe != nil {
		return nil, oe
	}
	if !ok || model == "" {
		return nil, openai.BadRequest("model", "missing_field", "model is required")
	}
	// The model travels on as the hub's x-model header, where a control
	// byte would make the outbound request invalid (found by FuzzPrepare).
	if i := strings.IndexFunc(model, isControl); i >= 0 {
		return nil, openai.BadRequest("model", "invalid_value", "model must not contain control characters (byte %d is %#02x)", i, model[i])
	}
	r.Model = model
	if r.Stream, oe = boolean(root, "stream"); oe != nil {
		return nil, oe
	}
	if so := root.Get("stream_options"); so != nil && so.Type() == fastjson.TypeObject {
		if r.IncludeUsage, oe = boolean(so, "include_usage"); oe != nil {
			return nil, oe
		}
	}
	if e != Embeddings {
		pck, ok, oe := str(root, "prompt_cache_key")
		if oe != nil {
			return nil, oe
		}
		if ok && pck != "" {
			r.PromptCacheKey = &pck
		}
	}
	for _, f := range []string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		v := root.Get(f)
		if v == nil || v.Type() == fastjson.TypeNull {
			continue
		}
		n, err := v.Int64()
		if err != nil || n < 0 {
			return nil, openai.BadRequest(f, "invalid_value", "field %q must be a non-negative integer", f)
		}
		if r.MaxOutput == 0 {
			r.MaxOutput = n
		}
	}
	switch e {
	case Chat:
		oe = r.parseChat(root)
	case Responses:
		oe = r.parseResponses(root)
	case Completions:
		r.Prompt = raw(root, "prompt")
		if r.Prompt == nil {
			oe = openai.BadRequest("prompt", "missing_field", "prompt is required")
		}
	case Embeddings:
		oe = r.parseEmbeddings(root)
	}
	if oe != nil {
		return nil, oe
	}
	return r, nil
}

func (r *Request) parseChat(root *fastjson.Value) *openai.Error {
	c := &ChatBody{}
	msgs := root.Get("messages")
	if msgs == nil || msgs.Type() == fastjson.TypeNull {
		return openai.BadRequest("messages", "missing_field", "messages is required and must not be empty")
	}
	arr, err := msgs.Array()
	if err != nil {
		return fieldErr("messages", "an array")
	}
	if len(arr) == 0 {
		return openai.BadRequest("messages", "missing_field", "messages is required and must not be empty")
	}
	c.Messages = make([]Message, len(arr))
	for i, mv := range arr {
		if mv.Type() != fastjson.TypeObject {
			return fieldErr(fmt.Sprintf("messages[%d]", i), "an object")
		}
		if oe := parseMessage(mv, &c.Messages[i], fmt.Sprintf("messages[%d]", i)); oe != nil {
			return oe
		}
		if c.Messages[i].Role == "" {
			return openai.BadRequest("messages", "missing_field", "messages[%d].role is required", i)
		}
	}
	c.Tools, c.Functions, c.ToolChoice = raw(root, "tools"), raw(root, "functions"), raw(root, "tool_choice")
	c.FunctionCall, c.ResponseFormat, c.Metadata, c.Stop = raw(root, "function_call"), raw(root, "response_format"), raw(root, "metadata"), raw(root, "stop")
	var oe *openai.Error
	for _, f := range []struct {
		p    *string
		name string
	}{{&c.User, "user"}, {&c.ReasoningFormat, "reasoning_format"}, {&c.ReasoningEffort, "reasoning_effort"}} {
		if *f.p, _, oe = str(root, f.name); oe != nil {
			return oe
		}
	}
	r.Chat = c
	return nil
}

func parseMessage(mv *fastjson.Value, m *Message, where string) *openai.Error {
	var oe *openai.Error
	for _, f := range []struct {
		p    *string
		name string
	}{{&m.Role, "role"}, {&m.ToolCallID, "tool_call_id"}, {&m.Reasoning, "reasoning"}, {&m.Channel, "channel"}} {
		if *f.p, _, oe = str(mv, f.name); oe != nil {
			oe.Param = where + "." + f.name
			return oe
		}
	}
	if name, ok, oe := str(mv, "name"); oe != nil {
		return oe
	} else if ok {
		m.Name = &name
	}
	m.ToolCalls, m.FunctionCall = raw(mv, "tool_calls"), raw(mv, "function_call")
	cv := mv.Get("content")
	if cv == nil {
		return nil
	}
	switch cv.Type() {
	case fastjson.TypeNull:
	case fastjson.TypeString:
		b, _ := cv.StringBytes()
		m.Content.IsText, m.Content.Text = true, string(b)
	case fastjson.TypeArray:
		parts, _ := cv.Array()
		m.Content.Parts = make([]Part, len(parts))
		for i, pv := range parts {
			p := &m.Content.Parts[i]
			p.Raw = pv.MarshalTo(nil)
			if pv.Type() != fastjson.TypeObject {
				continue
			}
			if t := pv.Get("type"); t != nil {
				if b, err := t.StringBytes(); err == nil {
					p.Type = string(b)
				}
			}
			if t := pv.Get("text"); t != nil {
				if b, err := t.StringBytes(); err == nil {
					p.Text, p.HasText = string(b), true
				}
			}
		}
	default:
		m.Content.Raw = cv.MarshalTo(nil)
	}
	return nil
}

func (r *Request) parseResponses(root *fastjson.Value) *openai.Error {
	b := &ResponsesBody{}
	in := root.Get("input")
	if in == nil || in.Type() == fastjson.TypeNull {
		return openai.BadRequest("input", "missing_field", "input is required")
	}
	switch in.Type() {
	case fastjson.TypeString:
		s, _ := in.StringBytes()
		str := string(s)
		b.InputString = &str
	case fastjson.TypeArray:
		items, _ := in.Array()
		b.Items = make([]Message, len(items))
		b.AnchorEnd = -1
		// Input is laid out item by item, as fastjson marshals an array,
		// so the end of the first user message is known without a second
		// scan. Each item is marshalled before it is parsed: reading a
		// string unescapes it in place, and a later MarshalTo would then
		// re-escape it differently from the client's bytes.
		b.Input = []byte{'['}
		for i, it := range items {
			if i > 0 {
				b.Input = append(b.Input, ',')
			}
			b.Input = it.MarshalTo(b.Input)
			if it.Type() == fastjson.TypeObject && it.Get("role") != nil {
				if oe := parseMessage(it, &b.Items[i], fmt.Sprintf("input[%d]", i)); oe != nil {
					return oe
				}
				if b.Items[i].Role != "" {
					if b.Items[i].Role == "user" && b.AnchorEnd < 0 {
						b.AnchorEnd = len(b.Input)
					}
					continue
				}
			}
			b.Items[i] = Message{Content: Content{Raw: it.MarshalTo(nil)}}
		}
		b.Input = append(b.Input, ']')
	default:
		return fieldErr("input", "a string or an array")
	}
	if pr := root.Get("previous_response_id"); pr != nil && pr.Type() == fastjson.TypeString {
		id, _ := pr.StringBytes()
		b.Continues = len(id) > 0
	}
	if cv := root.Get("conversation"); cv != nil {
		switch cv.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			s, _ := cv.StringBytes()
			if len(s) > 0 {
				id := string(s)
				r.ConversationID = &id
			}
		case fastjson.TypeObject:
			id, _, oe := str(cv, "id")
			if oe != nil {
				oe.Param = "conversation.id"
				return oe
			}
			if id != "" {
				r.ConversationID = &id
			}
		default:
			return fieldErr("conversation", "a string or an object with an id")
		}
	}
	var oe *openai.Error
	if b.Instructions, _, oe = str(root, "instructions"); oe != nil {
		return oe
	}
	if b.User, _, oe = str(root, "user"); oe != nil {
		return oe
	}
	b.Tools, b.ToolChoice, b.Metadata = raw(root, "tools"), raw(root, "tool_choice"), raw(root, "metadata")
	r.Resp = b
	return nil
}

func (r *Request) parseEmbeddings(root *fastjson.Value) *openai.Error {
	in := root.Get("input")
	if in == nil || in.Type() == fastjson.TypeNull {
		return openai.BadRequest("input", "missing_field", "input is required")
	}
	var list [][]byte
	if in.Type() == fastjson.TypeArray {
		items, _ := in.Array()
		// An array of token ids is one input, not many.
		if len(items) > 0 && items[0].Type() == fastjson.TypeNumber {
			list = [][]byte{in.MarshalTo(nil)}
		} else {
			for _, it := range items {
				list = append(list, it.MarshalTo(nil))
			}
		}
	} else {
		list = [][]byte{in.MarshalTo(nil)}
	}
	if len(list) == 0 {
		return openai.BadRequest("input", "invalid_value", "input must not be empty")
	}
	if len(list) > MaxEmbeddingInputs {
		return openai.BadRequest("input", "invalid_value", "input holds %d entries; at most %d are allowed", len(list), MaxEmbeddingInputs)
	}
	for i, it := range list {
		if s := string(it); s == `""` || s == "[]" || s == "null" {
			return openai.BadRequest("input", "invalid_value", "input[%d] is empty", i)
		}
	}
	r.Inputs = list
	return nil
}

// SplitModel splits "<routing key>/<model>" on the first '/', so a model
// id that itself contains '/' survives. It reports the 400 for a missing
// prefix or an empty half.
func SplitModel(m string) (routingKey, model string, oe *openai.Error) {
	rk, rest, ok := strings.Cut(m, "/")
	switch {
	case !ok:
		return "", "", openai.BadRequest("model", "invalid_value", "model prefix is required (<routing-key>/<model>)")
	case rk == "":
		return "", "", openai.BadRequest("model", "invalid_value", "routing key is required before model")
	case rest == "":
		return "", "", openai.BadRequest("model", "invalid_value", "model suffix is required after routing key")
	}
	if len(rk) == 36 && isUUID(rk) {
		rk = strings.ToLower(rk)
	}
	return rk, rest, nil
}

// isControl reports the runes a header value cannot carry: C0 controls
// (tab included: no model name has one) and DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func isUUID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}

// Rewrite returns body with "stream": true (forceStream),
// stream_options.include_usage (usage) and, when model is non-empty,
// the model replaced. Every other member survives in its order and with
// its original bytes: the changed values are spliced into a copy of body
// (splice), and only a body splice leaves alone (a top-level key written
// with escapes) is parsed afresh and marshalled again. Callers skip it
// when nothing changes, so the common streaming request is forwarded
// exactly as sent.
func Rewrite(body []byte, forceStream, usage bool, model string) ([]byte, error) {
	if out, ok := splice(body, forceStream, usage, model); ok {
		return out, nil
	}
	return reencode(body, forceStream, usage, model)
}

// reencode is Rewrite by a fastjson tree: the body is parsed afresh
// rather than from Parse's tree, whose strings Parse unescaped
// (re-escaping them costs more than a second parse).
func reencode(body []byte, forceStream, usage bool, model string) ([]byte, error) {
	p, _ := parsers.Get().(*fastjson.Parser)
	if p == nil {
		p = &fastjson.Parser{}
	}
	defer parsers.Put(p)
	root, err := p.ParseBytes(body)
	if err != nil {
		return nil, err
	}
	if root.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("body is a JSON %s, not an object", root.Type())
	}
	var a fastjson.Arena
	if forceStream {
		root.Set("stream", a.NewTrue())
	}
	if usage {
		so := root.Get("stream_options")
		if so == nil || so.Type() != fastjson.TypeObject {
			so = a.NewObject()
		}
		so.Set("include_usage", a.NewTrue())
		root.Set("stream_options", so)
	}
	if model != "" {
		root.Set("model", a.NewString(model))
	}
	out := make([]byte, 0, len(body)+64)
	return root.MarshalTo(out), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Continues reports whether r is a Responses request continuing a stored
// response (a non-empty previous_response_id): its input holds only the
// turn after that response, and no later request re-sends it, so it has
// no conversation anchor
// (docs/design/sessions.md#conversation-anchor).
func (r *Request) Continues() bool { return r.Resp != nil && r.Resp.Continues }
