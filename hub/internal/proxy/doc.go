// Package proxy is the hub's request path
// (docs/design/hub-request.md): it authenticates the caller with the
// gateway token (docs/hub.md#trust), parses the routing headers within
// their bounds, runs the routing loop — each pass decided by
// hub/internal/dispatch on the state store's current snapshot — reserves
// load on the chosen cluster, sends the
// request over the chosen backend's tunnel, retries (a sibling backend first
// for a queue-estimate mismatch, another cluster for other retryable
// answers, excluded clusters never again), and streams the answer back
// flushing every chunk. A request for a known model with no backend waits
// for one to register; every 503 it sends says when to retry.
//
// It is the only package that knows the state store, the tunnels and the
// load balancers together; none of them knows about HTTP, and nothing but
// the hub's command imports this package.
package proxy
