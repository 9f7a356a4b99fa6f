// Package olricnode owns the gateway's embedded Olric member: configuration
// from the gateway.md §4.1 settings, peer discovery (static peers or a
// Kubernetes headless Service resolved to pod IPs), start and join with a
// bound, Olric's logs bridged into slog, and a graceful leave. It hands out
// an embedded client (for the last-cluster DMap) and a cluster client
// routed to partition owners (for the rate limiter, whose counters need
// Incr to run on the owner to be atomic across replicas; tooling.md §10).
// It makes no decision about what is stored.
package olricnode
