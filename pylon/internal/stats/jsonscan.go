package stats

import "unicode/utf8"

// A minimal reader of JSON objects already known to be valid (checked
// with json.Valid, or part of a document encoding/json accepted). It finds
// members without decoding them, for the per-request parsers of this
// package; anything it cannot read exactly it leaves to encoding/json.

// eachMember calls fn with the key (the bytes between its quotes) and the
// raw value of every member of obj, in order. obj must be a valid JSON
// object. It stops and reports false at the first key with an escape
// sequence or invalid UTF-8, whose decoded name only encoding/json gives
// exactly.
func eachMember(obj []byte, fn func(key, val []byte)) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		end := stringEnd(obj, i)
		key := obj[i+1 : max(end-1, i+1)]
		for _, c := range key {
			if c == '\\' {
				return false
			}
		}
		if !utf8.Valid(key) {
			return false
		}
		i = skipSpace(obj, end)
		if i < len(obj) && obj[i] == ':' {
			i = skipSpace(obj, i+1)
		}
		vend := valueEnd(obj, i)
		if vend == i {
			return false // not valid JSON; cannot happen for a checked object
		}
		fn(key, obj[i:vend])
		i = skipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the closing quote of the string
// that opens at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
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

// eachElement calls fn with every element of arr when arr is a valid JSON
// array, and does nothing for any other value.
func eachElement(arr []byte, fn func(val []byte)) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = skipSpace(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		end := valueEnd(arr, i)
		if end == i {
			return // not valid JSON; cannot happen for a checked array
		}
		fn(arr[i:end])
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}
