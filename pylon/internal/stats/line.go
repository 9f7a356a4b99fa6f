package stats

import (
	"bytes"
	"encoding/json"
	"strings"
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
// request; nil means the event did not carry that counter.
type engineEvent struct {
	requestID string
	model     string
	processed *uint64
	generated *uint64
	finished  bool
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
		if json.Valid(trimmed) {
			return lineInvalid, engineEvent{}, ReasonNotObject
		}
		return lineInvalid, engineEvent{}, ReasonJSON
	}
	obj, ok := lineObject(trimmed)
	if !ok {
		return lineInvalid, engineEvent{}, ReasonJSON
	}
	v, ok := obj["v"]
	if !ok {
		return lineInvalid, engineEvent{}, ReasonMissingField
	}
	if string(bytes.TrimSpace(v)) != "1" {
		return lineInvalid, engineEvent{}, ReasonVersion
	}
	rawType, ok := obj["type"]
	if !ok {
		return lineInvalid, engineEvent{}, ReasonMissingField
	}
	typ, ok := rawString(rawType)
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
	if ev.requestID, reason = requiredID(obj, "request_id"); reason != "" {
		return lineInvalid, engineEvent{}, reason
	}
	if ev.model, reason = requiredID(obj, "model"); reason != "" {
		return lineInvalid, engineEvent{}, reason
	}
	if ev.processed, ok = optionalCounter(obj, "tokens_processed"); !ok {
		return lineInvalid, engineEvent{}, ReasonField
	}
	if ev.generated, ok = optionalCounter(obj, "tokens_generated"); !ok {
		return lineInvalid, engineEvent{}, ReasonField
	}
	if raw, present := obj["finished"]; present {
		switch string(bytes.TrimSpace(raw)) {
		case "true":
			ev.finished = true
		case "false":
		default:
			return lineInvalid, engineEvent{}, ReasonField
		}
	}
	if ev.processed == nil && ev.generated == nil && !ev.finished {
		return lineInvalid, engineEvent{}, ReasonEmptyStats
	}
	return lineStats, ev, ""
}

// lineKeys are the members parseLine reads; lineObject keeps only these.
var lineKeys = []string{"v", "type", "request_id", "model", "tokens_processed", "tokens_generated", "finished"}

// lineObject decodes a line that starts with '{' into its members, as
// json.Unmarshal into a map would for the keys parseLine reads: ok is
// false for invalid JSON, and the last of duplicate keys wins. The engine
// sends lines for every request, so the members are read in place rather
// than decoded (a map entry and a value copy for every key); a key with
// escapes, whose decoded name only encoding/json knows, falls back to it.
func lineObject(line []byte) (map[string]json.RawMessage, bool) {
	if !json.Valid(line) {
		return nil, false
	}
	obj := make(map[string]json.RawMessage, len(lineKeys))
	if eachMember(line, func(k, v []byte) {
		for _, name := range lineKeys {
			if string(k) == name {
				obj[name] = v
				return
			}
		}
	}) {
		return obj, true
	}
	clear(obj)
	return obj, json.Unmarshal(line, &obj) == nil
}

// requiredID reads a required string that must be non-empty after
// trimming; it returns the trimmed value or the failure reason.
func requiredID(obj map[string]json.RawMessage, key string) (string, string) {
	raw, ok := obj[key]
	if !ok {
		return "", ReasonMissingField
	}
	s, ok := rawString(raw)
	if !ok {
		return "", ReasonField
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ReasonField
	}
	return s, ""
}

// optionalCounter reads an optional non-negative integer counter. ok is
// false when the key is present with anything else (a float, a negative
// number, a string, null, or a value above MaxCounterTokens: no request
// has that many tokens, and a sample measured from it would publish an
// impossible throughput).
func optionalCounter(obj map[string]json.RawMessage, key string) (*uint64, bool) {
	raw, present := obj[key]
	if !present {
		return nil, true
	}
	raw = bytes.TrimSpace(raw)
	if string(raw) == "-0" { // a JSON integer; upstream Stargate reads it as 0, so do we
		zero := uint64(0)
		return &zero, true
	}
	if v, ok := rawU64(raw); ok && v <= MaxCounterTokens { // ParseUint rejects 1.5, 1e3 and -1
		return &v, true
	}
	return nil, false
}
