package prefixhash

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// refHashes is the documented chain hash computed independently, through
// the library's streaming hasher rather than its one-shot functions: the
// 64-bit XXH3 of each block seeded with the previous block's hash (Seed
// before the first).
func refHashes(data []byte, bb int) []uint64 {
	var out []uint64
	prev := Seed
	for len(data) >= bb {
		h := xxh3.NewSeed(prev)
		_, _ = h.Write(data[:bb])
		prev = h.Sum64()
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

// TestChainPinned pins the hashes every summary and every mock-engine
// cache key depend on; changing any of them is a new Version. The values
// come from the xxHash reference C library (libxxhash 0.8.1,
// XXH3_64bits_withSeed), not from the Go library under test, so a change
// of library or a bug in it shows here.
func TestChainPinned(t *testing.T) {
	t.Parallel()
	if Seed != 0x9e3779b97f4a7c15 {
		t.Fatalf("Seed = %#x", Seed)
	}
	if DefaultBlockBytes != 64 || BlockBytes(DefaultBlockTokens, DefaultCharsPerToken) != 64 {
		t.Fatalf("default block is %d bytes, want 64", BlockBytes(DefaultBlockTokens, DefaultCharsPerToken))
	}
	if got := BlockHash(Seed, bytes.Repeat([]byte("a"), 64)); got != 0xeb3dbed8e5009867 {
		t.Errorf("BlockHash(Seed, 64 x 'a') = %#x, want 0xeb3dbed8e5009867", got)
	}
	// A block longer than 240 bytes takes XXH3's long-input path, whose
	// seeded form derives its own secret.
	long := make([]byte, 300)
	for i := range long {
		long[i] = byte(i)
	}
	if got := BlockHash(Seed, long); got != 0xad52c32b38775706 {
		t.Errorf("BlockHash(Seed, 300 bytes) = %#x, want 0xad52c32b38775706", got)
	}
	prompt := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5))
	hashes, rest := AppendBlocks(nil, Seed, DefaultBlockBytes, nil, prompt)
	want := []uint64{0xa215082e63bf85f0, 0xacb64d36a0749eee, 0x41c24b957bd87127}
	if len(hashes) != len(want) || len(rest) != len(prompt)-3*64 {
		t.Fatalf("%d bytes: %d blocks and %d left over", len(prompt), len(hashes), len(rest))
	}
	for i := range want {
		if hashes[i] != want[i] {
			t.Errorf("block %d: %#x, want %#x", i, hashes[i], want[i])
		}
	}
	const header = "2.16.3.ohUILmO_hfCstk02oHSe7kHCS5V72HEn"
	if got := FormatHeader(Summarize(hashes, DefaultBlockTokens)); got != header {
		t.Errorf("header %q, want %q", got, header)
	}
}

// TestChainProperty: a block's hash names the whole prefix up to it. The
// same block after different prefixes hashes differently, a changed byte
// changes the hash of its block and of every block after it and of none
// before, and a prompt of one block repeated never repeats a hash (a chain
// that only combined each block's own hash with its parent's could cycle).
func TestChainProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	const bb = DefaultBlockBytes
	data := randomText(rng, 40*bb)
	base, _ := AppendBlocks(nil, Seed, bb, nil, data)
	for _, at := range []int{0, 1, bb - 1, bb, 17*bb + 5, 40*bb - 1} {
		changed := bytes.Clone(data)
		changed[at] ^= 1
		got, _ := AppendBlocks(nil, Seed, bb, nil, changed)
		for i := range base {
			if same := got[i] == base[i]; same != (i < at/bb) {
				t.Fatalf("byte %d changed: block %d hash unchanged=%v", at, i, same)
			}
		}
	}
	block := data[:bb]
	if BlockHash(base[0], block) == BlockHash(base[1], block) {
		t.Fatal("the same block after two different prefixes has one hash")
	}
	const n = 200_000
	rep, _ := AppendBlocks(nil, Seed, bb, nil, bytes.Repeat(block, n))
	seen := make(map[uint64]int, n)
	for i, h := range rep {
		if j, ok := seen[h]; ok {
			t.Fatalf("a repeated block: hash of block %d equals block %d's", i, j)
		}
		seen[h] = i
	}
}

func TestAppendBlocksMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bb := range []int{1, 3, 64, 300} { // 300: past the stack buffer, and XXH3's long path
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
