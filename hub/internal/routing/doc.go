// Package routing holds the plain data that flows between the hub's routing
// state, its load balancers and its proxy: the routing target, the per-cluster
// view of one target, the immutable snapshot of all of a target's clusters,
// the request as a load balancer sees it, and the decision it returns.
//
// The package decides nothing and must not grow behaviour: no I/O, no locks,
// no clock, no randomness. Keeping it inert is what lets the same load
// balancers run unchanged in the live hub, in unit tests, in benchmarks and in
// an offline simulator (docs/architecture.md#package-layout-and-fences).
package routing
