package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// EachMember must see exactly the members encoding/json decodes into a
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
		if !EachMember(b, func(k, v []byte) { got[string(k)] = v }) {
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
