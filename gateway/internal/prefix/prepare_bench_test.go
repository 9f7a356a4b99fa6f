package prefix_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/prefix"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/gateway/internal/server"
)

// BenchmarkPrepareShare is the gateway's whole per-request work before any
// I/O (server.Prepare: parse, session, estimates, hub headers) with the
// prompt summary off and on, at the prompt sizes the summary's cost is
// stated for. The difference between the two is the summary's share of
// the request's CPU. It lives here, in an external test package, because
// the server package imports this one.
func BenchmarkPrepareShare(b *testing.B) {
	models := config.Models{"m": {RequestSLOMs: 1000, MaxWaitMs: 500}}
	for _, size := range []int{1 << 10, 32 << 10, 512 << 10} {
		body := prefix.BenchChat(size)
		for _, on := range []bool{false, true} {
			name := "off"
			if on {
				name = "on"
			}
			b.Run(fmt.Sprintf("%dKiB/summary-%s", size>>10, name), func(b *testing.B) {
				h := http.Header{}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					p, oe := server.Prepare(request.Chat, body, h, "req-1", server.Options{Models: models, DefaultMaxOutputTokens: 1, PromptPrefix: on})
					if oe != nil {
						b.Fatal(oe)
					}
					if (p.Out.PromptPrefix != "") != on {
						b.Fatalf("summary %v, header %q", on, p.Out.PromptPrefix)
					}
					_ = p.Out.Header()
				}
			})
		}
	}
}
