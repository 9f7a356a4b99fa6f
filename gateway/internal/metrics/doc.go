// Package metrics defines every Prometheus series the gateway exports
// (docs/metrics.md, section "Gateway"), registered on a registry main
// injects, never the global one. Names, labels and buckets are upstream
// Stargate's gateway's, so its dashboards keep working; the session series
// (session_*, last_cluster_hint_results_total) are ours, since upstream's
// gateway never learns the hub's session class. Label values are bounded:
// route patterns, status codes, endpoint names, results and models from
// the operator's configuration.
package metrics
