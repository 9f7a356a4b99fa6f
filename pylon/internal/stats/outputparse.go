package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// chunkTokens is what one response chunk says about output tokens
// (pylon.md §2.4).
type chunkTokens struct {
	// explicit is a cumulative counter from usage.completion_tokens,
	// output_tokens_so_far or response.usage.output_tokens (first found, in
	// that order); hasExplicit reports that one was present.
	explicit    uint64
	hasExplicit bool
	// words counts whitespace-separated words in choices[].delta.content
	// (summed over choices) and in a top-level string delta.
	words uint64
}

// isOutputPayload reports whether an SSE data payload (or a non-SSE body)
// counts as output: "[DONE]", empty data and response.created are not
// output; anything else is, whether or not it parses (§5.1 step 10).
func isOutputPayload(p []byte) bool {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || bytes.Equal(p, []byte("[DONE]")) {
		return false
	}
	if p[0] != '{' || !bytes.Contains(p, []byte("response.created")) {
		return true
	}
	var head struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(p, &head) == nil && head.Type == "response.created" {
		return false
	}
	return true
}

// chunkShape is the part of an OpenAI chunk the parser reads. Key matching
// is encoding/json's (case-insensitive), which OpenAI-compatible engines
// never exercise.
type chunkShape struct {
	Usage             json.RawMessage `json:"usage"`
	OutputTokensSoFar json.RawMessage `json:"output_tokens_so_far"`
	Response          json.RawMessage `json:"response"`
	Choices           []struct {
		Delta struct {
			Content json.RawMessage `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Delta json.RawMessage `json:"delta"`
}

// parseChunk reads the output-token information of one chunk. Anything it
// cannot read contributes nothing; it never fails. A field of an unexpected
// kind is skipped and the rest of the chunk still counts.
func parseChunk(p []byte) chunkTokens {
	var c chunkShape
	if err := json.Unmarshal(p, &c); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return chunkTokens{}
		}
	}
	if v, ok := rawFieldU64(c.Usage, "completion_tokens"); ok {
		return chunkTokens{explicit: v, hasExplicit: true}
	}
	if v, ok := rawU64(c.OutputTokensSoFar); ok {
		return chunkTokens{explicit: v, hasExplicit: true}
	}
	if len(c.Response) > 0 {
		var r struct {
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(c.Response, &r) == nil {
			if v, ok := rawFieldU64(r.Usage, "output_tokens"); ok {
				return chunkTokens{explicit: v, hasExplicit: true}
			}
		}
	}
	var out chunkTokens
	for _, ch := range c.Choices {
		if s, ok := rawString(ch.Delta.Content); ok {
			out.words += countWords(s)
		}
	}
	if s, ok := rawString(c.Delta); ok {
		out.words += countWords(s)
	}
	return out
}

// rawFieldU64 reads obj[key] as an unsigned integer when obj is a JSON
// object.
func rawFieldU64(obj json.RawMessage, key string) (uint64, bool) {
	obj = bytes.TrimSpace(obj)
	if len(obj) == 0 || obj[0] != '{' {
		return 0, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return 0, false
	}
	return rawU64(m[key])
}

// rawU64 reads a JSON non-negative integer literal.
func rawU64(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	return v, err == nil
}

// rawString reads a JSON string. Strings without escapes are converted
// directly; the rest go through encoding/json.
func rawString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && bytes.IndexByte(body, '"') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// countWords counts maximal runs of non-whitespace, as strings.Fields would,
// without allocating.
func countWords(s string) uint64 {
	var n uint64
	in := false
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if unicode.IsSpace(r) {
			in = false
			continue
		}
		if !in {
			n++
			in = true
		}
	}
	return n
}
