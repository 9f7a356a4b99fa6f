package jsonscan

import (
	"bytes"
	"unicode/utf8"
)

// EachMember calls fn with the key (the bytes between its quotes) and the
// raw value of every member of obj, in order. obj must be a valid JSON
// object. It stops and reports false at the first key with an escape
// sequence or invalid UTF-8, whose decoded name only encoding/json gives
// exactly, and for any value that is not an object.
func EachMember(obj []byte, fn func(key, val []byte)) bool {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = SkipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		end := stringEnd(obj, i)
		key := obj[i+1 : max(end-1, i+1)]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			return false
		}
		i = SkipSpace(obj, end)
		if i < len(obj) && obj[i] == ':' {
			i = SkipSpace(obj, i+1)
		}
		vend := valueEnd(obj, i)
		if vend == i {
			return false // not valid JSON; cannot happen for a checked object
		}
		fn(key, obj[i:vend])
		i = SkipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = SkipSpace(obj, i+1)
		}
	}
	return true
}

// EachElement calls fn with every element of arr when arr is a valid JSON
// array, and does nothing for any other value.
func EachElement(arr []byte, fn func(val []byte)) {
	i := SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = SkipSpace(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		end := valueEnd(arr, i)
		if end == i {
			return // not valid JSON; cannot happen for a checked array
		}
		fn(arr[i:end])
		i = SkipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = SkipSpace(arr, i+1)
		}
	}
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the closing quote of the string
// that opens at b[i]: the first quote not escaped, that is not preceded by
// an odd run of backslashes. Searching for quotes rather than stepping
// through every byte keeps a long prompt's strings cheap to skip.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		j += k
		odd := false
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			odd = !odd
		}
		if !odd {
			return j + 1
		}
		j++
	}
	return len(b)
}

// valueEnd returns the index just past the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return len(b)
	}
}
