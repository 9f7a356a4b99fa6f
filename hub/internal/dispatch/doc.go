// Package dispatch owns the hub's routing pass: one look at a routing
// snapshot that ends in a cluster choice, a wait, or a refusal
// (docs/design/hub-request.md#routing-pass).
//
// A pass applies input-work admission (max_input_work_seconds), counts the
// candidate and eligible clusters, asks the route's load balancer for a
// choice, decides which wait to take when there is none (the timed wait the
// load balancer asks for, or the untimed re-polls x-max-wait-ms allows), says
// why a request ends when nothing can be chosen, and classifies a chosen
// cluster as a primary or fallback selection, by rank and by the session
// rules of last_cluster_affinity. It keeps a request's first session
// classification for its later passes.
//
// Decide is a pure function of the route, the request's pass state, the
// snapshot, the time and the random source: it never sleeps, does no I/O
// and reads no clock. The proxy (hub/internal/proxy) and the routing
// simulator (hub/internal/sim) both run every pass through it and act on
// the outcome: the proxy sleeps on its clock and passes again, the
// simulator schedules an event. That is what makes the simulator's
// decisions the hub's decisions.
//
// The package imports only the routing types and the load-balancing seam
// (hub/internal/routing, hub/internal/lb): no state store, no proxy, no
// configuration.
package dispatch
