package jsonscan

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1.5e+3`, `-0.0E-0`, `1e3 `, ` null `, `nul`, `true`, `truex`,
	`{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `"\u00e9\n\/\"\\"`, `"\u00g0"`, `"\x"`, "\"\x01\"", "\"\xff\"",
	`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "[\t1\r\n]", `[[[]]]`, `"abc`, `{"a":"b"`, `[1] [2]`,
	`{"a":1,"a":{"b":[1,"x"]}}`, `{"k\u0061":1,"b":2}`, "{\"\xff\":1}", ` {"a" : "b" } `, `"0123456789abcdef\"0123456789abcdef"`,
}

// FuzzValid: Valid agrees with encoding/json on any input.
func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// TestValidDepth: nesting is limited where encoding/json limits it.
func TestValidDepth(t *testing.T) {
	for _, depth := range []int{MaxDepth, MaxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
			doc := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closing, depth))
			if got, want := Valid(doc), json.Valid(doc); got != want {
				t.Errorf("depth %d of %q: Valid %v, encoding/json %v", depth, open, got, want)
			}
		}
	}
}

// TestValidAllocs: checking a document allocates nothing.
func TestValidAllocs(t *testing.T) {
	doc := []byte(`{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"x\""}],"n":[1,-2.5e3,true,null]}`)
	if n := testing.AllocsPerRun(100, func() {
		if ok, _ := ValidMembers(doc, func(_, _ []byte) {}); !ok || !Valid(doc) {
			t.Fatal("invalid")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per check", n)
	}
}

// FuzzValidMembers: ValidMembers says what Valid says and, on a valid
// object with plain keys, gives exactly the members EachMember gives.
func FuzzValidMembers(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got [][2]string
		valid, plain := ValidMembers(b, func(k, v []byte) { got = append(got, [2]string{string(k), string(v)}) })
		if want := json.Valid(b); valid != want {
			t.Fatalf("ValidMembers(%q) valid = %v, encoding/json says %v", b, valid, want)
		}
		if !valid {
			return
		}
		var want [][2]string
		wantPlain := EachMember(b, func(k, v []byte) { want = append(want, [2]string{string(k), string(v)}) })
		if plain != wantPlain {
			t.Fatalf("ValidMembers(%q) plain = %v, EachMember says %v", b, plain, wantPlain)
		}
		if plain && !slices.Equal(got, want) {
			t.Fatalf("ValidMembers(%q) members %q, EachMember gives %q", b, got, want)
		}
	})
}

// FuzzTopObject: the member walk with callbacks accepts exactly the
// objects encoding/json accepts, gives every member once and in order,
// with the key decoded by Unquote and the value checked by Value, as
// encoding/json decodes them into a map (the last of duplicate keys
// winning); and each element walk of an array gives encoding/json's
// elements.
func FuzzTopObject(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]json.RawMessage{}
		ok := TopObject(b, func(key []byte, i int) int {
			end := Value(b, i, 1)
			if end >= 0 {
				got[Unquote(quoted(key))] = b[i:end]
			}
			return end
		})
		isObject := bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
		if want := json.Valid(b) && isObject; ok != want {
			t.Fatalf("TopObject(%q) = %v, encoding/json says %v", b, ok, want)
		}
		if !ok {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		sameMembers(t, b, got, want)
	})
}

// quoted is key as a string token again, quotes around it.
func quoted(key []byte) []byte {
	return append(append(append(make([]byte, 0, len(key)+2), '"'), key...), '"')
}
