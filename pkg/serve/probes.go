package serve

import (
	"net/http"
	"sync/atomic"

	"github.com/stargate-router/stargate/pkg/openai"
)

// Readiness is the /readyz state of a binary: not ready until its
// dependencies are up, and not ready again once it starts draining, so load
// balancers stop sending before connections close.
type Readiness struct {
	ready atomic.Bool
}

// Set marks the binary ready or not.
func (r *Readiness) Set(ready bool) { r.ready.Store(ready) }

// Ready reports the current state.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Probes adds GET /healthz (alive: always 200 while serving) and GET /readyz
// (200 when r is ready, else 503 in the OpenAI error shape) to mux.
func Probes(mux *http.ServeMux, r *Readiness) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			openai.WriteError(w, openai.Unavailable("not_ready", "not ready: starting or draining"))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ready\n"))
	})
}

// NotFound answers every request no route claimed with an OpenAI-shaped 404.
func NotFound(w http.ResponseWriter, r *http.Request) {
	openai.WriteError(w, openai.NotFound("no route for %s %s", r.Method, r.URL.Path))
}
