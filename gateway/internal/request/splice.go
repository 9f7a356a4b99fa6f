package request

import (
	"bytes"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// splice is Rewrite without re-encoding: it copies body and replaces, or
// adds before the closing brace, only the members that change. Every
// other byte, whitespace and escapes included, goes to the hub as the
// client sent it, and the body is walked once instead of parsed into a
// tree and marshalled again. A top-level key repeated is set in every
// occurrence, so the hub reads the gateway's value whichever it keeps.
// ok is false for a body it leaves to Rewrite's parse: not an object, or
// a key written with escapes at its top level or in the stream_options it
// changes, which would have to be decoded to be compared.
func splice(body []byte, forceStream, usage bool, model string) (out []byte, ok bool) {
	out = make([]byte, 0, len(body)+64)
	last, members := 0, 0
	var seenStream, seenOptions, seenModel, optionsOK bool
	closing := jsonscan.Members(body, func(key []byte, start, end int) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		members++
		var repl []byte
		switch string(key) {
		case "stream":
			if forceStream {
				seenStream, repl = true, []byte("true")
			}
		case "stream_options":
			if usage {
				seenOptions = true
				if repl, optionsOK = withUsage(body[start:end]); !optionsOK {
					return false
				}
			}
		case "model":
			if model != "" {
				seenModel, repl = true, appendString(nil, model)
			}
		}
		if repl != nil {
			out = append(out, body[last:start]...)
			out = append(out, repl...)
			last = end
		}
		return true
	})
	if closing < 0 {
		return nil, false
	}
	out = append(out, body[last:closing]...)
	first := members == 0
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
// ok is false for an object with a key written with escapes.
func withUsage(v []byte) ([]byte, bool) {
	if v[0] != '{' {
		return []byte(`{"include_usage":true}`), true
	}
	out := make([]byte, 0, len(v)+24)
	last, members, seen := 0, 0, false
	closing := jsonscan.Members(v, func(key []byte, start, end int) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		members++
		if string(key) == "include_usage" {
			out = append(out, v[last:start]...)
			out = append(out, "true"...)
			last, seen = end, true
		}
		return true
	})
	if closing < 0 {
		return nil, false
	}
	out = append(out, v[last:closing]...)
	if !seen {
		if members > 0 {
			out = append(out, ',')
		}
		out = append(out, `"include_usage":true`...)
	}
	return append(out, v[closing:]...), true
}
