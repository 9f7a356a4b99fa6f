package mockengine

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/clock"
)

// BenchmarkRequestPath measures the engine's own work per non-streaming
// chat request with every modelled delay at zero: body read and decode,
// tokenising and hashing, admission, cache lookup and commit, response
// encoding. The prompt is a 1 KiB message on a shared 4 KiB system prompt,
// so each iteration hits the cache as a chat turn would.
func BenchmarkRequestPath(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "sse"
		}
		b.Run(name, func(b *testing.B) {
			e, _ := newEngine(b, fastConfig(), clock.Real{})
			h := e.Handler(nil)
			body := chatBody(stream, strings.Repeat("s", 4096), "ok", strings.Repeat("u", 1024))
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
