// Package lbbench holds the load-balancer microbenchmark: the reference
// hub's lb-microbench methodology (hub.md §9.2, "choose-only") rebuilt as Go
// benchmarks so our numbers compare with it. Each scenario resolves the
// algorithm through the same lb-config.json path the hub uses and times the
// resolve-and-choose step only, after a warm-up that fills the caches.
package lbbench
