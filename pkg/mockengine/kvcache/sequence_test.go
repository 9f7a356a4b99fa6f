package kvcache

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestSequenceTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        Config
		bytes      int
		wantBlocks int
		wantTokens int
	}{
		{"empty counts one token", Config{}, 0, 0, 1},
		{"short tail rounds up", Config{}, 3, 0, 1},
		{"one block", Config{}, 64, 1, 16},
		{"block plus one byte", Config{}, 65, 1, 17},
		{"block plus partial", Config{}, 100, 1, 16 + 9},
		{"many blocks", Config{}, 64 * 100, 100, 1600},
		{"fractional chars per token", Config{BlockTokens: 4, CharsPerToken: 2.5}, 25, 2, 8 + 2},
		{"sub-byte tokens", Config{BlockTokens: 2, CharsPerToken: 0.25}, 5, 5, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(t, tt.cfg)
			s := c.NewSequence([]byte(text(tt.bytes)))
			if s.FullBlocks() != tt.wantBlocks || s.Tokens() != tt.wantTokens || s.Len() != tt.bytes {
				t.Fatalf("blocks=%d tokens=%d len=%d, want %d %d %d",
					s.FullBlocks(), s.Tokens(), s.Len(), tt.wantBlocks, tt.wantTokens, tt.bytes)
			}
		})
	}
}

// TestChainHashFormula pins the documented hash, since other components
// (the gateway's prompt summary, logs) rely on the exact definition: each
// block's 64-bit XXH3 seeded with the previous block's hash. The values
// come from the xxHash reference C library (XXH3_64bits_withSeed), not
// from the code under test.
func TestChainHashFormula(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{BlockTokens: 2, CharsPerToken: 2})
	content := []byte("abcdefghij") // blocks "abcd", "efgh", tail "ij"
	s := c.NewSequence(content)
	want := []uint64{0x2a299ea209e4fecc, 0xf7935cc9e80490e1}
	if !slices.Equal(s.hashes, want) {
		t.Fatalf("hashes = %x, want %x", s.hashes, want)
	}
	if !bytes.Equal(s.tail, []byte("ij")) {
		t.Fatalf("tail = %q, want %q", s.tail, "ij")
	}
}

func TestSequenceChainDependsOnPrefix(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(0))
	a, b := c.NewSequence([]byte("xyz")), c.NewSequence([]byte("qyz"))
	for i := range 3 {
		if a.hashes[i] == b.hashes[i] {
			t.Fatalf("block %d hashes equal under different prefixes", i)
		}
	}
}

func TestExtendDoesNotAlias(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{BlockTokens: 2, CharsPerToken: 2})
	buf := []byte("abcdef")
	base := c.NewSequence(buf)
	buf[4] = 'X' // the caller reusing its buffer must not change base
	x := base.Extend([]byte("gh"))
	y := base.Extend([]byte("zz"))
	if !base.equal(c.NewSequence([]byte("abcdef"))) {
		t.Fatal("base changed after its input buffer was modified or extended")
	}
	if !x.equal(c.NewSequence([]byte("abcdefgh"))) || !y.equal(c.NewSequence([]byte("abcdefzz"))) {
		t.Fatal("sibling extensions interfere with each other")
	}
}

// FuzzSequence checks every way of building a sequence against
// refSequence, which recomputes the documented layout from the bytes
// alone: the chained hashes of every full block, the tail bytes, the
// token count. Building in one go, extending an empty sequence and
// extending a prefix at a fuzzed split must all match it, and the
// caller's buffer may change afterwards without effect.
func FuzzSequence(f *testing.F) {
	f.Add([]byte(""), uint16(0))
	f.Add([]byte("hello, world"), uint16(5))
	f.Add(bytes.Repeat([]byte("0123456789"), 40), uint16(63))
	f.Add(bytes.Repeat([]byte{0xff}, 129), uint16(64))
	configs := []Config{
		{},
		{BlockTokens: 1, CharsPerToken: 1},
		{BlockTokens: 3, CharsPerToken: 2.5},
		{BlockTokens: 2, CharsPerToken: 0.3},
	}
	caches := make([]*Cache, len(configs))
	for i, cfg := range configs {
		caches[i] = newCache(f, cfg)
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		cut := int(split) % (len(data) + 1)
		for _, c := range caches {
			cfg := c.Config()
			wantHashes, wantTail, wantTokens := refSequence(cfg, data)
			buf := bytes.Clone(data)
			whole := c.NewSequence(buf)
			viaExtend := c.NewSequence(nil).Extend(buf[:cut]).Extend(buf[cut:])
			viaPrefix := c.NewSequence(buf[:cut]).Extend(buf[cut:])
			for i := range buf {
				buf[i] ^= 0xff // must not reach any sequence built above
			}
			for name, s := range map[string]Sequence{"NewSequence": whole, "Extend from empty": viaExtend, "Extend a prefix": viaPrefix} {
				if !slices.Equal(s.hashes, wantHashes) || !bytes.Equal(s.tail, wantTail) || s.Tokens() != wantTokens {
					t.Fatalf("cfg %+v, %d bytes split at %d, %s: %d hashes, tail %q, %d tokens; want %d, %q, %d",
						cfg, len(data), cut, name, len(s.hashes), s.tail, s.Tokens(), len(wantHashes), wantTail, wantTokens)
				}
				if s.Len() != len(data) || s.FullBlocks() != len(wantHashes) {
					t.Fatalf("cfg %+v, %s: Len %d, FullBlocks %d for %d bytes", cfg, name, s.Len(), s.FullBlocks(), len(data))
				}
			}
		}
	})
}

// refSequence is the sequence layout computed directly: blocks of
// BlockBytes bytes, each hashed as the 64-bit XXH3 of the block seeded
// with the previous hash (chainSeed before the first), through the
// library's streaming hasher; the bytes after the last full block are the
// tail; tokens are BlockTokens per block plus the tail over CharsPerToken,
// rounded up, at least 1.
func refSequence(cfg Config, data []byte) (hashes []uint64, tail []byte, tokens int) {
	bb := cfg.BlockBytes()
	prev := chainSeed
	for len(data) >= bb {
		h := xxh3.NewSeed(prev)
		_, _ = h.Write(data[:bb])
		prev = h.Sum64()
		hashes = append(hashes, prev)
		data = data[bb:]
	}
	tokens = len(hashes)*cfg.BlockTokens + int(math.Ceil(float64(len(data))/cfg.CharsPerToken))
	return hashes, bytes.Clone(data), max(tokens, 1)
}
