// Package lbbench holds the load-balancer microbenchmark: upstream
// Stargate's lb-microbench methodology ("choose-only") rebuilt as Go
// benchmarks so our numbers compare with upstream's
// (docs/design/algorithms.md#microbenchmark-method). Each scenario resolves
// the algorithm through the same lb-config.json path the hub uses and times
// the resolve-and-choose step only, after a warm-up that fills the caches.
package lbbench
