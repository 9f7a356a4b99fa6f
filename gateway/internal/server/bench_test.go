package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/request"
)

// chatBody returns a multi-turn chat body of about size bytes.
func chatBody(size int, stream bool, pck bool) []byte {
	var msgs []map[string]string
	msgs = append(msgs, map[string]string{"role": "system", "content": "You are a helpful assistant."})
	turn := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20) // ~900 B
	for n := 0; n < size-len(turn); n += len(turn) + 32 {
		role := "user"
		if len(msgs)%2 == 0 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": turn})
	}
	body := map[string]any{"model": "m", "messages": msgs, "stream": stream, "max_tokens": 256}
	if pck {
		body["prompt_cache_key"] = "session-123"
	}
	b, _ := json.Marshal(body)
	return b
}

// BenchmarkPrepare is the gateway's own work per request before any I/O:
// parse, derive the session, estimate tokens, build headers and (for a
// non-streaming client) rewrite the body to a stream.
func BenchmarkPrepare(b *testing.B) {
	models := config.Models{"m": {RequestSLOMs: 1000, MaxWaitMs: 500}}
	for _, size := range []int{1 << 10, 32 << 10, 256 << 10} {
		for _, c := range []struct {
			name        string
			stream, pck bool
		}{{"stream-pck", true, true}, {"stream-payload", true, false}, {"nonstream-pck", false, true}} {
			body := chatBody(size, c.stream, c.pck)
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				h := http.Header{}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					p, oe := Prepare(request.Chat, body, h, "req-1", Options{Models: models, DefaultMaxOutputTokens: 1, PromptPrefix: true})
					if oe != nil {
						b.Fatal(oe)
					}
					_ = p.Out.Header()
				}
			})
		}
	}
}

// BenchmarkPrepareAnchor is what the conversation anchor adds to a
// keyless request's preparation (the payload key's hash is shared, the
// anchor is summed at the first user message on the way). Compare with
// benchstat -col /anchor.
func BenchmarkPrepareAnchor(b *testing.B) {
	models := config.Models{"m": {RequestSLOMs: 1000, MaxWaitMs: 500}}
	for _, size := range []int{1 << 10, 32 << 10, 256 << 10} {
		body := chatBody(size, true, false)
		for _, on := range []bool{false, true} {
			name := "off"
			if on {
				name = "on"
			}
			b.Run(fmt.Sprintf("size=%dKiB/anchor=%s", size>>10, name), func(b *testing.B) {
				h := http.Header{}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					p, oe := Prepare(request.Chat, body, h, "req-1", Options{Models: models, DefaultMaxOutputTokens: 1, PromptPrefix: true, Anchor: on})
					if oe != nil || (p.Session.Anchor.Key != "") != on {
						b.Fatal(oe, p.Session.Anchor)
					}
				}
			})
		}
	}
}
