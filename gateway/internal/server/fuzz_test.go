package server

import (
	"net/http"
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/headers"
)

// FuzzPrepare: whatever the body and session/request-id headers, the
// gateway's preparation never panics, errors are 400s, and the outbound
// headers it would send hold only well-formed values.
func FuzzPrepare(f *testing.F) {
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), "sess", "rid", true)
	f.Add(1, []byte(`{"model":"fn/m","input":"x","conversation":{"id":"c"},"stream":false}`), "mt:v1:x:"+string(make([]byte, 0)), "", false)
	f.Add(2, []byte(`{"model":"m","prompt":"p","max_tokens":3}`), " \t", "\x00", true)
	f.Add(3, []byte(`{"model":"m","input":["a"]}`), "", "", false)
	models := config.Models{"*": {RequestSLOMs: 10}}
	f.Fuzz(func(t *testing.T, e int, body []byte, sess, rid string, prefix bool) {
		ep := request.Endpoint(((e % 4) + 4) % 4)
		h := http.Header{}
		if sess != "" {
			h.Set(headers.MultiTurnSessionID, sess)
		}
		p, oe := Prepare(ep, body, h, "req-1", prefix, models, 1, true)
		if oe != nil {
			if oe.Status != 400 {
				t.Fatalf("status %d", oe.Status)
			}
			return
		}
		out := p.Out.Header()
		for k, vs := range out {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] == 0x7f {
						t.Fatalf("header %s has control byte in %q", k, v)
					}
				}
			}
		}
		if ak := out.Get(headers.CacheAffinityKey); ak != "" && !session.IsAffinityKey(ak) {
			t.Fatalf("affinity key %q", ak)
		}
		if _, err := headers.ParseUint64(headers.InputTokens, out.Get(headers.InputTokens)); err != nil {
			t.Fatalf("x-input-tokens: %v", err)
		}
	})
}
