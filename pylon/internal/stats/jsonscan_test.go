package stats

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// eachMember must see exactly the members encoding/json decodes into a
// map (the last of duplicate keys winning) whenever it reports success.
func FuzzEachMember(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, `{"a" : "x\"}" , "b":[1,{"c":"]"}] ,"d":null}`,
		`{"usage":{"prompt_tokens":252,"completion_tokens":16},"choices":[{"text":"a b"}]}`,
		`{"k\u0061":1}`, "{\"\xff\":[]}", `{"a":-1.5e3,"b":true,"c":false}`, "{\"a\":\t{\"b\":{}}\n}",
		`{"v":1,"type":"stats","request_id":"r1","model":"m","tokens_processed":10,"finished":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		got := map[string]json.RawMessage{}
		if !eachMember(b, func(k, v []byte) { got[string(k)] = v }) {
			if !bytes.Contains(b, []byte(`\`)) && utf8.Valid(b) {
				t.Fatalf("gave up on %q without an escape", b)
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: got %d members, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%q: member %q = %q, want %q", b, k, got[k], v)
			}
		}
	})
}

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
