package answer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestEventReader(t *testing.T) {
	in := ": comment\n\nevent: x\ndata: {\"a\":1}\ndata: {\"b\":2}\n\n\ndata:[DONE]\n\ndata: tail"
	rd := NewEventReader(strings.NewReader(in))
	var got []string
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(ev.Data)+"|"+ev.Type)
	}
	want := []string{"|", "{\"a\":1}\n{\"b\":2}|x", "[DONE]|", "tail|"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %q", got)
	}
}

// pieces is a body that arrives in the given reads, as an upstream that
// flushes each piece separately delivers it.
type pieces []string

func (p *pieces) Read(b []byte) (int, error) {
	if len(*p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, (*p)[0])
	if n == len((*p)[0]) {
		*p = (*p)[1:]
	} else {
		(*p)[0] = (*p)[0][n:]
	}
	return n, nil
}

// TestEventReaderLinesApart: an event whose blank line arrives in a later
// read than its data line keeps its data (the reader's buffer is reused
// by that read, so data must not point into it).
func TestEventReaderLinesApart(t *testing.T) {
	body := pieces{`data: {"a":1}` + "\n", "\n" + `data: {"b":2}` + "\n", "\n"}
	rd := NewEventReader(&body)
	var got []string
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(ev.Data))
	}
	if want := []string{`{"a":1}`, `{"b":2}`}; !slices.Equal(got, want) {
		t.Fatalf("data %q, want %q", got, want)
	}
}

func TestAggregateToolCalls(t *testing.T) {
	var a ChatAggregator
	for _, c := range []string{
		`{"id":"x","created":3,"model":"up","choices":[{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
		`{"id":"y","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"},{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":3}}}`,
	} {
		if err := a.Add([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := a.Result("client/model", "chat.completion")
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(b, &out)
	if out.ID != "x" || out.Model != "client/model" || len(out.Choices) != 2 || out.Choices[0].Index != 0 ||
		*out.Choices[0].Message.Content != "hi" || out.Choices[1].Message.ToolCalls[0].Function.Arguments != `{"a":1}` {
		t.Fatalf("%s", b)
	}
	u, ok := ParseUsage(a.Usage())
	if !ok || u.Cached != 3 || u.Total != 6 {
		t.Fatalf("usage %+v", u)
	}
	var empty ChatAggregator
	if _, err := empty.Result("", "chat.completion"); !errors.Is(err, ErrEmptyStream) {
		t.Fatal(err)
	}
}

func TestInspect(t *testing.T) {
	info := Inspect([]byte(`{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":1}}}`))
	if !info.Terminal || info.Usage == nil || info.Usage.Total != 6 {
		t.Fatalf("%+v", info)
	}
	if !Inspect([]byte(`{"choices":[{"delta":{"content":"x"}}]}`)).Output {
		t.Fatal("output not seen")
	}
}

// sseOracle is an independent reading of an SSE body by the rules
// EventReader documents: lines end at '\n' (the last one may not), a line
// whose content (without trailing '\r' and '\n') is empty ends the
// current event, or is dropped when no event has started; data lines
// join with '\n'; the event field is trimmed. events are the events a
// blank line ended; tail is an unfinished last event (nil when none).
type oracleEvent struct{ raw, data, typ string }

func sseOracle(in []byte) (events []oracleEvent, tail *oracleEvent) {
	var raw strings.Builder
	var typ string
	var data []string
	for _, line := range strings.SplitAfter(string(in), "\n") {
		if line == "" {
			continue
		}
		content := strings.TrimRight(line, "\r\n")
		if content == "" {
			if raw.Len() > 0 {
				raw.WriteString(line)
				events = append(events, oracleEvent{raw.String(), strings.Join(data, "\n"), typ})
			}
			raw.Reset()
			typ, data = "", nil
			continue
		}
		raw.WriteString(line)
		switch {
		case strings.HasPrefix(content, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(content, "data:"), " "))
		case strings.HasPrefix(content, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(content, "event:"))
		}
	}
	if raw.Len() > 0 {
		tail = &oracleEvent{raw.String(), strings.Join(data, "\n"), typ}
	}
	return events, tail
}

// readAll reads every event from r, failing if the reader does not end
// within the number of lines of the input plus one call (each event
// consumes at least one line): a reader that never ends is a failure,
// not a loop the fuzzer gives up on.
func readAll(t *testing.T, r io.Reader, lines int) ([]oracleEvent, error) {
	t.Helper()
	rd := NewEventReader(r)
	var got []oracleEvent
	for range lines + 2 {
		ev, err := rd.Next()
		if err != nil {
			return got, err
		}
		got = append(got, oracleEvent{string(ev.Raw), string(ev.Data), ev.Type})
	}
	t.Fatalf("the reader returned more than %d events from %d lines without ending", lines+2, lines)
	return nil, nil
}

// errCut stands for a broken upstream body.
var errCut = errors.New("stream cut")

// FuzzEventReader: whatever the body and however a reader splits it
// (whole, byte by byte, in halves, with its last data delivered together
// with io.EOF), the event reader ends, returns exactly the events the
// independent oracle finds (raw bytes, data and type), so every byte but
// the stray blank lines between events is relayed and none is dropped or
// invented, and the unfinished last event is returned at a clean end.
// When the body breaks instead of ending, the reader returns the events
// that were whole and then the read error, never io.EOF and never the
// unfinished event: a cut stream cannot pass for a complete one.
func FuzzEventReader(f *testing.F) {
	f.Add([]byte("data: x\n\n"))
	f.Add([]byte("event: e\r\ndata: {}\r\n\r\n: c\n\ndata: [DONE]\n\n"))
	f.Add([]byte("\n\n\ndata"))
	f.Add([]byte("data:a\ndata:  b\r\r\n\ndata: tail"))
	f.Fuzz(checkEventReader)
}

// TestEventReaderLongLines: lines longer than the reader's 32 KiB buffer
// keep every byte, by the same checks as FuzzEventReader (kept out of its
// seeds: a 40 KiB seed slows every fuzzing run a hundredfold).
func TestEventReaderLongLines(t *testing.T) {
	long := strings.Repeat("y", 40<<10)
	checkEventReader(t, []byte("data: "+long+"\n\nevent:  t \n: "+long+"\ndata:"+long+"\r\n\r\ndata: x"))
}

// checkEventReader is FuzzEventReader's property for one body.
func checkEventReader(t *testing.T, in []byte) {
	t.Helper()
	want, tail := sseOracle(in)
	lines := strings.Count(string(in), "\n") + 1
	whole := want
	if tail != nil {
		whole = append(whole[:len(whole):len(whole)], *tail)
	}
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(in),
		"one byte": iotest.OneByteReader(bytes.NewReader(in)),
		"halves":   iotest.HalfReader(bytes.NewReader(in)),
		"data+eof": iotest.DataErrReader(bytes.NewReader(in)),
	} {
		got, err := readAll(t, r, lines)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: ended with %v, want io.EOF", name, err)
		}
		if !slices.Equal(got, whole) {
			t.Fatalf("%s: events\n%q\nwant\n%q", name, got, whole)
		}
	}
	checkBuffered(t, in, lines)
	got, err := readAll(t, io.MultiReader(bytes.NewReader(in), iotest.ErrReader(errCut)), lines)
	if !errors.Is(err, errCut) {
		t.Fatalf("broken body: ended with %v, want the read error", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("broken body: events\n%q\nwant the whole ones\n%q", got, want)
	}
}

// FuzzAggregate: chunks carrying fuzzed text for fuzzed choice indices
// aggregate into what an independent fold of the same deltas gives:
// per choice, the content pieces concatenated in order, the tool-call
// arguments concatenated, the finish reason of its last chunk, choices
// sorted by index. Arbitrary chunk data never panics the aggregator, and
// whatever it accepts yields valid JSON.
func FuzzAggregate(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":2,"function":{"arguments":"a"}}]}}]}`), "Hel", "lo", uint8(0), uint8(0))
	f.Add([]byte(`{"error":{"message":"m"}}`), "a\"b<", "\u2028", uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, a, b string, ia, ib uint8) {
		var junk ChatAggregator
		if junk.Add(data) == nil {
			if out, err := junk.Result("m", "chat.completion"); err == nil && !json.Valid(out) {
				t.Fatalf("invalid JSON %s", out)
			}
		}

		// JSON carries only valid UTF-8 (encoding/json replaces the
		// rest), so the expected texts are what a JSON round trip of the
		// fuzzed ones gives.
		a, b = jsonString(t, a), jsonString(t, b)
		i, j := int(ia%3), int(ib%3)
		chunk := func(v any) []byte {
			out, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		type delta = map[string]any
		chunks := [][]byte{
			chunk(delta{"id": "x", "choices": []any{delta{"index": i, "delta": delta{"content": a}}}}),
			chunk(delta{"choices": []any{delta{"index": j, "delta": delta{"content": b}, "finish_reason": "stop"}}}),
			chunk(delta{"choices": []any{delta{"index": i, "delta": delta{"tool_calls": []any{delta{"index": 0, "function": delta{"arguments": b}}}}}}}),
			chunk(delta{"choices": []any{delta{"index": i, "delta": delta{"tool_calls": []any{delta{"index": 0, "function": delta{"arguments": a}}}}}}}),
		}
		content, finish := map[int]string{i: a}, map[int]string{}
		content[j] += b
		finish[j] = "stop"
		var agg ChatAggregator
		for _, c := range chunks {
			if err := agg.Add(c); err != nil {
				t.Fatalf("chunk %s: %v", c, err)
			}
		}
		out, err := agg.Result("m", "chat.completion")
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Choices []struct {
				Index   int `json:"index"`
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		idx := slices.Sorted(maps.Keys(content))
		if len(got.Choices) != len(idx) {
			t.Fatalf("%d choices, want %d: %s", len(got.Choices), len(idx), out)
		}
		for k, c := range got.Choices {
			n := idx[k]
			if c.Index != n || c.Message.Content == nil || *c.Message.Content != content[n] {
				t.Fatalf("choice %d: %s, want index %d content %q", k, out, n, content[n])
			}
			if fr, ok := finish[n]; ok != (c.FinishReason != nil) || ok && *c.FinishReason != fr {
				t.Fatalf("choice %d finish reason: %s", n, out)
			}
			wantTools := 0
			if n == i {
				wantTools = 1
			}
			if len(c.Message.ToolCalls) != wantTools || wantTools == 1 && c.Message.ToolCalls[0].Function.Arguments != b+a {
				t.Fatalf("choice %d tool calls: %s, want arguments %q", n, out, b+a)
			}
		}
	})
}

// jsonString is s after a JSON encoding and decoding.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUsagePhases: the Groq-style provider times of a usage object become
// phases in queue, prompt, completion order; absent or negative ones are
// left out and do not affect the token counts.
func TestUsagePhases(t *testing.T) {
	u, ok := ParseUsage(json.RawMessage(`{"prompt_tokens":3,"completion_tokens":2,"completion_time":1.5,"queue_time":0.25,"prompt_time":-1,"total_time":9}`))
	if !ok || u.Total != 5 || len(u.Phases) != 2 || u.Phases[0] != (PhaseTime{"queue", 0.25}) || u.Phases[1] != (PhaseTime{"completion", 1.5}) {
		t.Fatalf("%+v %v", u, ok)
	}
	if u, ok := ParseUsage(json.RawMessage(`{"input_tokens":3,"output_tokens":1}`)); !ok || u.Phases != nil {
		t.Fatalf("%+v", u)
	}
}

// TestChatAggregatorOutput: the aggregator reports output by Inspect's
// rule, so timing the first token of an aggregated answer agrees with the
// streamed one.
func TestChatAggregatorOutput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   bool
	}{
		{"role only", []string{`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`}, false},
		{"usage only", []string{`{"id":"c","choices":[],"usage":{"prompt_tokens":3}}`}, false},
		{"content", []string{`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}`, `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}`}, true},
		{"reasoning", []string{`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}`}, true},
		{"tool call", []string{`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}`}, true},
		{"completion text", []string{`{"id":"c","choices":[{"index":0,"text":"x"}]}`}, true},
	} {
		var agg ChatAggregator
		for _, c := range tc.chunks {
			if err := agg.Add([]byte(c)); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if agg.Output() != Inspect([]byte(c)).Output && !agg.Output() {
				t.Errorf("%s: aggregator and Inspect disagree on %s", tc.name, c)
			}
		}
		if agg.Output() != tc.want {
			t.Errorf("%s: Output() = %v, want %v", tc.name, agg.Output(), tc.want)
		}
	}
}

// countingReader counts the reads that reach it.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// checkBuffered: whenever Buffered says the next event is whole in the
// buffer, Next returns an event without reading; and in a body read whole
// at once (lines ended by LF or CRLF) every event but the last is
// reported buffered, so a relay writes a read's events with one flush. A
// relay flushes when Buffered is false, so a wrong true would hold events
// back until more arrive.
func checkBuffered(t *testing.T, in []byte, lines int) {
	t.Helper()
	for name, src := range map[string]func() io.Reader{
		"halves":   func() io.Reader { return iotest.HalfReader(bytes.NewReader(in)) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(in)) },
	} {
		cr := &countingReader{r: src()}
		rd := NewEventReader(cr)
		for range lines + 2 {
			buffered := rd.Buffered()
			before := cr.reads
			ev, err := rd.Next()
			if buffered && (err != nil || cr.reads != before) {
				t.Fatalf("%s: Buffered said the next event was whole, but Next read (%d reads, err %v)", name, cr.reads-before, err)
			}
			if err != nil {
				break
			}
			_ = ev
		}
		rd.Release()
	}
	want, _ := sseOracle(in)
	if len(in) > 32<<10 || bytes.Contains(bytes.ReplaceAll(in, []byte("\r\n"), nil), []byte("\r")) {
		// Longer than the buffer, or with a line ended by a lone CR,
		// which Buffered does not recognise (a flush too many).
		return
	}
	rd := NewEventReader(bytes.NewReader(in))
	defer rd.Release()
	for k := range want {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("event %d: %v", k, err)
		}
		if k < len(want)-1 && !rd.Buffered() {
			t.Fatalf("event %d of %d: the rest of a body read whole not reported buffered", k, len(want))
		}
	}
}
