package request

import "bytes"

// splice is Rewrite without re-encoding: it copies body and replaces, or
// adds before the closing brace, only the members that change. Every
// other byte, whitespace and escapes included, goes to the hub as the
// client sent it, and the body is walked once instead of parsed into a
// tree and marshalled again. A top-level key repeated is set in every
// occurrence, so the hub reads the gateway's value whichever it keeps.
// ok is false for a body it leaves to Rewrite's parse: not an object, or
// a top-level key written with escapes.
func splice(body []byte, forceStream, usage bool, model string) (out []byte, ok bool) {
	members, closing, ok := topMembers(body)
	if !ok {
		return nil, false
	}
	out = make([]byte, 0, len(body)+64)
	last := 0
	var seenStream, seenOptions, seenModel bool
	for _, m := range members {
		var repl []byte
		switch string(body[m.key[0]:m.key[1]]) {
		case "stream":
			if forceStream {
				seenStream, repl = true, []byte("true")
			}
		case "stream_options":
			if usage {
				seenOptions = true
				if repl, ok = withUsage(body[m.val[0]:m.val[1]]); !ok {
					return nil, false
				}
			}
		case "model":
			if model != "" {
				seenModel, repl = true, appendString(nil, model)
			}
		}
		if repl != nil {
			out = append(out, body[last:m.val[0]]...)
			out = append(out, repl...)
			last = m.val[1]
		}
	}
	out = append(out, body[last:closing]...)
	first := len(members) == 0
	add := func(k, v string) {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, '"')
		out = append(out, k...)
		out = append(out, `":`...)
		out = append(out, v...)
	}
	if forceStream && !seenStream {
		add("stream", "true")
	}
	if usage && !seenOptions {
		add("stream_options", `{"include_usage":true}`)
	}
	if model != "" && !seenModel {
		add("model", string(appendString(nil, model)))
	}
	return append(out, body[closing:]...), true
}

// withUsage is a stream_options value with include_usage true: an object
// keeps its other members, anything else becomes {"include_usage":true}.
func withUsage(v []byte) ([]byte, bool) {
	if v[0] != '{' {
		return []byte(`{"include_usage":true}`), true
	}
	members, closing, ok := topMembers(v)
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(v)+24)
	last, seen := 0, false
	for _, m := range members {
		if string(v[m.key[0]:m.key[1]]) == "include_usage" {
			out = append(out, v[last:m.val[0]]...)
			out = append(out, "true"...)
			last, seen = m.val[1], true
		}
	}
	out = append(out, v[last:closing]...)
	if !seen {
		if len(members) > 0 {
			out = append(out, ',')
		}
		out = append(out, `"include_usage":true`...)
	}
	return append(out, v[closing:]...), true
}

// memberSpan is one member of an object: its key's bytes (inside the
// quotes) and its value's, as offsets.
type memberSpan struct{ key, val [2]int }

// topMembers finds the members of the object b holds (b is valid JSON, as
// Parse found it) and the offset of its closing brace, after the last
// member's trailing whitespace. ok is false when b is not an object or a
// key holds an escape, which would have to be decoded to be compared.
func topMembers(b []byte) (members []memberSpan, closing int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	i = skipSpace(b, i+1)
	members = make([]memberSpan, 0, 8)
	for i < len(b) && b[i] != '}' {
		if b[i] != '"' {
			return nil, 0, false
		}
		kend := stringEnd(b, i)
		if kend < 0 || bytes.IndexByte(b[i+1:kend-1], '\\') >= 0 {
			return nil, 0, false
		}
		j := skipSpace(b, kend)
		if j >= len(b) || b[j] != ':' {
			return nil, 0, false
		}
		vs := skipSpace(b, j+1)
		ve := valueEnd(b, vs)
		if ve < 0 {
			return nil, 0, false
		}
		members = append(members, memberSpan{key: [2]int{i + 1, kend - 1}, val: [2]int{vs, ve}})
		i = skipSpace(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if i >= len(b) {
		return nil, 0, false
	}
	return members, i, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the offset after the string starting at b[i], -1 if it
// does not end.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// valueEnd is the offset after the value starting at b[i] (valid JSON),
// -1 if it does not end.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e := stringEnd(b, i)
				if e < 0 {
					return -1
				}
				i = e - 1
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
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}
