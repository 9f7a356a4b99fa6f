package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

var memberSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, `{"a" : "x\"}" , "b":[1,{"c":"]"}] ,"d":null}`,
	`{"usage":{"prompt_tokens":252,"completion_tokens":16},"choices":[{"text":"a b"}]}`,
	`{"k\u0061":1}`, "{\"\xff\":[]}", `{"a":-1.5e3,"b":true,"c":false}`, "{\"a\":\t{\"b\":{}}\n}",
	`{"v":1,"type":"stats","request_id":"r1","model":"m","tokens_processed":10,"finished":true}`,
	`{"a":"\\\\\"","b":"\\"}`, `[1,"]",{"a":[]}]`, `"x"`, `{"a":1`,
}

// FuzzEachMember: EachMember sees exactly the members encoding/json
// decodes into a map (the last of duplicate keys winning) whenever it
// reports success, and gives up only for a key it must not read.
func FuzzEachMember(f *testing.F) {
	for _, s := range memberSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			_ = EachMember(b, func(_, _ []byte) {}) // must not panic
			return
		}
		got := map[string]json.RawMessage{}
		if !EachMember(b, func(k, v []byte) { got[string(k)] = v }) {
			if !bytes.Contains(b, []byte(`\`)) && utf8.Valid(b) {
				t.Fatalf("gave up on %q without an escape", b)
			}
			return
		}
		sameMembers(t, b, got, want)
	})
}

// FuzzMembers: on any valid object the offset walk finds every member
// encoding/json decodes, escaped keys included (decoded by Unquote), and
// the closing brace; on any other input it gives -1 or stays in bounds.
func FuzzMembers(f *testing.F) {
	for _, s := range memberSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]json.RawMessage{}
		closing := Members(b, func(key []byte, start, end int) bool {
			if start < 0 || start >= end || end > len(b) {
				t.Fatalf("%q: value at [%d, %d)", b, start, end)
			}
			name := string(key)
			if q := quoted(key); String(q, 0) == len(q) {
				name = Unquote(q)
			}
			got[name] = b[start:end]
			return true
		})
		if closing >= len(b) {
			t.Fatalf("%q: closing brace at %d", b, closing)
		}
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		if closing < 0 || b[closing] != '}' || SkipSpace(b, closing+1) != len(b) {
			t.Fatalf("%q: closing brace at %d", b, closing)
		}
		sameMembers(t, b, got, want)
	})
}

// TestMembersStop: fn's false stops the walk and fails it.
func TestMembersStop(t *testing.T) {
	b := []byte(`{"a":1,"b":2,"c":3}`)
	var seen []string
	if got := Members(b, func(key []byte, _, _ int) bool {
		seen = append(seen, string(key))
		return string(key) != "b"
	}); got != -1 || len(seen) != 2 {
		t.Fatalf("Members = %d after %q, want -1 after a and b", got, seen)
	}
}

// FuzzValueEnd: in any valid document the value end of the top value and
// of every element of an array (EachElement) is where encoding/json ends
// it, and the checking Value ends it at the same place.
func FuzzValueEnd(f *testing.F) {
	for _, s := range append(append([]string(nil), memberSeeds...), validSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := SkipSpace(b, 0)
		end := ValueEnd(b, i)
		if end > len(b) || end == i {
			t.Fatalf("%q: ValueEnd %d", b, end)
		}
		if !json.Valid(b) {
			EachElement(b, func([]byte) {}) // must not panic
			return
		}
		if want := len(bytes.TrimRight(b, " \t\r\n")); end != want || Value(b, i, 0) != want {
			t.Fatalf("%q: ValueEnd %d, Value %d, want %d", b, end, Value(b, i, 0), want)
		}
		var want []json.RawMessage
		if json.Unmarshal(b, &want) != nil {
			return
		}
		var got []json.RawMessage
		EachElement(b, func(v []byte) { got = append(got, v) })
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, encoding/json %d", b, len(got), len(want))
		}
		for k := range want {
			if !bytes.Equal(got[k], want[k]) {
				t.Fatalf("%q: element %d = %q, encoding/json %q", b, k, got[k], want[k])
			}
		}
	})
}

// sameMembers fails t unless got holds exactly the members want does,
// want being what encoding/json decodes b into.
func sameMembers(t *testing.T, b []byte, got, want map[string]json.RawMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%q: got %d members, encoding/json %d", b, len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("%q: member %q = %q, encoding/json %q", b, k, got[k], v)
		}
	}
}
