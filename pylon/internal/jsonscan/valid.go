package jsonscan

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// maxDepth is encoding/json's limit on nesting: a document nested deeper
// is invalid there, so it is here.
const maxDepth = 10000

// Valid reports whether b is one valid JSON document, as encoding/json's
// Valid does: the same grammar, the same nesting limit, and, like it, no
// check that strings are valid UTF-8. encoding/json steps a state machine
// through a function call per byte; this reads strings, which are most of
// a prompt, in a tight loop, several times faster.
func Valid(b []byte) bool {
	v := validator{b: b}
	i, ok := v.value(SkipSpace(b, 0), 0)
	return ok && SkipSpace(b, i) == len(b)
}

// ValidMembers validates doc exactly as Valid does and, in the same pass,
// calls fn with the key (the bytes between its quotes) and the raw value
// of every member of a top-level object, in order: one pass over a line or
// a chunk instead of Valid and then EachMember. fn sees members before the
// end of doc is checked, so its results count only when valid is true.
// plain is false when doc is no object, or from the first key with an
// escape sequence or invalid UTF-8 on (fn is not called again): such a
// key's decoded name only encoding/json gives exactly.
func ValidMembers(doc []byte, fn func(key, val []byte)) (valid, plain bool) {
	i := SkipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return Valid(doc), false
	}
	// The top-level object's loop is validator.object's, written out here
	// so that fn stays out of the recursive walk: escape analysis gives up
	// on recursion, and fn with everything it captures would move to the
	// heap on every call.
	v, plain := validator{b: doc}, true
	i = SkipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return SkipSpace(doc, i+1) == len(doc), true
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return false, plain
		}
		keyStart := i
		var ok bool
		if i, ok = v.str(i); !ok {
			return false, plain
		}
		key := doc[keyStart+1 : i-1]
		i = SkipSpace(doc, i)
		if i >= len(doc) || doc[i] != ':' {
			return false, plain
		}
		valStart := SkipSpace(doc, i+1)
		if i, ok = v.value(valStart, 1); !ok {
			return false, plain
		}
		if plain {
			if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
				plain = false
			} else {
				fn(key, doc[valStart:i])
			}
		}
		i = SkipSpace(doc, i)
		if i >= len(doc) {
			return false, plain
		}
		switch doc[i] {
		case '}':
			return SkipSpace(doc, i+1) == len(doc), plain
		case ',':
			i = SkipSpace(doc, i+1)
		default:
			return false, plain
		}
	}
}

type validator struct{ b []byte }

// value checks the value at b[i] and returns the index after it.
func (v validator) value(i, depth int) (int, bool) {
	b := v.b
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return v.str(i)
	case c == '{':
		return v.object(i, depth+1)
	case c == '[':
		return v.array(i, depth+1)
	case c == '-' || ('0' <= c && c <= '9'):
		return v.number(i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func (v validator) object(i, depth int) (int, bool) {
	b := v.b
	if depth > maxDepth {
		return i, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = v.str(i); !ok {
			return i, false
		}
		i = SkipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		if i, ok = v.value(SkipSpace(b, i+1), depth); !ok {
			return i, false
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = SkipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

func (v validator) array(i, depth int) (int, bool) {
	b := v.b
	if depth > maxDepth {
		return i, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = v.value(i, depth); !ok {
			return i, false
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = SkipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

// str checks the string that opens at b[i]: no control characters, only
// the escapes JSON defines. Eight bytes at a time are let through while
// none of them is a quote, a backslash or a control character.
func (v validator) str(i int) (int, bool) {
	b := v.b
	for i++; i < len(b); i++ {
		for len(b)-i >= 8 && plain(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		}
		// A backslash.
		if i+1 >= len(b) {
			return i, false
		}
		i++
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
				return i, false
			}
			i += 4
		default:
			return i, false
		}
	}
	return i, false
}

const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// plain reports whether none of the eight bytes in x is below 0x20, a
// quote or a backslash. Each test is the classic zero-byte check, which
// finds such a byte whenever there is one.
func plain(x uint64) bool {
	below := (x - ones*0x20) &^ x
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	return (below|(quote-ones)&^quote|(backslash-ones)&^backslash)&high == 0
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (v validator) number(i int) (int, bool) {
	b := v.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return i, false
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
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
