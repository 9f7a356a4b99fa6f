package request

import "unicode/utf8"

// Payload returns the bytes the payload-derived session hashes
// (docs/design/sessions.md#affinity-key): the chat messages re-marshalled in a fixed field order with
// omitempty rules (a content made of one text part marshals as a plain
// string), the Responses input always as an array (a string input becomes
// one user message), or the completions prompt. Strings use
// encoding/json's escaping, as upstream Stargate's gateway's typed
// re-marshal does, so both gateways derive the same key. It
// returns nil for embeddings, which have no session.
func (r *Request) Payload() []byte {
	switch r.Endpoint {
	case Responses:
		if r.Resp.InputString == nil {
			return r.Resp.Input
		}
	case Completions:
		return r.Prompt
	case Embeddings:
		return nil
	}
	b, _ := r.AppendPayload(nil)
	return b
}

// AppendPayload appends Payload's bytes to dst, so a caller that only
// hashes them can reuse one buffer across requests. anchorEnd is the
// index in b just past the conversation's first user message (chat
// messages, Responses input), where its anchor's bytes end
// (docs/design/sessions.md#conversation-anchor); -1 when it has none: no
// user message, or a completions prompt, which has no turns to tell
// apart. Whether a request is anchored at all is the caller's choice
// (Continues).
func (r *Request) AppendPayload(dst []byte) (b []byte, anchorEnd int) {
	anchorEnd = -1
	switch r.Endpoint {
	case Chat:
		if dst == nil {
			size := 2
			for i := range r.Chat.Messages {
				size += 64 + len(r.Chat.Messages[i].Content.Text)
			}
			dst = make([]byte, 0, size+size/16)
		}
		b = append(dst, '[')
		for i := range r.Chat.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			m := &r.Chat.Messages[i]
			b = appendMessage(b, m)
			if anchorEnd < 0 && m.Role == "user" {
				anchorEnd = len(b)
			}
		}
		return append(b, ']'), anchorEnd
	case Responses:
		if r.Resp.InputString != nil {
			b = append(dst, `[{"role":"user","content":`...)
			b = appendString(b, *r.Resp.InputString)
			b = append(b, '}')
			return append(b, ']'), len(b)
		}
		if r.Resp.AnchorEnd >= 0 {
			anchorEnd = len(dst) + r.Resp.AnchorEnd
		}
		return append(dst, r.Resp.Input...), anchorEnd
	case Completions:
		return append(dst, r.Prompt...), -1
	}
	return dst, -1
}

// jsonPlain[c] says whether encoding/json writes the ASCII byte c inside a
// string as it is: printable, and neither a quote, a backslash nor one of
// the HTML-sensitive <, > and &. Bytes from 0x80 up are false: they start
// a UTF-8 sequence and take the slow branch.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range []byte(`"\<>&`) {
		t[c] = false
	}
	return t
}()

// appendString appends s as encoding/json would (HTML-safe escaping,
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped), byte for byte:
// the payload key is a hash of these bytes, and another gateway derives
// it through encoding/json. Runs of plain bytes are copied whole; the
// fuzz target holds it to encoding/json's output.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default: // other control bytes, <, > and &
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n // a valid rune is written as it is
			continue
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

func appendMessage(b []byte, m *Message) []byte {
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	c := &m.Content
	switch {
	case c.IsText:
		b = append(b, `,"content":`...)
		b = appendString(b, c.Text)
	case len(c.Parts) == 1 && c.Parts[0].Type == "text" && c.Parts[0].HasText:
		b = append(b, `,"content":`...)
		b = appendString(b, c.Parts[0].Text)
	case len(c.Parts) > 0:
		b = append(b, `,"content":[`...)
		for i, p := range c.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, p.Raw...)
		}
		b = append(b, ']')
	case c.Raw != nil:
		b = append(b, `,"content":`...)
		b = append(b, c.Raw...)
	}
	if m.Name != nil {
		b = append(b, `,"name":`...)
		b = appendString(b, *m.Name)
	}
	if m.ToolCalls != nil {
		b = append(b, `,"tool_calls":`...)
		b = append(b, m.ToolCalls...)
	}
	for _, f := range []struct{ k, v string }{{"tool_call_id", m.ToolCallID}, {"reasoning", m.Reasoning}} {
		if f.v != "" {
			b = append(b, `,"`+f.k+`":`...)
			b = appendString(b, f.v)
		}
	}
	if m.FunctionCall != nil {
		b = append(b, `,"function_call":`...)
		b = append(b, m.FunctionCall...)
	}
	if m.Channel != "" {
		b = append(b, `,"channel":`...)
		b = appendString(b, m.Channel)
	}
	return append(b, '}')
}
