// Package proxy is the hub's request path
// (docs/design/hub-request.md): it parses the routing headers, runs the
// routing loop — each pass decided by hub/internal/dispatch on the state
// store's current snapshot — reserves load on the chosen cluster, sends the
// request over the chosen backend's tunnel, retries (a sibling backend first
// for a queue-estimate mismatch, another cluster for other retryable
// answers, excluded clusters never again), and streams the answer back
// flushing every chunk.
//
// It is the only package that knows the state store, the tunnels and the
// load balancers together; none of them knows about HTTP, and nothing but
// the hub's command imports this package.
package proxy
