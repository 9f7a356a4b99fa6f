package jsonscan

import (
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the string token tok (quotes included, already checked
// by String) exactly as encoding/json decodes it into a string: escapes
// decoded, a lone or broken surrogate and every byte that is not UTF-8
// turned into U+FFFD. A string without escapes or such bytes costs one
// allocation, the string itself.
func Unquote(tok []byte) string {
	s := tok[1 : len(tok)-1]
	i := 0
	for i < len(s) {
		c := s[i]
		if c == '\\' {
			break
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	if i == len(s) {
		return string(s)
	}
	out := make([]byte, i, len(s)+8)
	copy(out, s[:i])
	for i < len(s) {
		switch c := s[i]; {
		case c == '\\':
			var n int
			out, n = appendEscape(out, s[i:])
			i += n
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			out = utf8.AppendRune(out, r)
			i += size
		}
	}
	return string(out)
}

// appendEscape appends the decoding of the escape that s starts with and
// reports how many bytes of s it took: a \u escape of a surrogate takes
// the next \u escape with it when the two make a pair.
func appendEscape(out, s []byte) ([]byte, int) {
	switch s[1] {
	case 'b':
		return append(out, '\b'), 2
	case 'f':
		return append(out, '\f'), 2
	case 'n':
		return append(out, '\n'), 2
	case 'r':
		return append(out, '\r'), 2
	case 't':
		return append(out, '\t'), 2
	case 'u':
		r := hex4(s[2:6])
		if !utf16.IsSurrogate(r) {
			return utf8.AppendRune(out, r), 6
		}
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if dec := utf16.DecodeRune(r, hex4(s[8:12])); dec != unicode.ReplacementChar {
				return utf8.AppendRune(out, dec), 12
			}
		}
		return utf8.AppendRune(out, unicode.ReplacementChar), 6
	}
	return append(out, s[1]), 2 // '"', '\\', '/'
}

// hex4 is the value of four hex digits (already checked).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// ParseInt reads the number token tok (already checked by Number) as
// encoding/json fills an integer field: only an integer literal in the
// range of int64; false otherwise, where encoding/json fails the whole
// decode.
func ParseInt(tok []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(tok), 10, 64)
	return n, err == nil
}
