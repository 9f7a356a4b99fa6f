// Package wnw is the wait-and-widen load balancer
// (docs/design/algorithms.md#wait-and-widen): requests prefer clusters whose
// estimated time to first token lies in the fastest bucket, and slower
// buckets unlock as the request waits. With an affinity key and
// cache_affinity_backend_selection_count, a consistent-hash ring picks the
// key's affinity group, which is tried first (with the prefill discount) and
// waited for up to cache_affinity_wait_ms before the whole set competes.
//
// It also owns the two pieces pulsar-wait-and-widen reuses: Selector, the
// bucket walk over any set of clusters, and ApplySession, the
// last_cluster_affinity rules that classify a request as new, returning or
// stale and promote a returning session's last cluster
// (docs/design/algorithms.md#last-cluster-promotion).
package wnw
