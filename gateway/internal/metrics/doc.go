// Package metrics defines every Prometheus series the gateway exports
// (gateway.md §6.1 and §7.7, docs/metrics.md "Gateway"), registered on a
// registry main injects, never the global one. Label values are bounded:
// route patterns, status codes, endpoint names, results and models from
// the operator's configuration.
package metrics
