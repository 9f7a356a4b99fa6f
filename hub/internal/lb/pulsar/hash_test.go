package pulsar

import (
	"bytes"
	"math"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// hashOf is the full hash of one (seed, target, key, cluster) through the
// production byte builder.
func hashOf(seed string, t routing.Target, key, clusterID string) uint64 {
	return newHasher(nil, seed, t, key).hash(clusterID)
}

// The hash input is a cross-implementation contract, so the expected bytes are
// written out by hand here rather than produced by the code under test.
func TestHashInputLayout(t *testing.T) {
	le := func(n byte) []byte { return []byte{n, 0, 0, 0, 0, 0, 0, 0} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tag := func(name, v string) []byte { return cat([]byte(name), []byte{0xFF}, le(byte(len(v))), []byte(v)) }

	if got, want := appendTag(nil, "ab", "xyz"), []byte{'a', 'b', 0xFF, 3, 0, 0, 0, 0, 0, 0, 0, 'x', 'y', 'z'}; !bytes.Equal(got, want) {
		t.Fatalf("appendTag = % x, want % x", got, want)
	}
	if got, want := appendTag(nil, "t", ""), []byte{'t', 0xFF, 0, 0, 0, 0, 0, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Fatalf("empty value: % x, want % x", got, want)
	}

	for _, tc := range []struct {
		name                 string
		seed, rk, model, key string
		cluster              string
	}{
		{"all set", "s", "rk", "m", "k", "c1"},
		{"absent seed, routing key and affinity key hash as empty", "", "", "m", "", "c1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := cat([]byte{0x01},
				tag("seed", tc.seed), tag("routing_key", tc.rk), tag("model_id", tc.model),
				tag("cache_affinity_key", tc.key), tag("cluster_id", tc.cluster))
			h := newHasher(nil, tc.seed, routing.Target{RoutingKey: tc.rk, Model: tc.model}, tc.key)
			// hash twice: the second must rewrite only the cluster tag.
			h.hash("some-other-cluster-id")
			got := h.hash(tc.cluster)
			if input := appendTag(h.buf, tagClusterID, tc.cluster); !bytes.Equal(input, want) {
				t.Fatalf("input\n got % x\nwant % x", input, want)
			}
			if got != xxh3.Hash(want) {
				t.Fatalf("hash %#x, want XXH3-64 of the input %#x", got, xxh3.Hash(want))
			}
		})
	}
}

// Pinned hashes (docs/design/algorithms.md#hashing). The first is upstream
// Stargate's own pinned value (its test
// pulsar_hash_is_pinned_to_a_fixed_algorithm_and_version, in
// crates/stargate/src/load_balancer/tests.rs), so it proves byte and hash
// compatibility with the Rust hub: a Go hub and a Rust hub send a key to the
// same cluster. The others were computed once by this implementation and
// guard against regressions (all-empty input; the first request of the
// lb-microbench fixture).
func TestHashPinned(t *testing.T) {
	for _, tc := range []struct {
		seed    string
		target  routing.Target
		key, id string
		want    uint64
	}{
		{"seed-1", routing.Target{RoutingKey: "rk-1", Model: "model-a"}, "prefix-123", "inst-a", 0x19443c44ec9f8abf},
		{"", routing.Target{}, "", "", 0x47195022e53c8586},
		{microbenchSeed, microbenchTarget, "cache-prefix-000000", "cluster-0000", 0xd30d028636cb5f53},
	} {
		if got := hashOf(tc.seed, tc.target, tc.key, tc.id); got != tc.want {
			t.Errorf("hash(%q, %+v, %q, %q) = %#x, want %#x", tc.seed, tc.target, tc.key, tc.id, got, tc.want)
		}
	}
}

// An input longer than the stack buffer still hashes the same bytes.
func TestHashLongInput(t *testing.T) {
	key := string(bytes.Repeat([]byte("k"), 3*stackBufSize))
	want := xxh3.Hash(appendTag(appendPrefix(nil, "s", routing.Target{Model: "m"}, key), tagClusterID, "c"))
	var stack [stackBufSize]byte
	if got := newHasher(stack[:], "s", routing.Target{Model: "m"}, key).hash("c"); got != want {
		t.Fatalf("long input: %#x, want %#x", got, want)
	}
}

func TestScore(t *testing.T) {
	// f64(u64::MAX) + 2 really is 2^64 in float64 arithmetic.
	maxU := uint64(math.MaxUint64)
	if d := float64(maxU) + 2; d != unitDenominator {
		t.Fatalf("runtime denominator %v, want %v", d, unitDenominator)
	}
	for _, tc := range []struct {
		name   string
		w      float64
		h      uint64
		want   float64
		ranked bool
	}{
		// u = 2^-64, e = 64·ln 2.
		{"smallest hash", 1000, 0, 1000 / (64 * math.Ln2), true},
		// u = 2^63/2^64 = 1/2 exactly, e = ln 2.
		{"half", 1000, 1<<63 - 1, 1000 / math.Ln2, true},
		// f64(h) rounds to 2^64, so u = 1 and e = -0: unranked.
		{"top hash rounds to u=1", 1000, math.MaxUint64, 0, false},
		{"top 2^10 hashes round to u=1", 1000, math.MaxUint64 - 1000, 0, false},
	} {
		got, ok := score(tc.w, tc.h)
		if ok != tc.ranked || got != tc.want {
			t.Errorf("%s: score = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ranked)
		}
	}
}
