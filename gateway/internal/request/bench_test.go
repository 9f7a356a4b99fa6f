package request

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkRewrite is the rewrite of a JSON client's chat body for the
// hub: stream forced on, usage asked for, the routed model set.
func BenchmarkRewrite(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10} {
		body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant."},` +
			`{"role":"user","content":"` + strings.Repeat("lorem ipsum ", size/12) + `"}],` +
			`"stream":false,"stream_options":{"x":1},"max_tokens":256}`)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Rewrite(body, true, true, "routed/m"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendString is the payload key's string encoder over prose:
// plain ASCII with a few newlines and quotes, and the same with a
// non-ASCII letter early on.
func BenchmarkAppendString(b *testing.B) {
	plain := strings.Repeat("The quick brown fox said \"hi\".\nThen it jumps over the lazy dog. ", 4096)
	for _, c := range []struct{ name, s string }{{"ascii", plain}, {"utf8", "Grüße, " + plain}} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 0, 2*len(c.s))
			b.SetBytes(int64(len(c.s)))
			b.ReportAllocs()
			for b.Loop() {
				buf = appendString(buf[:0], c.s)
			}
		})
	}
}
