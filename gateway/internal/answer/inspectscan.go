package answer

import (
	"encoding/json"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// The keys Inspect reads, each list in the order of its fieldSet bits.
var (
	eventKeys         = keyNames("type", "usage", "response", "choices", "delta", "error", "sequence_number")
	responseKeys      = keyNames("usage")
	inspectChoiceKeys = keyNames("text", "delta")
	inspectDeltaKeys  = keyNames("content", "reasoning_content", "tool_calls")
)

// inspectScan is Inspect on the strict scanner, without allocating for
// an event that carries no usage; ok is false when it refuses the event
// (by chunkScan's rules), which encoding/json then reads.
func inspectScan(data []byte) (EventInfo, bool) {
	var (
		seen                fieldSet
		typ, delta          string
		usage, resp, errv   []byte
		seq                 []byte
		choices             int
		output, hasResponse bool
	)
	str := func(i int, dst *string) int { return (&chunkScan{b: data}).str(i, dst, true) }
	ok := jsonscan.TopObject(data, func(key []byte, i int) int {
		f, ok := field(key, eventKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			return str(i, &typ)
		case f == 1, f == 5, f == 6:
			end := jsonscan.Value(data, i, 1)
			if end >= 0 {
				v := data[i:end:end]
				switch f {
				case 1:
					usage = v
				case 5:
					errv = v
				default:
					seq = v
				}
			}
			return end
		case f == 2:
			switch data[i] {
			case 'n':
				hasResponse = false
				return jsonscan.Literal(data, i, "null")
			case '{':
				hasResponse = true
				var rseen fieldSet
				return jsonscan.Object(data, i, 2, func(key []byte, i int) int {
					g, ok := field(key, responseKeys, &rseen)
					end := -1
					if ok {
						end = jsonscan.Value(data, i, 2)
					}
					if g == 0 && end >= 0 {
						resp = data[i:end:end]
					}
					return end
				})
			}
			return -1
		case f == 3:
			switch data[i] {
			case 'n':
				choices = 0
				return jsonscan.Literal(data, i, "null")
			case '[':
				return jsonscan.Array(data, i, 2, func(i int) int {
					choices++
					switch data[i] {
					case 'n':
						return jsonscan.Literal(data, i, "null")
					case '{':
						return inspectChoice(data, i, &output)
					}
					return -1
				})
			}
			return -1
		case f == 4:
			return str(i, &delta)
		}
		return jsonscan.Value(data, i, 1)
	})
	if !ok {
		return EventInfo{}, false
	}
	if !hasResponse {
		resp = nil
	}
	return eventInfo(typ, json.RawMessage(usage), json.RawMessage(resp), delta, json.RawMessage(errv), json.RawMessage(seq), choices, output), true
}

// inspectChoice reads one choice object at data[i] for Inspect, setting
// *output when it carries generated output.
func inspectChoice(data []byte, i int, output *bool) int {
	var seen fieldSet
	return jsonscan.Object(data, i, 3, func(key []byte, i int) int {
		f, ok := field(key, inspectChoiceKeys, &seen)
		switch {
		case !ok:
			return -1
		case f == 0:
			return textField(data, i, output)
		case f == 1:
			switch data[i] {
			case 'n':
				return jsonscan.Literal(data, i, "null")
			case '{':
				var dseen fieldSet
				return jsonscan.Object(data, i, 4, func(key []byte, i int) int {
					g, ok := field(key, inspectDeltaKeys, &dseen)
					switch {
					case !ok:
						return -1
					case g == 0, g == 1:
						return textField(data, i, output)
					case g == 2:
						// Any value, null included, is a tool-call delta
						// to encoding/json's raw field.
						end := jsonscan.Value(data, i, 4)
						if end > i {
							*output = true
						}
						return end
					}
					return jsonscan.Value(data, i, 4)
				})
			}
			return -1
		}
		return jsonscan.Value(data, i, 3)
	})
}

// textField scans a string field at data[i] (a string or null) and sets
// *output when it is not empty: a string token longer than its two
// quotes decodes to at least one character, so it need not be decoded.
func textField(data []byte, i int, output *bool) int {
	switch data[i] {
	case 'n':
		return jsonscan.Literal(data, i, "null")
	case '"':
		end := jsonscan.String(data, i)
		if end > i+2 {
			*output = true
		}
		return end
	}
	return -1
}
