// Package tunnel is the hub's end of the reverse tunnel: it accepts the
// connections pylons dial in, admits or refuses each one with a handshake,
// and then acts as the HTTP/2 client on that same connection, so every
// proxied request, the registration stream and the /health RTT probe are
// HTTP/2 streams the hub opens towards the pylon (docs/protocol.md).
//
// For each session the package reads the pylon's NDJSON registration stream
// and hands every snapshot, with the latest RTT measured over the tunnel, to
// a Handler; it closes a session whose registration stream goes idle or whose
// connection dies and then tells the Handler exactly once. It decides nothing
// about routing: what a registration means is the Handler's business, and
// which backend a request goes to is the proxy's, which asks RoundTripper
// for the session's HTTP/2 connection.
//
// The hub never dials: a pylon that cannot reach the hub's listener is not
// reachable at all, by design. Pylons open every connection, so the hub
// needs no inbound route into a cluster
// (docs/protocol.md#1-connection-lifecycle).
package tunnel
