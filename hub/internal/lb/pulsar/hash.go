package pulsar

import (
	"math"

	"github.com/zeebo/xxh3"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// hashVersion is the first byte of every hash input. Changing anything about
// the input layout must change it, so that rankings from incompatible
// versions cannot be mistaken for each other.
const hashVersion = 0x01

// Tag names of the hash input, in input order.
const (
	tagSeed             = "seed"
	tagRoutingKey       = "routing_key"
	tagModelID          = "model_id"
	tagCacheAffinityKey = "cache_affinity_key"
	tagClusterID        = "cluster_id"
)

// stackBufSize is the hash input that fits on the stack. Tag overhead is
// about 110 bytes plus the routing key, model and seed, so every cacheable key
// (≤ MaxCacheableKeyLen bytes) and uncacheable keys up to roughly 700 bytes
// hash without allocating; longer inputs cost one heap buffer per ranking.
const stackBufSize = 1024

// appendTag is lb.AppendTag.
func appendTag(dst []byte, t, v string) []byte { return lb.AppendTag(dst, t, v) }

// appendPrefix appends the part of the hash input that is the same for every
// cluster of one ranking: 0x01 ‖ tag(seed) ‖ tag(routing_key) ‖
// tag(model_id) ‖ tag(cache_affinity_key). An absent routing key, seed or
// affinity key hashes as "".
func appendPrefix(dst []byte, seed string, t routing.Target, key string) []byte {
	dst = append(dst, hashVersion)
	dst = appendTag(dst, tagSeed, seed)
	dst = appendTag(dst, tagRoutingKey, t.RoutingKey)
	dst = appendTag(dst, tagModelID, t.Model)
	return appendTag(dst, tagCacheAffinityKey, key)
}

// hasher hashes one ranking's clusters: its buffer holds the shared prefix,
// and each hash appends only the cluster tag after it. It is a value type on
// purpose: storing the buffer through a pointer would make the caller's stack
// array escape to the heap, and hashing must not allocate.
type hasher struct {
	buf []byte // the prefix; spare capacity takes the cluster tag
}

// clusterTagRoom is the spare capacity kept after the prefix: the cluster tag
// is 19 bytes plus the id, so ids up to 100 bytes never reallocate.
const clusterTagRoom = 128

// newHasher builds the prefix into buf's storage (normally a stack array of
// the caller's). Only a prefix too long for it costs one heap buffer.
func newHasher(buf []byte, seed string, t routing.Target, key string) hasher {
	b := appendPrefix(buf[:0], seed, t, key)
	if cap(b)-len(b) < clusterTagRoom {
		b = append(make([]byte, 0, len(b)+clusterTagRoom), b...)
	}
	return hasher{buf: b}
}

// hash is XXH3-64 (seed 0) of prefix ‖ tag(cluster_id, id).
func (h hasher) hash(clusterID string) uint64 {
	return xxh3.Hash(appendTag(h.buf, tagClusterID, clusterID))
}

// unitDenominator is f64(u64::MAX) + 2 evaluated in float64, upstream
// Stargate's denominator: u64::MAX rounds up to 2^64 and adding 2 is lost
// below half an ulp (2048) at that magnitude, so it is exactly 2^64. Using
// the float64 result, not the exact rational, keeps scores bit-identical
// with upstream's.
const unitDenominator = 0x1p64

// score turns a cluster's hash and weight into its rendezvous score w/e with
// e = −ln u and u = (f64(h) + 1) / 2^64 in float64 arithmetic, exactly
// upstream Stargate's operations in its order, so both implementations rank
// alike (docs/design/algorithms.md#pulsar). The minimum of exponential
// variables with rates w is the cluster with the greatest w/e, so each
// cluster wins a key with probability proportional to its weight, and
// removing one cluster moves only the keys it owned. ok is false when e is
// not finite or not positive: u rounds to 1 for the top ~2^-53 of hashes,
// giving e = 0, and such a cluster is left out of the ranking.
func score(w float64, h uint64) (float64, bool) {
	u := (float64(h) + 1) / unitDenominator
	e := -math.Log(u)
	if math.IsInf(e, 0) || math.IsNaN(e) || e <= 0 {
		return 0, false
	}
	return w / e, true
}
