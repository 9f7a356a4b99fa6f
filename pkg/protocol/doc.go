// Package protocol is the hub<->pylon wire contract: the handshake a pylon
// sends when it dials a hub, the hub's answer, the registration snapshots the
// pylon streams over the tunnel, and the per-model statistics they carry
// (upstream Stargate's ModelStats, field for field;
// docs/design/statistics.md#fields).
//
// The transport is one TCP (optionally TLS) connection per (pylon, hub) pair,
// opened by the pylon. After the handshake frames, the pylon serves HTTP/2 on
// the connection and the hub is the HTTP/2 client: the registration stream,
// the /health RTT probe and every proxied request are HTTP/2 streams on it.
// docs/protocol.md describes the exchange; this package owns only the
// message shapes, their versioning and their framing.
package protocol
