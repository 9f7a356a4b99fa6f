package prefixhash

import (
	"bytes"
	"encoding/json"
	"io"
)

// The prompt layout: the bytes a request's prompt is hashed as, defined
// once here for the mock engine (which caches them) and the gateway (which
// summarises them), so the two cannot drift. It is a flat text rendering,
// not any model's chat template:
//
//   - chat: the request's tools JSON as sent, then a newline, when tools
//     is present and not null; then "role:content\n" per message
//     (WriteMessage), where a content of parts is the concatenation of its
//     text parts' text and, for every other part, its JSON (WriteJSON);
//   - Responses: "system:instructions\n" when instructions is set, then a
//     string input as one "user:" message, and each input item as a
//     message ("role:content\n", content as in chat), a string item as a
//     "user:" message, or any other item (function calls and their
//     outputs, references) as its JSON on a line of its own;
//   - completions: the prompt string itself.
//
// A reply extends a chat or Responses prompt as "assistant:text\n", which
// is how the next turn renders once the client re-sends it, so that turn's
// prefix is the previous prompt plus the reply.

// The roles the layout writes itself.
const (
	// InstructionsRole is the role Responses instructions render under.
	InstructionsRole = "system"
	// InputRole is the role of a Responses string input or string item.
	InputRole = "user"
	// ReplyRole is the role a generated reply renders under.
	ReplyRole = "assistant"
)

// Writer is what the layout renders into: a bytes.Buffer or strings.Builder
// where the prompt's bytes are needed (the mock engine), a *Hasher where
// only their hashes are (the gateway).
type Writer interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

var jsonNull = []byte("null")

// WriteTools writes a chat request's tools: the JSON exactly as the body
// spelled it, without surrounding whitespace, then a newline. Absent or
// null tools write nothing.
func WriteTools(w Writer, tools []byte) {
	t := bytes.TrimSpace(tools)
	if len(t) == 0 || bytes.Equal(t, jsonNull) {
		return
	}
	_, _ = w.Write(t)
	_ = w.WriteByte('\n')
}

// WriteMessage writes one message, "role:text\n".
func WriteMessage(w Writer, role, text string) {
	StartMessage(w, role)
	_, _ = w.WriteString(text)
	EndMessage(w)
}

// StartMessage writes the "role:" that opens a message whose content the
// caller writes in pieces (text parts, WriteJSON); EndMessage closes it.
func StartMessage(w Writer, role string) {
	_, _ = w.WriteString(role)
	_ = w.WriteByte(':')
}

// EndMessage writes the newline that ends a message or an item.
func EndMessage(w Writer) { _ = w.WriteByte('\n') }

// IsTextPart reports whether a content part of this "type" contributes its
// "text" (when that is a string) rather than its JSON.
func IsTextPart(typ string) bool {
	return typ == "text" || typ == "input_text" || typ == "output_text"
}

// WriteJSON writes v as encoding/json marshals it: object keys sorted, HTML
// characters escaped, numbers as float64. v is a content part or an input
// item as encoding/json decodes it into any; that decode-then-encode is
// what makes the bytes independent of how the client spelled the JSON.
func WriteJSON(w Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, _ = w.Write(b)
	return nil
}

// WriteRawJSON writes the JSON text raw as WriteJSON writes its decoded
// value: the path for a caller that parsed the body with another decoder.
func WriteRawJSON(w Writer, raw []byte) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return WriteJSON(w, v)
}

// WriteItem writes a Responses input item that is not a message: its JSON
// (WriteJSON) on a line of its own.
func WriteItem(w Writer, v any) error {
	if err := WriteJSON(w, v); err != nil {
		return err
	}
	EndMessage(w)
	return nil
}

// WriteRawItem is WriteItem for an item's JSON text (WriteRawJSON).
func WriteRawItem(w Writer, raw []byte) error {
	if err := WriteRawJSON(w, raw); err != nil {
		return err
	}
	EndMessage(w)
	return nil
}
