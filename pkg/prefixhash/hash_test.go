package prefixhash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// refHashes is the documented chain hash computed independently: the first
// 8 bytes (big-endian) of SHA-256 over the parent hash (Seed before the
// first block), the block length as uint32 and the block.
func refHashes(data []byte, bb int) []uint64 {
	var out []uint64
	prev := Seed
	for len(data) >= bb {
		h := sha256.New()
		var hdr [12]byte
		binary.BigEndian.PutUint64(hdr[:8], prev)
		binary.BigEndian.PutUint32(hdr[8:], uint32(bb))
		h.Write(hdr[:])
		h.Write(data[:bb])
		prev = binary.BigEndian.Uint64(h.Sum(nil))
		out = append(out, prev)
		data = data[bb:]
	}
	return out
}

func randomText(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return b
}

// TestSeedAndFirstBlockPinned pins the constants every summary and every
// mock-engine cache key depend on: changing either is a new Version.
func TestSeedAndFirstBlockPinned(t *testing.T) {
	t.Parallel()
	if Seed != 0x9e3779b97f4a7c15 {
		t.Fatalf("Seed = %#x", Seed)
	}
	got := BlockHash(Seed, bytes.Repeat([]byte("a"), DefaultBlockBytes))
	want := refHashes(bytes.Repeat([]byte("a"), DefaultBlockBytes), DefaultBlockBytes)[0]
	if got != want {
		t.Fatalf("BlockHash = %#x, want %#x", got, want)
	}
	if DefaultBlockBytes != 64 || BlockBytes(DefaultBlockTokens, DefaultCharsPerToken) != 64 {
		t.Fatalf("default block is %d bytes, want 64", BlockBytes(DefaultBlockTokens, DefaultCharsPerToken))
	}
}

func TestAppendBlocksMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bb := range []int{1, 3, 64, 300} { // 300 > stack scratch: the heap path
		for _, n := range []int{0, 1, bb - 1, bb, bb + 1, 5*bb + 7} {
			data := randomText(rng, n)
			got, rest := AppendBlocks(nil, Seed, bb, nil, data)
			want := refHashes(data, bb)
			if len(got) != len(want) {
				t.Fatalf("bb=%d n=%d: %d hashes, want %d", bb, n, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("bb=%d n=%d: hash[%d] = %#x, want %#x", bb, n, i, got[i], want[i])
				}
				if bh := BlockHash(prevOf(want, i), data[i*bb:(i+1)*bb]); bh != want[i] {
					t.Fatalf("BlockHash of block %d = %#x, want %#x", i, bh, want[i])
				}
			}
			if !bytes.Equal(rest, data[len(want)*bb:]) {
				t.Fatalf("bb=%d n=%d: rest %q", bb, n, rest)
			}
			// Split anywhere, the tail carried over continues the chain.
			cut := rng.IntN(n + 1)
			h1, tail := AppendBlocks(nil, Seed, bb, nil, data[:cut])
			h2, rest2 := AppendBlocks(h1, prevOf(h1, len(h1)), bb, tail, data[cut:])
			if len(h2) != len(want) || !bytes.Equal(rest2, rest) {
				t.Fatalf("bb=%d n=%d cut=%d: split gives %d hashes", bb, n, cut, len(h2))
			}
			for i := range want {
				if h2[i] != want[i] {
					t.Fatalf("bb=%d n=%d cut=%d: hash[%d] differs", bb, n, cut, i)
				}
			}
		}
	}
}

// prevOf is the parent of block i: Seed for the first.
func prevOf(hashes []uint64, i int) uint64 {
	if i == 0 {
		return Seed
	}
	return hashes[i-1]
}

func TestAppendBlocksRestDoesNotAlias(t *testing.T) {
	t.Parallel()
	data := []byte("abcdefghij")
	_, rest := AppendBlocks(nil, Seed, 4, nil, data)
	rest[0] = 'X'
	if data[8] != 'i' {
		t.Fatal("rest aliases the input")
	}
}
