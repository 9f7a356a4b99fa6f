package kvcache

import (
	"slices"
	"testing"
)

// AppendBlockHashes lists exactly the stored blocks, named by the chain
// hashes a Sequence of the same content has, and leaves the eviction order
// alone: after listing, the least recently used block is still the one
// evicted next.
func TestAppendBlockHashes(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(4))
	if got := c.AppendBlockHashes(nil); len(got) != 0 {
		t.Fatalf("empty cache lists %d blocks", len(got))
	}
	store(c, "ab", "")
	store(c, "xy", "")
	want := append(c.NewSequence([]byte("ab")).BlockHashes(), c.NewSequence([]byte("xy")).BlockHashes()...)
	got := c.AppendBlockHashes([]uint64{42})
	if got[0] != 42 {
		t.Fatal("dst's contents were not kept")
	}
	got = got[1:]
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("hashes %x, want %x", got, want)
	}
	// "ab" is older than "xy": a new chain evicts b first, whatever the
	// listing did.
	store(c, "q", "")
	if peek(c, "ab") != 1 || peek(c, "xy") != 2 {
		t.Fatalf("after listing, eviction took ab=%d xy=%d stored blocks, want b evicted first", peek(c, "ab"), peek(c, "xy"))
	}
	checkInvariants(t, c)
}
