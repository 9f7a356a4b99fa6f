// Package olricnode owns the gateway's embedded Olric member: configuration
// from the OLRIC_* settings (docs/gateway.md#olric), the shared secret
// (the data port's AUTH password and memberlist's encryption key are both
// derived from it), peer discovery (static peers or a Kubernetes headless
// Service resolved to pod IPs), start and join with a bound, Olric's logs
// bridged into slog, and a graceful leave. It hands out an embedded client
// (for the last-cluster DMap) and a cluster client routed to partition
// owners (for the rate limiter: Olric v0.7.4's embedded Incr is a Get and a
// Put under a lock local to the calling node, so only an Incr run on the
// key's owner is atomic across replicas); the cluster client dials the
// address the node bound and authenticates like every member. It makes no
// decision about what is stored.
package olricnode
