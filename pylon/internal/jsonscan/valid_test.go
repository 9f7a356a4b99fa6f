package jsonscan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1.5e+3`, `-0.0E-0`, `1e3 `, ` null `, `nul`, `true`, `truex`,
	`{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `"\u00e9\n\/\"\\"`, `"\u00g0"`, `"\x"`, "\"\x01\"", "\"\xff\"",
	`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "[\t1\r\n]", `[[[]]]`, `"abc`, `{"a":"b"`, `[1] [2]`,
}

// Valid agrees with encoding/json on any input.
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

func TestValid(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", s, got, want)
		}
	}
}

// TestValidDepth: nesting is limited where encoding/json limits it.
func TestValidDepth(t *testing.T) {
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
			doc := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closing, depth))
			if got, want := Valid(doc), json.Valid(doc); got != want {
				t.Errorf("depth %d of %q: Valid %v, encoding/json %v", depth, open, got, want)
			}
		}
	}
}

func BenchmarkValid(b *testing.B) {
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 256<<10/27)
	doc := []byte(`{"model":"m","messages":[{"role":"system","content":"` + pad + `"},{"role":"user","content":"hi"}],"stream":true}`)
	b.SetBytes(int64(len(doc)))
	b.Run("jsonscan", func(b *testing.B) {
		for b.Loop() {
			Valid(doc)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Valid(doc)
		}
	})
}

// ValidMembers says what Valid says and, on a valid object with plain
// keys, gives exactly the members EachMember gives.
func FuzzValidMembers(f *testing.F) {
	for _, s := range append(validSeeds, `{"a":1,"a":{"b":[1,"x"]}}`, `{"k\u0061":1,"b":2}`, "{\"\xff\":1}", ` {"a" : "b" } `) {
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
