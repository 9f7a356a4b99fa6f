// Package dispatch owns the hub's routing pass: one look at a routing
// snapshot that ends in a cluster choice, a wait, or a refusal
// (docs/design/hub-request.md#routing-pass).
//
// A pass applies input-work admission (max_input_work_seconds), counts the
// candidate and eligible clusters, asks the route's load balancer for a
// choice, decides which wait to take when there is none (the timed wait the
// load balancer asks for, or the untimed wait x-max-wait-ms allows), says
// why a request ends when nothing can be chosen, and classifies a chosen
// cluster as a primary or fallback selection, by rank and by the session
// rules of last_cluster_affinity, with the reason a choice leaves the
// session's own cluster (an escape). It keeps a request's first session
// classification for its later passes.
//
// Decide is a pure function of the route, the request's pass state, the
// snapshot, the time and the random source: it never sleeps, does no I/O
// and reads no clock. The proxy (hub/internal/proxy) and the routing
// simulator (hub/internal/sim) both run every pass through it and act on
// the outcome with one wake rule: a waiting request passes again at the
// end of Outcome.Wait or at its target's next waking publication
// (state.Store.PublishedAfter), whichever comes first. The proxy sleeps on
// its clock and the publication signal, the simulator schedules an event
// and wakes its sleepers when it applies a report. That is what makes the
// simulator's decisions the hub's decisions.
//
// The package imports only the routing types and the load-balancing seam
// (hub/internal/routing, hub/internal/lb): no state store, no proxy, no
// configuration.
package dispatch
