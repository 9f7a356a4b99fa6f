package fences

// Rules are the repository's architecture fences. docs/architecture.md#package-layout-and-fences
// explains the layering they keep.
var Rules = []Rule{
	{Name: "gateway-apart", From: "gateway/...", Deny: []string{"hub/...", "pylon/..."},
		Reason: "tiers are deployed and upgraded apart: the gateway reaches the hub over HTTP only (pkg/headers is the contract)"},
	{Name: "hub-apart", From: "hub/...", Deny: []string{"gateway/...", "pylon/..."},
		Reason: "tiers are deployed and upgraded apart: the hub knows gateways and pylons by the wire contract in pkg only"},
	{Name: "pylon-apart", From: "pylon/...", Deny: []string{"gateway/...", "hub/..."},
		Reason: "tiers are deployed and upgraded apart: the pylon reaches the hub through the tunnel protocol in pkg/protocol only"},
	{Name: "pkg-leaf", From: "pkg/...", Deny: []string{"gateway/...", "hub/...", "pylon/..."},
		Reason: "pkg is the shared leaf every tier imports; a tier import would tie the tiers (and the modules) together"},

	{Name: "routing-plain", From: "hub/internal/routing", Only: []string{"pkg/protocol"},
		Reason: "routing types are plain data every hub package shares; they import nothing of the hub"},
	{Name: "lb-pure", From: "hub/internal/lb/...", Only: []string{"hub/internal/lb/...", "hub/internal/routing", "pkg/protocol"},
		Reason: "algorithms are pure functions of a routing snapshot: they see routing types only, never state, config or the request path"},
	{Name: "dispatch-pure", From: "hub/internal/dispatch/...", Only: []string{"hub/internal/lb", "hub/internal/routing", "pkg/protocol"},
		Reason: "the routing pass is shared by the proxy and the simulator, so it sees only the route, the snapshot and the algorithms' seam"},
	{Name: "breaker-pure", From: "hub/internal/breaker", Only: []string{"pkg/clock"},
		Reason: "the error breaker is a pure state machine over a clock: the proxy reports outcomes to it, it knows no request, state or metric"},
	{Name: "state-owner", From: "hub/internal/state/...", Deny: []string{"hub/internal/lb/...", "hub/internal/lbconfig/...", "hub/internal/dispatch/...", "hub/internal/proxy/..."},
		Reason: "the state owner publishes snapshots for any algorithm; it knows no algorithm, no config and no request path"},
	{Name: "config-below", From: "hub/internal/lbconfig/...", Deny: []string{"hub/internal/proxy/...", "hub/internal/dispatch/...", "hub/internal/state/...", "hub/internal/tunnel/...", "hub/internal/sim/..."},
		Reason: "configuration is read at startup and on reload and sits below the request path: it builds routes, it does not serve them"},
	{Name: "proxy-top", From: "hub/...", Except: []string{"hub/cmd/hub", "hub/internal/app/...", "hub/internal/proxy/..."}, Deny: []string{"hub/internal/proxy/..."},
		Reason: "the proxy is the live request path: the simulator and tools share the routing pass (hub/internal/dispatch) instead"},
	{Name: "sim-offline", From: "hub/internal/sim/...", Deny: []string{"hub/internal/tunnel/..."},
		Reason: "the simulator runs a fleet in virtual time, without a network"},

	{Name: "tunnel-carries", From: "pylon/internal/tunnel/...", Deny: []string{"pylon/internal/engineproxy/...", "pylon/internal/stats/...", "pylon/internal/calibrate/..."},
		Reason: "the tunnel carries requests and registrations; it decides nothing about engines"},
	{Name: "stats-fed", From: "pylon/internal/stats/...", Deny: []string{"pylon/internal/engineproxy/...", "pylon/internal/tunnel/..."},
		Reason: "statistics are fed through interfaces their consumers declare, never by importing the request path"},

	{Name: "gateway-handlers-top", From: "gateway/internal/...", Except: []string{"gateway/internal/server/...", "gateway/internal/app/..."}, Deny: []string{"gateway/internal/server/..."},
		Reason: "the HTTP handlers are the top of the gateway; the parts they call know nothing of routing HTTP requests"},
}
