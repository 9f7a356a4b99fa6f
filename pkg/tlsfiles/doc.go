// Package tlsfiles builds the tunnel's TLS configurations from files an
// operator mounts (a Kubernetes Secret, say): a server identity re-read on
// every handshake so a rotated certificate takes effect without a restart,
// and a client trust anchor. It owns nothing else.
package tlsfiles
