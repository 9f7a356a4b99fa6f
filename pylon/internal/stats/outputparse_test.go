package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseChunk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		chunk string
		want  chunkTokens
	}{
		{"chat role chunk", `{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`, chunkTokens{}},
		{"chat content", `{"choices":[{"index":0,"delta":{"content":" how are"}}]}`, chunkTokens{words: 2}},
		{"punctuation is a word", `{"choices":[{"delta":{"content":","}}]}`, chunkTokens{words: 1}},
		{"summed over choices", `{"choices":[{"delta":{"content":"a b"}},{"delta":{"content":"c"}},{"delta":{"content":null}}]}`, chunkTokens{words: 3}},
		{"whitespace only", `{"choices":[{"delta":{"content":"  \n\t "}}]}`, chunkTokens{}},
		{"unicode whitespace", `{"choices":[{"delta":{"content":"a\u00a0b\u3000c"}}]}`, chunkTokens{words: 3}},
		{"responses delta", `{"type":"response.output_text.delta","delta":"Hello world"}`, chunkTokens{words: 2}},
		{"non-string delta", `{"delta":{"content":"x"}}`, chunkTokens{}},
		{"usage wins", `{"choices":[{"delta":{"content":"a b c"}}],"usage":{"completion_tokens":9}}`, chunkTokens{explicit: 9, hasExplicit: true}},
		{"usage null falls through", `{"choices":[{"delta":{"content":"a"}}],"usage":null}`, chunkTokens{words: 1}},
		{"output_tokens_so_far", `{"output_tokens_so_far":4,"response":{"usage":{"output_tokens":9}}}`, chunkTokens{explicit: 4, hasExplicit: true}},
		{"responses completed", `{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":12}}}`, chunkTokens{explicit: 12, hasExplicit: true}},
		{"usage precedence", `{"usage":{"completion_tokens":2},"output_tokens_so_far":4}`, chunkTokens{explicit: 2, hasExplicit: true}},
		{"float counter ignored", `{"usage":{"completion_tokens":2.5}}`, chunkTokens{}},
		{"not json", `hello world`, chunkTokens{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := parseChunk([]byte(tc.chunk)); got != tc.want {
				t.Fatalf("parseChunk = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestIsOutputPayload(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"":         false,
		"  ":       false,
		"[DONE]":   false,
		` [DONE] `: false,
		`{"type":"response.created","response":{}}`:               false,
		`{"type":"response\u002ecreated"}`:                        false,
		`{"type":"response.output_text.delta","delta":"x"}`:       true,
		`{"type":"response.completed","note":"response.created"}`: true,
		`not json`: true,
		`{"choices":[{"delta":{"role":"assistant"}}]}`: true,
	} {
		if got := isOutputPayload([]byte(p)); got != want {
			t.Errorf("isOutputPayload(%q) = %v, want %v", p, got, want)
		}
	}
}

// FuzzParseChunk checks parseChunk, which reads chunks in place, against
// refParseChunk, which lets encoding/json decode everything, and
// isOutputPayload against its rule.
func FuzzParseChunk(f *testing.F) {
	for _, seed := range []string{
		`{"choices":[{"delta":{"content":"a b"}}],"usage":{"completion_tokens":3}}`,
		`{"type":"response.created"}`, `[DONE]`, ` {"usage":{"completion_tokens":4294967297},"output_tokens_so_far":2}`,
		`{"USAGE":{"completion_tokens":5},"Usage":{"Completion_tokens":6}}`, `{"usage":{"completion_tokens":null}}`,
		`{"response":{"Usage":{"output_tokens":9}},"delta":"x y"}`, `{"delta":"a\u00a0b c","choices":[{"delta":{"content":"d"}}]}`,
		`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":7}}],"choices":[{}]}`, `{"choices":"x","delta":"y z"}`,
		`{"type":"response\u002ecreated"}`, `{"output_tokens_so_far":-0}`, `{"output_tokens_so_far":1e2}`, "{\"delta\":\"\xff \xfe\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := isOutputPayload(p), refIsOutput(p); got != want {
			t.Fatalf("isOutputPayload(%q) = %v; the rule says %v", p, got, want)
		}
		got, want := parseChunk(p), refParseChunk(p)
		if got != want {
			t.Fatalf("parseChunk(%q) = %+v; encoding/json says %+v", p, got, want)
		}
	})
}

// refIsOutput: every payload is output except blank data, [DONE] and a
// JSON object whose type is response.created.
func refIsOutput(p []byte) bool {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || string(p) == "[DONE]" {
		return false
	}
	var head struct {
		Type any `json:"type"`
	}
	created := p[0] == '{' && json.Unmarshal(p, &head) == nil && head.Type == "response.created"
	return !created
}

// refParseChunk states the output-token rules with encoding/json doing the
// decoding: the chunk's members are matched as encoding/json matches them
// to a struct (case-insensitively; a member of the wrong kind is skipped);
// the first counter present of usage.completion_tokens,
// output_tokens_so_far and response.usage.output_tokens wins when it is a
// non-negative integer of at most MaxCounterTokens (keys inside usage are
// exact); otherwise the words (strings.Fields) of every choice's
// delta.content and of a string delta are summed.
func refParseChunk(p []byte) chunkTokens {
	var c struct {
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
	if err := json.Unmarshal(p, &c); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return chunkTokens{}
		}
	}
	counter := func(raw json.RawMessage) (uint64, bool) {
		var n *uint64
		if json.Unmarshal(raw, &n) != nil || n == nil || *n > MaxCounterTokens {
			return 0, false
		}
		return *n, true
	}
	field := func(obj json.RawMessage, key string) (uint64, bool) {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil {
			return 0, false
		}
		return counter(m[key])
	}
	if n, ok := field(c.Usage, "completion_tokens"); ok {
		return chunkTokens{explicit: n, hasExplicit: true}
	}
	if n, ok := counter(c.OutputTokensSoFar); ok {
		return chunkTokens{explicit: n, hasExplicit: true}
	}
	var r struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(c.Response, &r) == nil {
		if n, ok := field(r.Usage, "output_tokens"); ok {
			return chunkTokens{explicit: n, hasExplicit: true}
		}
	}
	words := func(raw json.RawMessage) uint64 {
		var s *string
		if json.Unmarshal(raw, &s) != nil || s == nil {
			return 0
		}
		return uint64(len(strings.Fields(*s)))
	}
	var out chunkTokens
	for _, ch := range c.Choices {
		out.words += words(ch.Delta.Content)
	}
	out.words += words(c.Delta)
	return out
}
