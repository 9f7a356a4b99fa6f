package proxy

import (
	"net/http"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Generation is one load-balancer configuration as the proxy uses it. A
// request captures the current generation once, when it arrives, and is
// routed by it alone through every pass, wait and retry: a configuration
// swapped in meanwhile (SetGeneration) serves only later requests, so no
// request is ever routed partly by one file and partly by another
// (docs/load-balancing.md#changing-routing-live). A Generation is
// immutable once handed to the proxy.
type Generation struct {
	// Resolver turns the request's target and x-routing-method into its
	// route; its pickers hold this generation's per-target state.
	Resolver lb.Resolver
	// ConfiguredModel reports whether this configuration names model (see
	// Config.ConfiguredModel); nil names none.
	ConfiguredModel func(model string) bool
	// Hash names the configuration in the x-stargate-lb-config-hash
	// response header; empty sends no header (a hub without
	// --lb-config-path).
	Hash string

	hashValue []string // the header value, shared by every answer
}

// SetGeneration makes g the configuration of every request that arrives
// from now on; requests already in flight keep theirs.
func (p *Proxy) SetGeneration(g Generation) {
	if g.Hash != "" {
		g.hashValue = []string{g.Hash}
	}
	p.gen.Store(&g)
}

// canonLBConfigHash is x-stargate-lb-config-hash in canonical form, so
// setting it allocates nothing.
var canonLBConfigHash = http.CanonicalHeaderKey(headers.StargateLBConfigHash)

// stampGeneration names g on the answer to come: every answer the proxy
// writes after this (a 400 of the route, a wait's 503, the relayed
// upstream answer) carries the configuration that decided it.
func stampGeneration(h http.Header, g *Generation) {
	if g.hashValue != nil {
		h[canonLBConfigHash] = g.hashValue
	}
}
