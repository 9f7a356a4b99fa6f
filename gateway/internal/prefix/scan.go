package prefix

import (
	"bytes"
	"encoding/json"
)

// member returns the raw JSON of the last member named key of the
// top-level object in body, nil when there is none or body is not an
// object. It reads the value as written, whitespace inside it included,
// which the gateway's parse tree has lost: the layout hashes a chat's
// tools exactly as the engine's decoder keeps them (json.RawMessage, the
// last duplicate winning). Anything unexpected gives nil, never a panic.
func member(body []byte, key string) []byte {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil
	}
	i++
	var found []byte
	for {
		i = skipSpace(body, i)
		if i >= len(body) {
			return nil
		}
		switch body[i] {
		case '}':
			return found
		case ',':
			i++
			continue
		case '"':
		default:
			return nil
		}
		end := stringEnd(body, i)
		if end < 0 {
			return nil
		}
		k := body[i+1 : end-1]
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return nil
		}
		i = skipSpace(body, i+1)
		vend := valueEnd(body, i)
		if vend < 0 {
			return nil
		}
		if keyIs(k, key) {
			found = body[i:vend]
		}
		i = vend
	}
}

// keyIs compares an object key as written (escapes and all) with key.
func keyIs(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	var k string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return json.Unmarshal(q, &k) == nil && k == key
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal opening at
// b[i], -1 when it is not closed. A quote ends the literal unless an odd
// run of backslashes precedes it; each run is counted once, so the scan
// stays linear.
func stringEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index just past the JSON value starting at b[i],
// -1 when it is cut short.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
