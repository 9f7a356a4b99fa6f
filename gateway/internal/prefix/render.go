package prefix

import (
	"github.com/valyala/fastjson"

	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// chat renders the tools (as the body spelled them) and every message.
func (s *scratch) chat(w prefixhash.Writer, c *request.ChatBody, body []byte) bool {
	if c.Tools != nil {
		prefixhash.WriteTools(w, member(body, "tools"))
	}
	for i := range c.Messages {
		m := &c.Messages[i]
		prefixhash.StartMessage(w, validText(m.Role))
		if !writeContent(w, &m.Content) {
			return false
		}
		prefixhash.EndMessage(w)
	}
	return true
}

// writeContent renders a chat message's content from the gateway's parse:
// text parts' text, every other part's JSON. Shapes the engine refuses (a
// part that is not an object, a content that is neither string, array nor
// null) give false.
func writeContent(w prefixhash.Writer, c *request.Content) bool {
	switch {
	case c.IsText:
		writeText(w, c.Text)
	case c.Raw != nil:
		return false
	}
	for i := range c.Parts {
		p := &c.Parts[i]
		if len(p.Raw) == 0 || p.Raw[0] != '{' {
			return false
		}
		if p.HasText && prefixhash.IsTextPart(p.Type) {
			writeText(w, p.Text)
			continue
		}
		if prefixhash.WriteRawJSON(w, p.Raw) != nil {
			return false
		}
	}
	return true
}

// responses renders the instructions, then the input: a string as one
// user message, an array item by item. The gateway's parse keeps neither
// whether instructions was present (an empty string still renders) nor
// each item's type, so those are read again here.
func (s *scratch) responses(w prefixhash.Writer, b *request.ResponsesBody, body []byte) bool {
	if raw := member(body, "instructions"); raw != nil && string(raw) != "null" {
		v, err := s.p.ParseBytes(raw)
		if err != nil || v.Type() != fastjson.TypeString {
			return false
		}
		text, _ := v.StringBytes()
		prefixhash.StartMessage(w, prefixhash.InstructionsRole)
		writeBytes(w, text)
		prefixhash.EndMessage(w)
	}
	if b.InputString != nil {
		prefixhash.StartMessage(w, prefixhash.InputRole)
		writeText(w, *b.InputString)
		prefixhash.EndMessage(w)
		return true
	}
	v, err := s.p.ParseBytes(b.Input)
	if err != nil {
		return false
	}
	items, err := v.Array()
	if err != nil || len(items) == 0 {
		return false
	}
	for _, it := range items {
		if !s.item(w, it) {
			return false
		}
	}
	return true
}

// item renders one Responses input item: a string is a user message, an
// object with a role and no type other than "message" is a message, any
// other object is its JSON on a line of its own.
func (s *scratch) item(w prefixhash.Writer, it *fastjson.Value) bool {
	switch it.Type() {
	case fastjson.TypeString:
		text, _ := it.StringBytes()
		prefixhash.StartMessage(w, prefixhash.InputRole)
		writeBytes(w, text)
		prefixhash.EndMessage(w)
		return true
	case fastjson.TypeObject:
	default:
		return false
	}
	role := it.Get("role")
	if role == nil || !isMessageType(it.Get("type")) {
		s.buf = it.MarshalTo(s.buf[:0])
		return prefixhash.WriteRawItem(w, s.buf) == nil
	}
	r, err := role.StringBytes()
	if err != nil || len(r) == 0 {
		return false
	}
	prefixhash.StartMessage(w, validText(string(r)))
	if !s.content(w, it.Get("content")) {
		return false
	}
	prefixhash.EndMessage(w)
	return true
}

// isMessageType reports whether an item's "type" leaves it a message:
// absent, not a string, empty or "message".
func isMessageType(t *fastjson.Value) bool {
	if t == nil || t.Type() != fastjson.TypeString {
		return true
	}
	b, _ := t.StringBytes()
	return len(b) == 0 || string(b) == "message"
}

// content is writeContent for a Responses item's content.
func (s *scratch) content(w prefixhash.Writer, c *fastjson.Value) bool {
	if c == nil {
		return true
	}
	switch c.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeString:
		text, _ := c.StringBytes()
		writeBytes(w, text)
		return true
	case fastjson.TypeArray:
	default:
		return false
	}
	parts, _ := c.Array()
	for _, p := range parts {
		if p.Type() != fastjson.TypeObject {
			return false
		}
		if t := p.Get("type"); t != nil && t.Type() == fastjson.TypeString {
			typ, _ := t.StringBytes()
			if tv := p.Get("text"); tv != nil && tv.Type() == fastjson.TypeString && prefixhash.IsTextPart(string(typ)) {
				text, _ := tv.StringBytes()
				writeBytes(w, text)
				continue
			}
		}
		s.buf = p.MarshalTo(s.buf[:0])
		if prefixhash.WriteRawJSON(w, s.buf) != nil {
			return false
		}
	}
	return true
}

// completion renders the prompt: a string, or an array of exactly one
// string, as the engine accepts it.
func (s *scratch) completion(w prefixhash.Writer, prompt []byte) bool {
	v, err := s.p.ParseBytes(prompt)
	if err != nil {
		return false
	}
	if v.Type() == fastjson.TypeArray {
		arr, _ := v.Array()
		if len(arr) != 1 {
			return false
		}
		v = arr[0]
	}
	text, err := v.StringBytes()
	if err != nil {
		return false
	}
	writeBytes(w, text)
	return true
}
