package jsonscan

import (
	"encoding/json"
	"testing"
)

// FuzzUnquote: String accepts a string token exactly when encoding/json
// does, StringEnd ends it where String does, and Unquote decodes it as
// encoding/json does (escapes, surrogates, bytes that are not UTF-8).
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`plain`, `a\nb`, `\u00e9\ud83d\ude00`, `\ud800`, `\ud800\u0041`, `\udc00\ud800`, `\uD83D\uDE00x`, "\xff\xe2\x82", `\'`, "\x01", `\u12`, `\"\\\/\b\f\r\t`, `0123456789abcdef\\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := []byte(`"` + s + `"`)
		end := String(tok, 0)
		var want string
		err := json.Unmarshal(tok, &want)
		if (end == len(tok)) != (err == nil) {
			t.Fatalf("%q: String end %d of %d, encoding/json %v", tok, end, len(tok), err)
		}
		if err != nil {
			return
		}
		if got := StringEnd(tok, 0); got != end {
			t.Fatalf("%q: StringEnd %d, String %d", tok, got, end)
		}
		if got := Unquote(tok); got != want {
			t.Fatalf("%q: Unquote %q, encoding/json %q", tok, got, want)
		}
	})
}

// FuzzParseInt: a number token reads as encoding/json fills an int64
// field, and Number ends a token where encoding/json's grammar does.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{`0`, `-0`, `7`, `-12`, `1.5`, `1e3`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `01`, `-`, `+1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := []byte(s)
		var want int64
		err := json.Unmarshal(tok, &want)
		isNumber := Number(tok, 0) == len(tok)
		bare := len(tok) > 0 && (tok[0] == '-' || isDigit(tok[0])) && isDigit(tok[len(tok)-1])
		if isNumber != (json.Valid(tok) && bare) {
			t.Fatalf("%q: Number says %v, encoding/json %v", tok, isNumber, json.Valid(tok))
		}
		if !isNumber {
			return
		}
		got, ok := ParseInt(tok)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("%q: ParseInt %d %v, encoding/json %d %v", tok, got, ok, want, err)
		}
	})
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
