package answer

import (
	"bytes"
	"encoding/json"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// The events the gateway reads on every request are decoded by
// jsonscan's checking walk, once and without reflection, rather than by
// encoding/json, whose reflection costs most of the CPU an aggregated
// answer takes. The walk accepts exactly the texts encoding/json accepts,
// or less; the decoders here refuse in addition whatever they cannot
// decode the same way (an escaped key, a field named twice or in another
// case, a value of the wrong kind), and their callers then take the
// encoding/json path, so a refusal costs time, never a different answer.

// The keys of the objects a chat chunk is made of, each list in the order
// of its fieldSet bits.
var (
	chunkKeys  = keyNames("id", "created", "model", "system_fingerprint", "service_tier", "usage", "choices", "error")
	choiceKeys = keyNames("index", "finish_reason", "logprobs", "text", "delta")
	deltaKeys  = keyNames("role", "content", "reasoning_content", "reasoning", "refusal", "function_call", "tool_calls")
	toolKeys   = keyNames("index", "id", "type", "function")
	funcKeys   = keyNames("name", "arguments")
)

func keyNames(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = []byte(n)
	}
	return out
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

// field is the index of key (raw, as jsonscan hands it out) among keys,
// -1 for a key no field takes; ok is false for a refusal: a key seen
// before, one that matches a field only when case is ignored, or one
// written with an escape, which could name any field once decoded (no
// field the gateway reads is spelled that way).
func field(key []byte, keys [][]byte, seen *fieldSet) (int, bool) {
	for i, k := range keys {
		if bytes.Equal(key, k) {
			return i, seen.take(i)
		}
	}
	if bytes.IndexByte(key, '\\') >= 0 {
		return -1, false
	}
	for _, k := range keys {
		if bytes.EqualFold(key, k) {
			return -1, false
		}
	}
	return -1, true
}

// chunkScan decodes one chunk's data b into c, filling it as
// json.Unmarshal fills a zero chunk, in one pass and with an allocation
// only for each string it keeps. It refuses (scan returns false) whatever
// it does not decode the same way: invalid JSON, a value of the wrong
// type (json.Unmarshal's error), a field named twice or in another case.
// With header false the chunk's id, created, model, fingerprint and
// service tier are checked but not kept: the aggregator reads them from
// the first chunk only.
type chunkScan struct {
	b      []byte
	c      *chunk
	header bool
}

// scan decodes d.b into d.c; d.c must be zero but for the backing array
// of its choices, which is reused.
func (d *chunkScan) scan() bool {
	var seen fieldSet
	c := d.c
	return jsonscan.TopObject(d.b, func(key []byte, i int) int {
		f, ok := field(key, chunkKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			return d.str(i, &c.ID, d.header)
		case f == 1:
			end, n, set := d.int(i)
			if set && d.header {
				c.Created = n
			}
			return end
		case f == 2:
			return d.str(i, &c.Model, d.header)
		case f == 3:
			return d.strPtr(i, &c.SystemFingerprint, d.header)
		case f == 4:
			return d.strPtr(i, &c.ServiceTier, d.header)
		case f == 5:
			end := jsonscan.Value(d.b, i, 1)
			if end >= 0 {
				// Kept beyond this event: a copy, as json.RawMessage takes.
				c.Usage = append(json.RawMessage(nil), d.b[i:end]...)
			}
			return end
		case f == 6:
			return d.choices(i)
		case f == 7:
			end := jsonscan.Value(d.b, i, 1)
			if end >= 0 {
				c.Error = d.b[i:end:end]
			}
			return end
		}
		return jsonscan.Value(d.b, i, 1)
	})
}

// choices decodes the choices array at b[i].
func (d *chunkScan) choices(i int) int {
	c := d.c
	if d.b[i] == 'n' {
		c.Choices = nil
		return jsonscan.Literal(d.b, i, "null")
	}
	if d.b[i] != '[' {
		return -1
	}
	c.Choices = c.Choices[:0]
	return jsonscan.Array(d.b, i, 2, func(i int) int {
		c.Choices = append(c.Choices, chunkChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		switch d.b[i] {
		case 'n':
			return jsonscan.Literal(d.b, i, "null")
		case '{':
			return d.choice(i, ch)
		}
		return -1
	})
}

// choice decodes one choice object at b[i] into ch.
func (d *chunkScan) choice(i int, ch *chunkChoice) int {
	var seen fieldSet
	return jsonscan.Object(d.b, i, 3, func(key []byte, i int) int {
		f, ok := field(key, choiceKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			end, n, set := d.int(i)
			if set {
				ch.Index = int(n)
			}
			return end
		case f == 1:
			return d.strPtr(i, &ch.FinishReason, true)
		case f == 2:
			end := jsonscan.Value(d.b, i, 3)
			if end >= 0 {
				ch.Logprobs = d.b[i:end:end]
			}
			return end
		case f == 3:
			return d.str(i, &ch.Text, true)
		case f == 4:
			switch d.b[i] {
			case 'n':
				return jsonscan.Literal(d.b, i, "null")
			case '{':
				return d.delta(i, ch)
			}
			return -1
		}
		return jsonscan.Value(d.b, i, 3)
	})
}

// delta decodes a choice's delta object at b[i] into ch.Delta.
func (d *chunkScan) delta(i int, ch *chunkChoice) int {
	var seen fieldSet
	dl := &ch.Delta
	return jsonscan.Object(d.b, i, 4, func(key []byte, i int) int {
		f, ok := field(key, deltaKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			return d.str(i, &dl.Role, true)
		case f == 1:
			// The content is read once, by the aggregator, before the
			// next chunk: it lives in the choice, not in an allocation
			// of its own.
			switch d.b[i] {
			case 'n':
				dl.Content = nil
				return jsonscan.Literal(d.b, i, "null")
			case '"':
				end := jsonscan.String(d.b, i)
				if end >= 0 {
					ch.content = jsonscan.Unquote(d.b[i:end])
					dl.Content = &ch.content
				}
				return end
			}
			return -1
		case f == 2:
			return d.str(i, &dl.ReasoningContent, true)
		case f == 3:
			return d.str(i, &dl.Reasoning, true)
		case f == 4:
			return d.strPtr(i, &dl.Refusal, true)
		case f == 5:
			switch d.b[i] {
			case 'n':
				dl.FunctionCall = nil
				return jsonscan.Literal(d.b, i, "null")
			case '{':
				if dl.FunctionCall == nil {
					dl.FunctionCall = &functionCall{}
				}
				return d.function(i, dl.FunctionCall, 5)
			}
			return -1
		case f == 6:
			return d.toolCalls(i, &dl.ToolCalls)
		}
		return jsonscan.Value(d.b, i, 4)
	})
}

// toolCalls decodes a delta's tool_calls array at b[i] into *dst.
func (d *chunkScan) toolCalls(i int, dst *[]toolCallDelta) int {
	if d.b[i] == 'n' {
		*dst = nil
		return jsonscan.Literal(d.b, i, "null")
	}
	if d.b[i] != '[' {
		return -1
	}
	*dst = []toolCallDelta{}
	return jsonscan.Array(d.b, i, 5, func(i int) int {
		*dst = append(*dst, toolCallDelta{})
		tc := &(*dst)[len(*dst)-1]
		switch d.b[i] {
		case 'n':
			return jsonscan.Literal(d.b, i, "null")
		case '{':
			return d.toolCall(i, tc)
		}
		return -1
	})
}

// toolCall decodes one tool-call delta object at b[i] into tc.
func (d *chunkScan) toolCall(i int, tc *toolCallDelta) int {
	var seen fieldSet
	return jsonscan.Object(d.b, i, 6, func(key []byte, i int) int {
		f, ok := field(key, toolKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			end, n, set := d.int(i)
			if set {
				tc.Index = int(n)
			}
			return end
		case f == 1:
			return d.str(i, &tc.ID, true)
		case f == 2:
			return d.str(i, &tc.Type, true)
		case f == 3:
			switch d.b[i] {
			case 'n':
				return jsonscan.Literal(d.b, i, "null")
			case '{':
				return d.function(i, &tc.Function, 7)
			}
			return -1
		}
		return jsonscan.Value(d.b, i, 6)
	})
}

// function decodes a function object (name, arguments) at b[i] into fc.
func (d *chunkScan) function(i int, fc *functionCall, depth int) int {
	var seen fieldSet
	return jsonscan.Object(d.b, i, depth, func(key []byte, i int) int {
		f, ok := field(key, funcKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			return d.str(i, &fc.Name, true)
		case f == 1:
			return d.str(i, &fc.Arguments, true)
		}
		return jsonscan.Value(d.b, i, depth)
	})
}

// str decodes a string field at b[i]: a string is stored in *dst when
// store is set, null leaves *dst as it is, anything else is a refusal.
func (d *chunkScan) str(i int, dst *string, store bool) int {
	switch d.b[i] {
	case 'n':
		return jsonscan.Literal(d.b, i, "null")
	case '"':
		end := jsonscan.String(d.b, i)
		if end >= 0 && store {
			*dst = jsonscan.Unquote(d.b[i:end])
		}
		return end
	}
	return -1
}

// strPtr decodes a *string field at b[i]: null sets it nil, a string
// points it at the decoded string (when store is set).
func (d *chunkScan) strPtr(i int, dst **string, store bool) int {
	switch d.b[i] {
	case 'n':
		if store {
			*dst = nil
		}
		return jsonscan.Literal(d.b, i, "null")
	case '"':
		end := jsonscan.String(d.b, i)
		if end >= 0 && store {
			s := jsonscan.Unquote(d.b[i:end])
			*dst = &s
		}
		return end
	}
	return -1
}

// int decodes an integer field at b[i]: set reports a number (not null).
// A number that is not an integer in range is a refusal, as it fails
// json.Unmarshal.
func (d *chunkScan) int(i int) (end int, n int64, set bool) {
	if d.b[i] == 'n' {
		return jsonscan.Literal(d.b, i, "null"), 0, false
	}
	c := d.b[i]
	if c != '-' && (c < '0' || c > '9') {
		return -1, 0, false
	}
	end = jsonscan.Number(d.b, i)
	if end < 0 {
		return -1, 0, false
	}
	n, ok := jsonscan.ParseInt(d.b[i:end])
	if !ok {
		return -1, 0, false
	}
	return end, n, true
}
