package stats

import "testing"

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

func FuzzParseChunk(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":"a b"}}],"usage":{"completion_tokens":3}}`))
	f.Add([]byte(`{"type":"response.created"}`))
	f.Add([]byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, p []byte) {
		_ = isOutputPayload(p)
		got := parseChunk(p)
		if got.hasExplicit && got.words != 0 {
			t.Fatalf("explicit and words both set: %+v", got)
		}
	})
}
