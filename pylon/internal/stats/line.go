package stats

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// Invalid-event reasons of pylon_engine_stats_stream_invalid_events_total.
// The first eight classify a line
// (docs/design/statistics.md#engine-stats-stream); the rest classify a
// well-formed stats event that cannot be applied.
const (
	ReasonJSON         = "json"
	ReasonNotObject    = "not_object"
	ReasonMissingField = "missing_field"
	ReasonVersion      = "version"
	ReasonType         = "type"
	ReasonField        = "field"
	ReasonEmptyStats   = "empty_stats"
	ReasonLineTooLarge = "line_too_large"
	// ReasonRegressing: a counter went backwards for a live request.
	ReasonRegressing = "regressing_counters"
	// ReasonPostFinalize: the request already finished (its tombstone lives
	// for RequestTTL).
	ReasonPostFinalize = "post_finalize"
	// ReasonUnknownRequest: the request id resolves to no live generation
	// (traffic that bypassed pylon, or a retired generation).
	ReasonUnknownRequest = "unknown_request"
	// ReasonCalibration: calibration is measured from pylon's own
	// observations, so engine events for calibration ids are dropped.
	ReasonCalibration = "calibration_request"
)

// invalidReasons lists every reason, for metric pre-initialization and
// tests.
var invalidReasons = []string{
	ReasonJSON, ReasonNotObject, ReasonMissingField, ReasonVersion, ReasonType,
	ReasonField, ReasonEmptyStats, ReasonLineTooLarge, ReasonRegressing,
	ReasonPostFinalize, ReasonUnknownRequest, ReasonCalibration,
}

// lineKind classifies one engine stats stream line.
type lineKind uint8

const (
	lineBlank   lineKind = iota // skipped, not an event
	lineInvalid                 // counted under a reason and dropped
	linePing
	lineStats
)

// engineEvent is a validated stats event. Counters are cumulative per
// request.
type engineEvent struct {
	// requestID and model are trimmed, and usually slices of the line:
	// valid only while the line is handled, so a line allocates no
	// strings for them.
	requestID []byte
	model     []byte
	processed count
	generated count
	finished  bool
}

// count is a counter an event may carry. It is a value, not a pointer, so
// a parsed line allocates no counters: the engine sends a line per token.
type count struct {
	n  uint64
	ok bool // the event carried it
}

// ptr is the counter as applyCountersLocked takes it: nil when absent.
func (c *count) ptr() *uint64 {
	if !c.ok {
		return nil
	}
	return &c.n
}

// parseLine validates one line, without its LF or CRLF. It classifies every
// input: blank, ping, stats (with the event), or invalid (with the reason).
// Field checks follow upstream Stargate's order, so a line with several
// problems is counted under the same reason: v, type, request_id, model,
// tokens_processed, tokens_generated, finished, then the empty-stats rule.
// Unlike upstream, a counter above MaxCounterTokens is a "field" error.
// A key present with the wrong JSON kind (null included) is "field"; any v
// other than the integer literal 1 is "version". Unknown keys are ignored.
func parseLine(line []byte) (lineKind, engineEvent, string) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return lineBlank, engineEvent{}, ""
	}
	if trimmed[0] != '{' {
		if jsonscan.Valid(trimmed) {
			return lineInvalid, engineEvent{}, ReasonNotObject
		}
		return lineInvalid, engineEvent{}, ReasonJSON
	}
	obj, ok := lineObject(trimmed)
	if !ok {
		return lineInvalid, engineEvent{}, ReasonJSON
	}
	v, ok := obj.get(keyV)
	if !ok {
		return lineInvalid, engineEvent{}, ReasonMissingField
	}
	if string(bytes.TrimSpace(v)) != "1" {
		return lineInvalid, engineEvent{}, ReasonVersion
	}
	rawType, ok := obj.get(keyType)
	if !ok {
		return lineInvalid, engineEvent{}, ReasonMissingField
	}
	typ, ok := lineType(rawType)
	if !ok {
		return lineInvalid, engineEvent{}, ReasonField
	}
	switch typ {
	case "ping":
		return linePing, engineEvent{}, ""
	case "stats":
	default:
		return lineInvalid, engineEvent{}, ReasonType
	}
	var ev engineEvent
	var reason string
	if ev.requestID, reason = requiredID(&obj, keyRequestID); reason != "" {
		return lineInvalid, engineEvent{}, reason
	}
	if ev.model, reason = requiredID(&obj, keyModel); reason != "" {
		return lineInvalid, engineEvent{}, reason
	}
	if ev.processed, ok = optionalCounter(&obj, keyProcessed); !ok {
		return lineInvalid, engineEvent{}, ReasonField
	}
	if ev.generated, ok = optionalCounter(&obj, keyGenerated); !ok {
		return lineInvalid, engineEvent{}, ReasonField
	}
	if raw, present := obj.get(keyFinished); present {
		switch string(bytes.TrimSpace(raw)) {
		case "true":
			ev.finished = true
		case "false":
		default:
			return lineInvalid, engineEvent{}, ReasonField
		}
	}
	if !ev.processed.ok && !ev.generated.ok && !ev.finished {
		return lineInvalid, engineEvent{}, ReasonEmptyStats
	}
	return lineStats, ev, ""
}

// lineType reads the type member, without converting the two types a
// line has in practice to a new string.
func lineType(raw []byte) (string, bool) {
	switch string(raw) {
	case `"stats"`:
		return "stats", true
	case `"ping"`:
		return "ping", true
	}
	return rawString(raw)
}

// lineKeys are the members parseLine reads, indexed by the key constants.
var lineKeys = [...]string{"v", "type", "request_id", "model", "tokens_processed", "tokens_generated", "finished"}

// Indexes into lineKeys and lineMembers.
const (
	keyV = iota
	keyType
	keyRequestID
	keyModel
	keyProcessed
	keyGenerated
	keyFinished
)

// lineMembers holds the raw value of each member parseLine reads, nil
// when the line does not have it (a present value is never empty).
type lineMembers [len(lineKeys)][]byte

func (m *lineMembers) get(key int) ([]byte, bool) { return m[key], m[key] != nil }

// lineObject decodes a line that starts with '{' into its members, as
// json.Unmarshal into a map would for the keys parseLine reads: ok is
// false for invalid JSON, and the last of duplicate keys wins. The engine
// sends lines for every request, so the members are read in place rather
// than decoded (a map, its entries and a value copy for every key); a key
// with escapes, whose decoded name only encoding/json knows, falls back to
// it.
func lineObject(line []byte) (lineMembers, bool) {
	var obj lineMembers
	valid, plain := jsonscan.ValidMembers(line, func(k, v []byte) {
		for i, name := range lineKeys {
			if string(k) == name {
				obj[i] = v
				return
			}
		}
	})
	if !valid {
		return lineMembers{}, false
	}
	if plain {
		return obj, true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return lineMembers{}, false
	}
	obj = lineMembers{}
	for i, name := range lineKeys {
		if v, ok := m[name]; ok {
			obj[i] = v
		}
	}
	return obj, true
}

// requiredID reads a required string that must be non-empty after
// trimming; it returns the trimmed value or the failure reason. A string
// without escapes is returned in place.
func requiredID(obj *lineMembers, key int) ([]byte, string) {
	raw, ok := obj.get(key)
	if !ok {
		return nil, ReasonMissingField
	}
	var s []byte
	if len(raw) >= 2 && raw[0] == '"' {
		if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && bytes.IndexByte(body, '"') < 0 && utf8.Valid(body) {
			s = body
		}
	}
	if s == nil {
		decoded, ok := rawString(raw)
		if !ok {
			return nil, ReasonField
		}
		s = []byte(decoded)
	}
	s = bytes.TrimSpace(s)
	if len(s) == 0 {
		return nil, ReasonField
	}
	return s, ""
}

// optionalCounter reads an optional non-negative integer counter. ok is
// false when the key is present with anything else (a float, a negative
// number, a string, null, or a value above MaxCounterTokens: no request
// has that many tokens, and a sample measured from it would publish an
// impossible throughput).
func optionalCounter(obj *lineMembers, key int) (count, bool) {
	raw, present := obj.get(key)
	if !present {
		return count{}, true
	}
	raw = bytes.TrimSpace(raw)
	if string(raw) == "-0" { // a JSON integer; upstream Stargate reads it as 0, so do we
		return count{ok: true}, true
	}
	if v, ok := rawU64(raw); ok && v <= MaxCounterTokens { // ParseUint rejects 1.5, 1e3 and -1
		return count{n: v, ok: true}, true
	}
	return count{}, false
}
