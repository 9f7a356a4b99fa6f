package jsonscan

import (
	"bytes"
	"unicode/utf8"
)

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// StringEnd returns the index just past the closing quote of the string
// that opens at b[i] (a quote), or -1 when it does not close: the first
// quote not escaped, that is not preceded by an odd run of backslashes.
// It checks nothing else. Searching for quotes rather than stepping
// through every byte keeps a long prompt's strings cheap to skip, and each
// run of backslashes is counted once, so the search stays linear.
func StringEnd(b []byte, i int) int {
	for j := i + 1; ; j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		odd := false
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			odd = !odd
		}
		if !odd {
			return j + 1
		}
	}
}

// ValueEnd returns the index just past the value that starts at b[i] in
// valid JSON, or -1 when there is no value there or it is cut short. A
// number or literal ends at the first delimiter or whitespace, an object
// or array at its matching bracket; nothing inside is checked.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end := StringEnd(b, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// Members calls fn with the key (the bytes between its quotes, escapes as
// written) and the offsets [start, end) of the value of every member of
// the object b holds (whitespace around it allowed), in order, and returns
// the offset of the object's closing brace. b must be valid JSON: the
// walk trusts it, as ValueEnd does. It returns -1 when b is no object, is
// cut short, or fn returns false, which stops the walk. Offsets rather
// than slices let a caller copy the bytes between members, as a splice
// does.
func Members(b []byte, fn func(key []byte, start, end int) bool) int {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = SkipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		kend := StringEnd(b, i)
		if kend < 0 {
			return -1
		}
		j := SkipSpace(b, kend)
		if j >= len(b) || b[j] != ':' {
			return -1
		}
		start := SkipSpace(b, j+1)
		end := ValueEnd(b, start)
		if end < 0 || !fn(b[i+1:kend-1], start, end) {
			return -1
		}
		i = SkipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
	if i >= len(b) || b[i] != '}' {
		return -1
	}
	return i
}

// EachMember calls fn with the key (the bytes between its quotes) and the
// raw value of every member of obj, in order. obj must be a valid JSON
// object. It stops and reports false at the first key with an escape
// sequence or invalid UTF-8, whose decoded name only encoding/json gives
// exactly, and for any value that is not an object.
func EachMember(obj []byte, fn func(key, val []byte)) bool {
	return Members(obj, func(key []byte, start, end int) bool {
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			return false
		}
		fn(key, obj[start:end])
		return true
	}) >= 0
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
		end := ValueEnd(arr, i)
		if end < 0 {
			return // not valid JSON; cannot happen for a checked array
		}
		fn(arr[i:end])
		i = SkipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = SkipSpace(arr, i+1)
		}
	}
}
