package stats

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseLineClassifiesEveryReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		line   string
		kind   lineKind
		reason string
	}{
		{"blank", "", lineBlank, ""},
		{"whitespace only", " \t ", lineBlank, ""},
		{"ping", `{"v":1,"type":"ping"}`, linePing, ""},
		{"ping with unknown keys", `{"type":"ping","v":1,"extra":[1,2]}`, linePing, ""},
		{"invalid json", `{"v":1,`, lineInvalid, ReasonJSON},
		{"garbage", `hello`, lineInvalid, ReasonJSON},
		{"array", `[1,2]`, lineInvalid, ReasonNotObject},
		{"string", `"stats"`, lineInvalid, ReasonNotObject},
		{"number", `1`, lineInvalid, ReasonNotObject},
		{"null", `null`, lineInvalid, ReasonNotObject},
		{"v missing", `{"type":"ping"}`, lineInvalid, ReasonMissingField},
		{"v 2", `{"v":2,"type":"ping"}`, lineInvalid, ReasonVersion},
		{"v string", `{"v":"1","type":"ping"}`, lineInvalid, ReasonVersion},
		{"v float", `{"v":1.0,"type":"ping"}`, lineInvalid, ReasonVersion},
		{"v negative", `{"v":-1,"type":"ping"}`, lineInvalid, ReasonVersion},
		{"type missing", `{"v":1}`, lineInvalid, ReasonMissingField},
		{"type not string", `{"v":1,"type":7}`, lineInvalid, ReasonField},
		{"type unknown", `{"v":1,"type":"pong"}`, lineInvalid, ReasonType},
		{"request_id missing", `{"v":1,"type":"stats","model":"m","tokens_processed":1}`, lineInvalid, ReasonMissingField},
		{"model missing", `{"v":1,"type":"stats","request_id":"r","tokens_processed":1}`, lineInvalid, ReasonMissingField},
		{"request_id blank", `{"v":1,"type":"stats","request_id":"  ","model":"m","tokens_processed":1}`, lineInvalid, ReasonField},
		{"model blank", `{"v":1,"type":"stats","request_id":"r","model":"","tokens_processed":1}`, lineInvalid, ReasonField},
		{"request_id number", `{"v":1,"type":"stats","request_id":5,"model":"m","tokens_processed":1}`, lineInvalid, ReasonField},
		{"counter float", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_generated":1.5}`, lineInvalid, ReasonField},
		{"counter exponent", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_generated":1e3}`, lineInvalid, ReasonField},
		{"counter negative", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":-1}`, lineInvalid, ReasonField},
		{"counter string", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":"1"}`, lineInvalid, ReasonField},
		{"counter null", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":null}`, lineInvalid, ReasonField},
		{"counter overflow", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":18446744073709551616}`, lineInvalid, ReasonField},
		{"finished not bool", `{"v":1,"type":"stats","request_id":"r","model":"m","finished":1}`, lineInvalid, ReasonField},
		{"no counter", `{"v":1,"type":"stats","request_id":"r","model":"m"}`, lineInvalid, ReasonEmptyStats},
		{"no counter finished false", `{"v":1,"type":"stats","request_id":"r","model":"m","finished":false}`, lineInvalid, ReasonEmptyStats},
		{"finished only", `{"v":1,"type":"stats","request_id":"r","model":"m","finished":true}`, lineStats, ""},
		{"full stats", `{"v":1,"type":"stats","request_id":" r ","model":"m","tokens_processed":4096,"tokens_generated":128,"finished":true}`, lineStats, ""},
		{"counter at the bound", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":4294967296}`, lineStats, ""},
		{"counter above the bound", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_generated":4294967297}`, lineInvalid, ReasonField},
		{"max u64", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":18446744073709551615}`, lineInvalid, ReasonField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kind, _, reason := parseLine([]byte(tc.line))
			if kind != tc.kind || reason != tc.reason {
				t.Fatalf("parseLine(%s) = (%d, %q), want (%d, %q)", tc.line, kind, reason, tc.kind, tc.reason)
			}
		})
	}
}

func TestParseLineFields(t *testing.T) {
	t.Parallel()
	_, ev, _ := parseLine([]byte(`{"v":1,"type":"stats","request_id":" r ","model":" m ","tokens_processed":4096,"tokens_generated":128,"finished":true}`))
	if string(ev.requestID) != "r" || string(ev.model) != "m" || ev.processed != (count{4096, true}) ||
		ev.generated != (count{128, true}) || !ev.finished {
		t.Fatalf("event %+v", ev)
	}
	_, ev, _ = parseLine([]byte(`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":7}`))
	if ev.generated.ok || ev.finished || ev.processed != (count{7, true}) {
		t.Fatalf("event %+v", ev)
	}
}

func TestSplitterLines(t *testing.T) {
	t.Parallel()
	var got []string
	large := 0
	s := splitter{handle: func(l []byte) { got = append(got, string(l)) }, tooLarge: func() { large++ }}
	exact := strings.Repeat("a", MaxLineBytes)
	input := "one\r\ntwo\n\nthr" + "ee\n" + exact + "\r\n" + exact + "b\n" + strings.Repeat("c", 3*MaxLineBytes) + "\nfour\npartial"
	// Feed in awkward pieces to cross every boundary.
	for b := []byte(input); len(b) > 0; {
		n := min(len(b), 7919)
		s.write(b[:n])
		b = b[n:]
	}
	want := []string{"one", "two", "", "three", exact, "four"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %d, want %d: %q...", len(got), len(want), got[:min(len(got), 4)])
	}
	if large != 2 {
		t.Fatalf("too large %d, want 2", large)
	}
}

// FuzzParseLine checks parseLine against refParseLine, a statement of the
// line rules built on encoding/json alone: same kind, same reason, and for
// a stats event the same ids, counters and finished flag.
func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"type":"ping"}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":1,"tokens_generated":2,"finished":true}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":-0}`,
		`{"v":1,"type":"stats","request_id":" r\u0020","model":"m","tokens_generated":4294967296,"finished":false}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_generated":4294967297}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":null,"finished":true}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","finished":true,"finished":1}`,
		`{"\u0076":1,"type":"ping"}`, `{"v":1,"v":2,"type":"ping"}`, `{"v" : 1 ,"type":"stats","model":"m"}`,
		`{"v":1,"type":"stats"}`, `[]`, `{`, ``, `null`, `{"v":1e0}`, " \t", "\u00a0{}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		kind, ev, reason := parseLine(line)
		want := refParseLine(line)
		if kind != want.kind || reason != want.reason {
			t.Fatalf("parseLine(%q) = (%d, %q); the rules say (%d, %q)", line, kind, reason, want.kind, want.reason)
		}
		if kind != lineStats {
			return
		}
		if !bytes.Equal(ev.requestID, want.ev.requestID) || !bytes.Equal(ev.model, want.ev.model) || ev.finished != want.ev.finished ||
			ev.processed != want.ev.processed || ev.generated != want.ev.generated {
			t.Fatalf("parseLine(%q) = %+v; the rules say %+v", line, ev, want.ev)
		}
	})
}

// refLine is what refParseLine says about a line.
type refLine struct {
	kind   lineKind
	ev     engineEvent
	reason string
}

// refParseLine states the engine stats line rules with encoding/json
// doing all the decoding: blank after trimming is skipped; not JSON is
// "json"; JSON but not an object is "not_object"; then, in this order, v
// (present, the literal 1), type (present, a string, ping or stats),
// request_id and model (present, strings, non-blank; trimmed), the two
// counters (when present: non-negative integer literals, -0 read as 0, at
// most MaxCounterTokens), finished (when present: a boolean), and at least
// one counter or finished true. Object keys are exact and the last
// duplicate wins, as when decoding into a map.
func refParseLine(line []byte) refLine {
	invalid := func(reason string) refLine { return refLine{kind: lineInvalid, reason: reason} }
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return refLine{kind: lineBlank}
	}
	if !json.Valid(trimmed) {
		return invalid(ReasonJSON)
	}
	// UseNumber: a number too large for a float64 is still valid JSON.
	var doc any
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if dec.Decode(&doc) != nil {
		return invalid(ReasonJSON)
	}
	if _, isObj := doc.(map[string]any); !isObj || json.Unmarshal(trimmed, &obj) != nil {
		return invalid(ReasonNotObject)
	}
	v, ok := obj["v"]
	if !ok {
		return invalid(ReasonMissingField)
	}
	if string(v) != "1" {
		return invalid(ReasonVersion)
	}
	rawType, ok := obj["type"]
	if !ok {
		return invalid(ReasonMissingField)
	}
	var typ *string
	if json.Unmarshal(rawType, &typ) != nil || typ == nil {
		return invalid(ReasonField)
	}
	switch *typ {
	case "ping":
		return refLine{kind: linePing}
	case "stats":
	default:
		return invalid(ReasonType)
	}
	var ev engineEvent
	for _, id := range []struct {
		key string
		dst *[]byte
	}{{"request_id", &ev.requestID}, {"model", &ev.model}} {
		raw, ok := obj[id.key]
		if !ok {
			return invalid(ReasonMissingField)
		}
		var s *string
		if json.Unmarshal(raw, &s) != nil || s == nil || strings.TrimSpace(*s) == "" {
			return invalid(ReasonField)
		}
		*id.dst = []byte(strings.TrimSpace(*s))
	}
	for _, c := range []struct {
		key string
		dst *count
	}{{"tokens_processed", &ev.processed}, {"tokens_generated", &ev.generated}} {
		raw, ok := obj[c.key]
		if !ok {
			continue
		}
		var n *uint64
		switch {
		case string(raw) == "-0":
			n = new(uint64)
		case json.Unmarshal(raw, &n) != nil || n == nil || *n > MaxCounterTokens:
			return invalid(ReasonField)
		}
		*c.dst = count{n: *n, ok: true}
	}
	if raw, ok := obj["finished"]; ok {
		var b *bool
		if json.Unmarshal(raw, &b) != nil || b == nil {
			return invalid(ReasonField)
		}
		ev.finished = *b
	}
	if !ev.processed.ok && !ev.generated.ok && !ev.finished {
		return invalid(ReasonEmptyStats)
	}
	return refLine{kind: lineStats, ev: ev}
}

// FuzzSplitter feeds a byte stream in pieces of a fuzzed size to the line
// splitter, with a fuzzed line limit, and compares the lines and the
// oversize reports with refSplit. Every byte is accounted for: a line the
// splitter handles is exactly the bytes between two LFs, less one CR.
func FuzzSplitter(f *testing.F) {
	f.Add([]byte("one\r\ntwo\n\nthree"), uint8(3), uint8(0))
	f.Add([]byte("abcdef\nab\r\nabcdefg\r\nabcdefgh\nabc"), uint8(1), uint8(6))
	f.Add([]byte("\r\r\n\n\r"), uint8(200), uint8(1))
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), uint8(5), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, piece, limit uint8) {
		var got []string
		large := 0
		s := splitter{handle: func(l []byte) { got = append(got, string(l)) }, tooLarge: func() { large++ }, limit: int(limit)}
		for rest := data; len(rest) > 0; {
			n := min(len(rest), max(int(piece), 1))
			s.write(rest[:n])
			rest = rest[n:]
		}
		lim := int(limit)
		if lim == 0 {
			lim = MaxLineBytes
		}
		want, wantLarge := refSplit(data, lim)
		if !slices.Equal(got, want) || large != wantLarge {
			t.Fatalf("%q in pieces of %d, limit %d: lines %q (%d too large); want %q (%d)", data, piece, lim, got, large, want, wantLarge)
		}
	})
}

// refSplit states the splitting rules: lines end at LF and lose one CR
// before it; a line longer than limit (after that) is reported, not
// handled; the bytes after the last LF are a partial line, dropped, and
// reported only once they exceed limit+1 (room for a CR).
func refSplit(data []byte, limit int) (lines []string, tooLarge int) {
	parts := strings.Split(string(data), "\n")
	for _, l := range parts[:len(parts)-1] {
		l = strings.TrimSuffix(l, "\r")
		if len(l) > limit {
			tooLarge++
			continue
		}
		lines = append(lines, l)
	}
	if len(parts[len(parts)-1]) > limit+1 {
		tooLarge++
	}
	return lines, tooLarge
}
