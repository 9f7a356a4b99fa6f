// Package pulsar is the pulsar load balancer
// (docs/design/algorithms.md#pulsar): weighted rendezvous hashing over a
// target's clusters, so that each cache-affinity key has a stable,
// capacity-weighted preference order and requests sharing a key land on the
// same cluster while it can take them.
//
// The package owns three things:
//   - the ranking: the exact hash input bytes, the XXH3-64 hash, the weight
//     (max_input_tps by default, last_mean_input_tps in legacy mode) and the
//     order (Ranker), optionally by RTT tier first (rtt_tier_ms,
//     docs/design/algorithms.md#rtt-tiers). The bytes and the float
//     arithmetic are a cross-replica and cross-implementation contract: a
//     one-byte difference moves every key to another cluster. Tiers reorder
//     clusters by the hub's measured RTT and never touch the bytes.
//   - the per-key ranking cache inside a Ranker, an optimisation that must
//     never change a result.
//   - the choice (Picker): the first cluster in ranking order that is not
//     excluded and, when configured, has room in its KV cache.
//
// pulsar-wait-and-widen reuses Ranker, KVFeasible and Weighted; it does not
// reuse Picker. Nothing here reads a clock or a random source: a decision is a
// function of the request, the snapshot and the configuration.
package pulsar
