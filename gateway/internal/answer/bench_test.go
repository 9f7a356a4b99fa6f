package answer

import (
	"fmt"
	"strings"
	"testing"
)

// engineStream is a chat answer as the mock engine streams it: the role,
// 16 tokens, the finish, the usage chunk and [DONE].
func engineStream() string {
	var b strings.Builder
	chunk := func(delta, finish string) {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1733150000,"model":"mock","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	for i := range 16 {
		chunk(fmt.Sprintf(`{"content":" tok%d"}`, i), "null")
	}
	chunk(`{}`, `"stop"`)
	b.WriteString(`data: {"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1733150000,"model":"mock","choices":[],"usage":{"prompt_tokens":256,"completion_tokens":16,"total_tokens":272,"prompt_tokens_details":{"cached_tokens":192}}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// BenchmarkAggregate is a JSON client's answer: the engine's stream read
// event by event and folded into one chat.completion.
func BenchmarkAggregate(b *testing.B) {
	stream := engineStream()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rd := NewEventReader(strings.NewReader(stream))
		var agg ChatAggregator
		for {
			ev, err := rd.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Done() {
				break
			}
			if err := agg.Add(ev.Data); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := agg.Result("client/mock", "chat.completion"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInspect is a streaming client's answer: every event read and
// inspected on its way to the client.
func BenchmarkInspect(b *testing.B) {
	stream := engineStream()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rd := NewEventReader(strings.NewReader(stream))
		for {
			ev, err := rd.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Done() {
				break
			}
			_ = Inspect(ev.Data)
		}
	}
}
