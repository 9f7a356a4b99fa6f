package stats

import (
	"bytes"
	"testing"
)

// scanChunk must agree with decodeChunk, which encoding/json defines,
// whenever it does not hand the chunk over.
func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"prompt_tokens":252,"completion_tokens":16},"choices":[{"text":"a b"}]}`,
		`{"choices":[{"delta":{"content":"one two"}},1,null,{"delta":"x"},{"DELTA":{"Content":"three"}}]}`,
		`{"choices":"x","delta":"a b c"}`, `{"choices":[{"delta":{"content":"a"},"delta":{}}]}`,
		`{"choices":[],"choices":[{"delta":{"content":"a"}}]}`, `{"Usage":{"completion_tokens":3},"usage":null}`,
		`{"output_tokens_so_far":7}`, `{"response":{"usage":{"output_tokens":9}}}`, `[1,2]`, `null`, `"s"`,
		`{"uſage":{"completion_tokens":1}}`, `{"\u0075sage":{"completion_tokens":1}}`, `{"choices":[{"delta":{"content":"a","content":"b c"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotWords, ok := scanChunk(b)
		if !ok {
			return
		}
		want, wantWords, wok := decodeChunk(b)
		if !wok {
			t.Fatalf("%q: scanned a chunk encoding/json rejects", b)
		}
		if gotWords != wantWords || !bytes.Equal(got.Usage, want.Usage) || !bytes.Equal(got.OutputTokensSoFar, want.OutputTokensSoFar) ||
			!bytes.Equal(got.Response, want.Response) || !bytes.Equal(got.Delta, want.Delta) {
			t.Fatalf("%q: scanned %+v (%d words), decoded %+v (%d words)", b, got, gotWords, want, wantWords)
		}
	})
}
