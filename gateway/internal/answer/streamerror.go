package answer

import (
	"encoding/json"

	"github.com/stargate-router/stargate/pkg/openai"
)

// ErrorEvent is the SSE event that ends a chat or completions stream the
// gateway could not finish: the OpenAI streaming error shape,
// data: {"error":{"message","type","code"}}. Every official OpenAI SDK
// (the Go ssestream decoder, Python and Node alike) raises an error for
// an event whose data has a top-level "error", so the client learns its
// answer was cut instead of taking the end of the body for the end of the
// answer.
func ErrorEvent(e *openai.Error) []byte {
	b, _ := json.Marshal(struct {
		Error *openai.Error `json:"error"`
	}{e})
	return sseEvent("", b)
}

// ResponsesErrorEvent is the Responses API's error event for a stream the
// gateway could not finish, numbered seq. It carries the error twice: the
// flat code, message and param the API reference documents for the event
// (typed Responses clients read those), and the nested "error" object the
// live API sends, which is what the SDKs' stream decoders raise on (the Go
// SDK returns a flat-only event as an ordinary event and Err stays nil).
func ResponsesErrorEvent(e *openai.Error, seq int64) []byte {
	b, _ := json.Marshal(struct {
		Type    string        `json:"type"`
		Seq     int64         `json:"sequence_number"`
		Code    string        `json:"code"`
		Message string        `json:"message"`
		Param   *string       `json:"param"`
		Error   *openai.Error `json:"error"`
	}{Type: "error", Seq: seq, Code: e.Code, Message: e.Message, Error: e})
	return sseEvent("error", b)
}

// sseEvent frames data (one line of JSON) as an SSE event, with an event
// field when typ is set.
func sseEvent(typ string, data []byte) []byte {
	out := make([]byte, 0, len(data)+len(typ)+16)
	if typ != "" {
		out = append(out, "event: "...)
		out = append(out, typ...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, data...)
	return append(out, '\n', '\n')
}
