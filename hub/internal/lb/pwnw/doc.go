// Package pwnw is the pulsar-wait-and-widen load balancer
// (docs/design/algorithms.md#pulsar-wait-and-widen): the pulsar
// weighted-rendezvous ranking orders the clusters for an affinity key; the
// first k form the affinity group, tried first with the prefill discount and
// waited for (a returning session's last cluster ahead of the rest, with
// returning_prefers_last_cluster); after the affinity wait the open set
// widens over the ranking one band (2, 4, 8, … clusters) per band interval.
// Selection inside a set is wait-and-widen's Selector. With prefix_affinity
// the clusters known to hold the request's prompt prefix move up the
// ranking, behind a promoted last cluster
// (docs/design/algorithms.md#prefix-affinity-option).
package pwnw
