// Package proxy is the hub's request path (hub.md §3): it parses the routing
// headers, runs the routing loop over the state store's snapshots with the
// target's load balancer, reserves load on the chosen cluster, sends the
// request over the chosen backend's tunnel, retries on the reference's
// rules (sibling backend first for a queue-estimate mismatch, another
// cluster for other retryable answers, excluded clusters never again), and
// streams the answer back flushing every chunk.
//
// It is the only package that knows both the state store and the load
// balancers; neither knows about HTTP.
package proxy
