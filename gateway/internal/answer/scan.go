package answer

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a strict JSON scanner for the events the gateway reads on
// every request. encoding/json's reflection costs most of the CPU an
// aggregated answer takes; the scanner walks an event once, without
// allocating, and hands out the raw bytes of each value. It accepts
// exactly the texts encoding/json accepts, or less: whatever it cannot
// vouch for (a nesting deeper than maxScanDepth, an escaped key) it
// refuses, and its callers then take the encoding/json path, so a
// refusal costs time, never a different answer.

// maxScanDepth bounds the nesting the scanner follows. Chunks nest four
// or five levels; anything deeper goes to encoding/json, whose own limit
// is far higher.
const maxScanDepth = 64

// skipWS returns the index of the first non-whitespace byte at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanValue returns the end of the valid value starting at b[i] (no
// leading whitespace), or -1.
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '{':
		return scanObject(b, i, depth+1, nil)
	case c == '[':
		return scanArray(b, i, depth+1, nil)
	case c == '"':
		return scanString(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return scanNumber(b, i)
	}
	return -1
}

func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanString returns the end of the string starting at b[i] (its opening
// quote), or -1: no control byte, and only the escapes JSON defines.
// Bytes that are not UTF-8 are accepted, as encoding/json accepts them
// (decoding turns them into U+FFFD).
func scanString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !isHex4(b[i+1:i+5]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// scanNumber returns the end of the number starting at b[i], or -1, by
// JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// member is called with each member of an object: its key (raw, without
// quotes; never escaped, see scanObject) and the index of its value in
// the scanned bytes. It scans the value itself (scanValue, or a decoding
// scan of its own) and returns the value's end, or -1 to refuse.
type member func(key []byte, i int) int

// element is member's counterpart for the elements of an array.
type element func(i int) int

// scanObject returns the end of the object starting at b[i], or -1,
// calling fn (when set) for each member. A key holding an escape is a
// refusal when fn is set: no field the gateway reads is spelled that way,
// but matching one would need unescaping first.
func scanObject(b []byte, i, depth int, fn member) int {
	if depth > maxScanDepth {
		return -1
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		kend := scanString(b, i)
		if kend < 0 {
			return -1
		}
		key := b[i+1 : kend-1]
		if fn != nil && bytes.IndexByte(key, '\\') >= 0 {
			return -1
		}
		i = skipWS(b, kend)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return -1
		}
		var vend int
		if fn != nil {
			vend = fn(key, i)
		} else {
			vend = scanValue(b, i, depth)
		}
		if vend < 0 {
			return -1
		}
		i = skipWS(b, vend)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// scanArray returns the end of the array starting at b[i], or -1,
// calling fn (when set) for each element.
func scanArray(b []byte, i, depth int, fn element) int {
	if depth > maxScanDepth {
		return -1
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(b) {
			return -1
		}
		var end int
		if fn != nil {
			end = fn(i)
		} else {
			end = scanValue(b, i, depth)
		}
		if end < 0 {
			return -1
		}
		i = skipWS(b, end)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

// scanTop checks that data is one valid object (whitespace around it
// allowed), calling fn for its members; false is a refusal.
func scanTop(data []byte, fn member) bool {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	end := scanObject(data, i, 1, fn)
	return end >= 0 && skipWS(data, end) == len(data)
}

// fieldSet tracks which known fields of one object were seen. A field
// seen twice, or a key that matches a field only without regard to case
// (encoding/json would fill the field from it), is a refusal: encoding/json
// merges repeated values in ways not worth copying.
type fieldSet uint32

// take marks field n seen; false when it was seen before.
func (s *fieldSet) take(n int) bool {
	if *s&(1<<n) != 0 {
		return false
	}
	*s |= 1 << n
	return true
}

// foldsToAny reports whether key matches one of names when case is
// ignored, as encoding/json matches a key it found no exact field for.
func foldsToAny(key []byte, names [][]byte) bool {
	for _, n := range names {
		if bytes.EqualFold(key, n) {
			return true
		}
	}
	return false
}

// unquote decodes the raw string token raw (quotes included, already
// validated by scanString) exactly as encoding/json does: escapes
// decoded, a lone or broken surrogate and every byte that is not UTF-8
// turned into U+FFFD.
func unquote(raw []byte) string {
	s := raw[1 : len(raw)-1]
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
		c := s[i]
		switch {
		case c == '\\':
			var esc byte
			switch s[i+1] {
			case 'b':
				esc = '\b'
			case 'f':
				esc = '\f'
			case 'n':
				esc = '\n'
			case 'r':
				esc = '\r'
			case 't':
				esc = '\t'
			case 'u':
				r := hex4(s[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s[i+2 : i+6])
					}
					if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
						out = utf8.AppendRune(out, dec)
						i += 6
						continue
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // '"', '\\', '/'
				esc = s[i+1]
			}
			out = append(out, esc)
			i += 2
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

// hex4 is the value of four hex digits (already validated).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

// parseInt reads a number token as encoding/json fills an int field:
// only an integer literal in range; false otherwise (encoding/json fails
// the whole decode then).
func parseInt(raw []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}
