package stats

import (
	"bytes"
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
		{"max u64", `{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":18446744073709551615}`, lineStats, ""},
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
	if ev.requestID != "r" || ev.model != "m" || ev.processed == nil || *ev.processed != 4096 ||
		ev.generated == nil || *ev.generated != 128 || !ev.finished {
		t.Fatalf("event %+v", ev)
	}
	_, ev, _ = parseLine([]byte(`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":7}`))
	if ev.generated != nil || ev.finished || *ev.processed != 7 {
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

func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"type":"ping"}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":1,"tokens_generated":2,"finished":true}`,
		`{"v":1,"type":"stats","request_id":"r","model":"m","tokens_processed":-0}`,
		`{"v":1,"type":"stats"}`, `[]`, `{`, ``, `null`, `{"v":1e0}`,
	} {
		f.Add([]byte(seed))
	}
	known := map[string]bool{}
	for _, r := range invalidReasons {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		kind, ev, reason := parseLine(line)
		switch kind {
		case lineBlank:
			if len(bytes.TrimSpace(line)) != 0 {
				t.Fatalf("non-blank line classified blank: %q", line)
			}
		case lineInvalid:
			if !known[reason] {
				t.Fatalf("unknown reason %q for %q", reason, line)
			}
		case linePing:
		case lineStats:
			if strings.TrimSpace(ev.requestID) == "" || ev.requestID != strings.TrimSpace(ev.requestID) || ev.model == "" {
				t.Fatalf("stats event with bad ids: %+v", ev)
			}
			if ev.processed == nil && ev.generated == nil && !ev.finished {
				t.Fatalf("empty stats accepted: %q", line)
			}
		default:
			t.Fatalf("unknown kind %d", kind)
		}
		if kind != lineInvalid && reason != "" {
			t.Fatalf("reason %q on a valid line", reason)
		}
	})
}
