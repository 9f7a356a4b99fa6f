package prefix

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/request"
)

// BenchChat is a multi-turn chat body of about size bytes, as
// BenchmarkPrepare in the server package builds it. It is exported (to
// this package's tests only) for BenchmarkPrepareShare, which has to live
// in the external test package.
func BenchChat(size int) []byte {
	msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
	turn := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	for n := 0; n < size-len(turn); n += len(turn) + 32 {
		role := "user"
		if len(msgs)%2 == 0 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": turn})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": true, "max_tokens": 256})
	return b
}

// BenchmarkHeader is the summary's cost per request next to the parse it
// follows: "parse" is request.Parse alone, "summary" is Header on the
// parsed request (render the prompt into the hasher, hash every block,
// encode the header).
func BenchmarkHeader(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 512 << 10} {
		body := BenchChat(size)
		b.Run(fmt.Sprintf("%dKiB/parse", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, oe := request.Parse(request.Chat, body); oe != nil {
					b.Fatal(oe)
				}
			}
		})
		r, oe := request.Parse(request.Chat, body)
		if oe != nil {
			b.Fatal(oe)
		}
		b.Run(fmt.Sprintf("%dKiB/summary", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if Header(r, body) == "" {
					b.Fatal("no summary")
				}
			}
		})
	}
}

// BenchmarkMember is the scan for a chat's tools, which follow its
// messages in the body.
func BenchmarkMember(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10} {
		chat := BenchChat(size)
		body := append(chat[:len(chat)-1:len(chat)-1], `,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`...)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if member(body, "tools") == nil {
					b.Fatal("no tools")
				}
			}
		})
	}
}
