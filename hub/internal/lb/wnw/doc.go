// Package wnw is the wait-and-widen load balancer
// (docs/design/algorithms.md#wait-and-widen): requests prefer clusters whose
// estimated time to first token lies in the fastest bucket, and slower
// buckets unlock as the request waits. With an affinity key and
// cache_affinity_backend_selection_count, a consistent-hash ring picks the
// key's affinity group, which is tried first (with the prefill discount) and
// waited for up to cache_affinity_wait_ms before the whole set competes.
//
// It also owns the two pieces pulsar-wait-and-widen reuses: Selector, the
// bucket walk over any set of clusters (and Admits, whether one cluster
// alone would take a request), and ApplySession, the last_cluster_affinity
// rules that classify a request as new, returning or stale and promote a
// returning session's last cluster
// (docs/design/algorithms.md#last-cluster-promotion). With
// returning_prefers_last_cluster both pickers choose that cluster before
// the group competes whenever Admits says it can take the request
// (docs/design/algorithms.md#returning-sessions-stay-put). With
// prefix_affinity the clusters known to hold the request's prompt prefix
// move up to the front of the group, behind a promoted last cluster, and
// form the group of a request that has no ring group
// (docs/design/algorithms.md#prefix-affinity-option).
package wnw
