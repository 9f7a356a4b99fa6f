// Package hubclient sends the gateway's requests to the hubs: it builds
// the outbound request with exactly the headers of the gateway-hub
// contract (docs/design/headers.md#gateway-to-hub; nothing is copied from
// the client), authenticates the gateway to the hub with its own bearer
// token in place of the client's (read from its file again whenever the
// file changes), and owns the pool of hubs: the
// configured URLs resolved to one hub per address and re-resolved
// periodically, the pick of a hub per attempt (fewer exchanges in flight
// of two at random), the passive health that skips a hub whose exchange
// just failed, and one pooled transport per hub. It makes no routing
// decision and does not interpret responses; whether to retry is the
// server's call (docs/gateway.md#several-hubs).
package hubclient
