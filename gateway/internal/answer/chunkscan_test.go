package answer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// chunkSeeds are chunks as engines send them, and the corners where
// encoding/json's rules are easy to get wrong.
var chunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":2, "total_tokens":5}}`,
	`{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}}`,
	`{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":"x"},"refusal":"no","reasoning_content":"r","reasoning":"q"}}]}`,
	`{"choices":[{"index":0,"text":"legacy","logprobs":{"content":[{"token":"a","logprob":-0.1}]}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a\nb\t\"c\" \u00e9 \ud83d\ude00 \ud800 \udc00x \\ \/"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8 \xe2\x82\"}}]}",
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"error":"plain"}`,
	`{"error":null,"usage":null,"choices":null}`,
	`{"ID":"upper","Choices":[]}`,
	`{"id":"a","id":"b"}`,
	`{"i\u0064":"escaped key"}`,
	`{"created":1.5}`,
	`{"created":-0,"service_tier":"default","system_fingerprint":null}`,
	`{"choices":[null,{"index":2}]}`,
	`{"choices":[{"delta":null,"finish_reason":"length"}]}`,
	`{"choices":[{"index":"0"}]}`,
	`{"choices":{}}`,
	`  {"id" : "ws" , "choices" : [ { "index" : 0 , "delta" : { "content" : "x" } } ] }  `,
	`[DONE]`,
	`null`,
	`{"id":"trailing"} x`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}],"extra":[[[[[[[[[[1]]]]]]]]]]}`,
	`{"ſervice_tier":"folded"}`,
	`{"choices":[{"index":9223372036854775808}]}`,
	`{"choices":[{"delta":{"tool_calls":[null,{"function":null}]}}]}`,
}

// normalChunk makes chunks from both decoders comparable: empty slices
// as nil, and the content moved out of chunkScan's storage.
func normalChunk(c *chunk) {
	if len(c.Choices) == 0 {
		c.Choices = nil
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Delta.Content != nil {
			s := *ch.Delta.Content
			ch.Delta.Content = &s
		}
		ch.content = ""
		if len(ch.Delta.ToolCalls) == 0 {
			ch.Delta.ToolCalls = nil
		}
	}
}

// checkChunkScan: whatever chunkScan accepts, encoding/json accepts and
// decodes into the same chunk; without the header only the header
// fields differ. (That the walk underneath accepts exactly what
// encoding/json accepts is jsonscan's own test.)
func checkChunkScan(t *testing.T, data []byte) {
	t.Helper()
	var want chunk
	werr := json.Unmarshal(data, &want)
	got := chunk{Choices: make([]chunkChoice, 0, 1)}
	ok := (&chunkScan{b: data, c: &got, header: true}).scan()
	if ok {
		if werr != nil {
			t.Fatalf("chunkScan accepted %q, encoding/json: %v", data, werr)
		}
		normalChunk(&want)
		normalChunk(&got)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nchunkScan    %+v\nencoding/json %+v", data, got, want)
		}
		var body chunk
		if !(&chunkScan{b: data, c: &body}).scan() {
			t.Fatalf("%q: accepted with the header, refused without", data)
		}
		normalChunk(&body)
		body.ID, body.Created, body.Model, body.SystemFingerprint, body.ServiceTier = got.ID, got.Created, got.Model, got.SystemFingerprint, got.ServiceTier
		if !reflect.DeepEqual(body, got) {
			t.Fatalf("%q: without the header %+v, want %+v", data, body, got)
		}
	}
}

func TestChunkScanSeeds(t *testing.T) {
	for _, s := range chunkSeeds {
		checkChunkScan(t, []byte(s))
	}
	// The engines' common chunks take the fast path.
	for _, s := range chunkSeeds[:8] {
		if !(&chunkScan{b: []byte(s), c: &chunk{}, header: true}).scan() {
			t.Errorf("refused %s", s)
		}
	}
}

// FuzzChunkScan: chunkScan agrees with encoding/json on every input it
// accepts (checkChunkScan).
func FuzzChunkScan(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkChunkScan)
}

// TestAggregateFastAndSlow: a stream aggregates byte for byte the same
// whether its chunks take chunkScan or encoding/json (forced by an
// escaped key that chunkScan refuses).
func TestAggregateFastAndSlow(t *testing.T) {
	stream := []string{
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"c1","created":7,"model":"up","choices":[{"index":0,"delta":{"content":"Hel\"lo\n"},"logprobs":{"content":[{"token":"Hel","logprob":-0.5}]}}]}`,
		`{"id":"c1","created":7,"model":"up","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"id":"c1","created":7,"model":"up","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]},"finish_reason":"tool_calls"},{"index":0,"delta":{"refusal":"r","reasoning_content":"why"},"finish_reason":"stop"}]}`,
		`{"id":"c1","choices":[],"usage":{"prompt_tokens":4, "completion_tokens":2,"total_tokens":6}}`,
	}
	result := func(slow bool) string {
		var a ChatAggregator
		for _, c := range stream {
			if slow {
				c = strings.Replace(c, `{"id"`, `{"\u0069d"`, 1)
			}
			data := []byte(c)
			if err := a.Add(data); err != nil {
				t.Fatal(err)
			}
			for i := range data {
				data[i] = 'x' // Add keeps nothing of data
			}
		}
		out, err := a.Result("client/m", "chat.completion")
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	fast, slow := result(false), result(true)
	if fast != slow {
		t.Fatalf("chunkScan:\n%s\nencoding/json:\n%s", fast, slow)
	}
	if !strings.Contains(fast, `"content":"Hel\"lo\n"`) || !strings.Contains(fast, `"arguments":"{}"`) {
		t.Fatalf("unexpected answer %s", fast)
	}
}

// eventSeeds are Responses events, and chat chunks as Inspect sees them.
var eventSeeds = []string{
	`{"type":"response.created","response":{"id":"r1","status":"in_progress"},"sequence_number":0}`,
	`{"type":"response.output_text.delta","delta":"hello","sequence_number":4}`,
	`{"type":"response.completed","response":{"id":"r1","usage":{"input_tokens":7,"output_tokens":1,"total_tokens":8}},"sequence_number":"9"}`,
	`{"type":"error","code":"x","message":"m","sequence_number":3}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":null}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"","reasoning_content":"\u0000"}}]}`,
	`{"choices":[{"index":0,"text":""}],"usage":null,"error":null}`,
	`{"response":null,"type":"response.failed"}`,
	`{"response":{"Usage":{}}}`,
	`{"choices":[{"delta":{"Content":"x"}}]}`,
	`{"delta":5}`,
	`{"typ\u0065":"error","choices":[{"d\u0065lta":{"content":"x"}}]}`,
}

// checkInspectScan: whatever inspectScan accepts, Inspect's
// encoding/json reading gives the same EventInfo for.
func checkInspectScan(t *testing.T, data []byte) {
	t.Helper()
	fast, ok := inspectScan(data)
	if !ok {
		return
	}
	var ev eventFields
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("inspectScan accepted %q, encoding/json: %v", data, err)
	}
	slow := inspectJSON(data)
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: inspectScan %+v (usage %+v), encoding/json %+v (usage %+v)", data, fast, fast.Usage, slow, slow.Usage)
	}
}

func TestInspectScanSeeds(t *testing.T) {
	for _, s := range append(append([]string(nil), eventSeeds...), chunkSeeds...) {
		checkInspectScan(t, []byte(s))
	}
	for _, s := range eventSeeds[:3] {
		if _, ok := inspectScan([]byte(s)); !ok {
			t.Errorf("refused %s", s)
		}
	}
}

// FuzzInspectScan: inspectScan agrees with encoding/json on every event
// it accepts (checkInspectScan).
func FuzzInspectScan(f *testing.F) {
	for _, s := range append(append([]string(nil), eventSeeds...), chunkSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(checkInspectScan)
}
