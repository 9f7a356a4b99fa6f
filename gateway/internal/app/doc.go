// Package app brings the gateway up and down around its parts. New opens
// the listeners (the API one in TLS with --tls-cert-path) and the metrics
// registry; Run answers probes at once and
// the API with 503 until the embedded Olric node (when enabled) has
// started and joined, then wires the stores, the rate limiter (and runs
// the local mode's sync rounds, fed the Olric member count), the
// last-cluster tracker and the hub client into the HTTP server. When its
// context ends Run drains in order: HTTP first, then the rate limiter's
// last round and in-flight last-cluster writes (bounded), then a graceful
// Olric leave. main owns
// the configuration, the logger and the span export around it.
package app
