package answer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
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

// FuzzEventReader: the SSE reader never panics, always ends, and relays every
// byte it consumed.
func FuzzEventReader(f *testing.F) {
	f.Add([]byte("data: x\n\n"))
	f.Add([]byte("event: e\r\ndata: {}\r\n\r\n: c\n\ndata: [DONE]\n\n"))
	f.Add([]byte("\n\n\ndata"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewEventReader(bytes.NewReader(in))
		var relayed []byte
		for range len(in) + 2 {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			relayed = append(relayed, ev.Raw...)
			_ = Inspect(ev.Data)
		}
		if len(relayed) > len(in) {
			t.Fatalf("relayed %d bytes of %d", len(relayed), len(in))
		}
	})
}

// FuzzAggregate: arbitrary chunk data never panics the aggregator.
func FuzzAggregate(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":2,"function":{"arguments":"a"}}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a ChatAggregator
		if a.Add(data) == nil {
			if b, err := a.Result("m", "chat.completion"); err == nil && !json.Valid(b) {
				t.Fatalf("invalid JSON %s", b)
			}
		}
	})
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
