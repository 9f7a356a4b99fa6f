package jsonscan

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// MaxDepth is encoding/json's limit on nesting: a document nested deeper
// is invalid there, so it is here. It also bounds the recursion of the
// checking functions, and so their stack, on untrusted bytes.
const MaxDepth = 10000

// MemberFunc is called by Object and TopObject with each member of an
// object: its key (the bytes between its quotes, escapes as written) and
// the index of its value, whitespace skipped. It checks the value itself
// (with Value, or a decoding scan of its own) and returns the index just
// past it, or -1 to refuse the object. A caller that matches keys by name
// must refuse, or decode, a key holding a backslash.
type MemberFunc func(key []byte, i int) int

// ElementFunc is MemberFunc's counterpart for the elements of an array.
type ElementFunc func(i int) int

// Valid reports whether b is one valid JSON document, as encoding/json's
// Valid does: the same grammar, the same nesting limit, and, like it, no
// check that strings are valid UTF-8. encoding/json steps a state machine
// through a function call per byte; this reads strings, which are most of
// a prompt, eight bytes at a time, several times faster.
func Valid(b []byte) bool {
	end := Value(b, SkipSpace(b, 0), 0)
	return end >= 0 && SkipSpace(b, end) == len(b)
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
	if i := SkipSpace(doc, 0); i >= len(doc) || doc[i] != '{' {
		return Valid(doc), false
	}
	plain = true
	valid = TopObject(doc, func(key []byte, i int) int {
		end := Value(doc, i, 1)
		if end >= 0 && plain {
			if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
				plain = false
			} else {
				fn(key, doc[i:end])
			}
		}
		return end
	})
	return valid, plain
}

// TopObject reports whether doc is one valid JSON object, whitespace
// around it allowed, calling fn (see MemberFunc) for each of its members;
// false is also fn's refusal.
func TopObject(doc []byte, fn MemberFunc) bool {
	i := SkipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return false
	}
	end := Object(doc, i, 1, fn)
	return end >= 0 && SkipSpace(doc, end) == len(doc)
}

// Value returns the index just past the valid JSON value that starts at
// b[i] (no whitespace before it), or -1. depth is the nesting of the
// object or array the value is in, 0 for a document's top value.
func Value(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return String(b, i)
	case c == '{':
		return Object(b, i, depth+1, nil)
	case c == '[':
		return Array(b, i, depth+1, nil)
	case c == '-' || '0' <= c && c <= '9':
		return Number(b, i)
	case c == 't':
		return Literal(b, i, "true")
	case c == 'f':
		return Literal(b, i, "false")
	case c == 'n':
		return Literal(b, i, "null")
	}
	return -1
}

// Literal returns the index just past lit (true, false or null) when b
// holds it at i, or -1.
func Literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// Object returns the index just past the valid object that opens at b[i],
// or -1. depth is the object's own nesting, 1 for a document's top value.
// fn, when not nil, is called for each member and checks its value (see
// MemberFunc); with fn nil every value is checked by Value.
func Object(b []byte, i, depth int, fn MemberFunc) int {
	if depth > MaxDepth {
		return -1
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for more := true; more; {
		if i = SkipSpace(b, i); i >= len(b) || b[i] != '"' {
			return -1
		}
		kend := String(b, i)
		if kend < 0 {
			return -1
		}
		key := b[i+1 : kend-1]
		i = SkipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = SkipSpace(b, i+1); i >= len(b) {
			return -1
		}
		if fn != nil {
			i = fn(key, i)
		} else {
			i = Value(b, i, depth)
		}
		i, more = next(b, i, '}')
	}
	return i
}

// Array returns the index just past the valid array that opens at b[i],
// or -1, calling fn (when not nil) for each element as Object does for
// each member.
func Array(b []byte, i, depth int, fn ElementFunc) int {
	if depth > MaxDepth {
		return -1
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for more := true; more; {
		if i = SkipSpace(b, i); i >= len(b) {
			return -1
		}
		if fn != nil {
			i = fn(i)
		} else {
			i = Value(b, i, depth)
		}
		i, more = next(b, i, ']')
	}
	return i
}

// next reads what follows a member or an element that ends at i (-1 for
// one that failed its check): the index past a comma, more being true,
// or past closer; -1 for anything else. Small enough to be inlined: it
// runs once per member or element.
func next(b []byte, i int, closer byte) (_ int, more bool) {
	if i >= 0 {
		if i = SkipSpace(b, i); i < len(b) && (b[i] == ',' || b[i] == closer) {
			return i + 1, b[i] == ','
		}
	}
	return -1, false
}

// String returns the index just past the valid string that opens at b[i]
// (a quote), or -1: no control byte, and only the escapes JSON defines.
// Bytes that are not UTF-8 pass, as encoding/json lets them (decoding
// turns them into U+FFFD). Most strings of an event are short keys and
// values, which a plain byte loop ends soonest; a string still open after
// sixteen bytes, or holding an escape, goes on in stringRest.
func String(b []byte, i int) int {
	end := min(len(b), i+17)
	for i++; i < end; i++ {
		if c := b[i]; c == '"' {
			return i + 1
		} else if c < 0x20 || c == '\\' {
			break
		}
	}
	return stringRest(b, i)
}

// stringRest is String from b[i] on. Eight bytes at a time are let
// through while none of them is a quote, a backslash or a control byte,
// which pays on a prompt's long text.
func stringRest(b []byte, i int) int {
	for ; i < len(b); i++ {
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
			return i + 1
		case c < 0x20:
			return -1
		}
		// A backslash.
		if i+1 >= len(b) {
			return -1
		}
		i++
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
				return -1
			}
			i += 4
		default:
			return -1
		}
	}
	return -1
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

// Number returns the index just past the valid number that starts at
// b[i], or -1, by JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func Number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
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
