// Package prefixaffinity is the prefix-affinity load balancer
// (docs/design/algorithms.md#prefix-affinity): it sends a request to a
// cluster that already holds the longest known prefix of its prompt, as the
// hub's prefix index reports it in routing.Request.Prefix, and combines that
// with the session's last-cluster hint. The decision falls through four
// tiers (cache, split, overflow, load) and never refuses while a cluster is
// selectable: saturation changes where a request goes and whether the
// serving cluster is recorded as a new holder, never whether it is served.
//
// The package decides only the cluster and the marking wish
// (Decision.PrefixMark); it never reads or writes the prefix index itself.
// The proxy records the holder once the chosen cluster's response headers
// arrive, so a cluster that refuses the request never becomes one.
//
// It also holds the pieces wait-and-widen and pulsar-wait-and-widen use for
// their prefix_affinity option: Band (the holders a request should prefer),
// Promote (moving them to the front of an affinity order) and Mark (the
// tier and marking wish of a decision those algorithms made).
//
// A Picker holds only its configuration, so one instance can serve every
// target and goroutine; randomness (tie-breaks only) comes from the caller's
// *rand.Rand.
package prefixaffinity
