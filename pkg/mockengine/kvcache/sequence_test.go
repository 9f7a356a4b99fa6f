package kvcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"
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

// TestChainHashFormula recomputes the documented hash independently, since
// other components (and logs) may rely on the exact definition.
func TestChainHashFormula(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{BlockTokens: 2, CharsPerToken: 2})
	content := []byte("abcdefghij") // blocks "abcd", "efgh", tail "ij"
	s := c.NewSequence(content)
	prev := chainSeed
	for i, blk := range [][]byte{content[0:4], content[4:8]} {
		h := sha256.New()
		var hdr [12]byte
		binary.BigEndian.PutUint64(hdr[:8], prev)
		binary.BigEndian.PutUint32(hdr[8:], uint32(len(blk)))
		h.Write(hdr[:])
		h.Write(blk)
		prev = binary.BigEndian.Uint64(h.Sum(nil))
		if s.hashes[i] != prev {
			t.Fatalf("hash[%d] = %x, want %x", i, s.hashes[i], prev)
		}
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
		a, b := data[:cut], data[cut:]
		for _, c := range caches {
			whole := c.NewSequence(data)
			empty := c.NewSequence(nil)
			viaExtend := empty.Extend(a).Extend(b)
			viaPrefix := c.NewSequence(a).Extend(b)
			if !viaExtend.equal(whole) || !viaPrefix.equal(whole) {
				t.Fatalf("cfg %+v split %d: Extend result differs from NewSequence", c.Config(), cut)
			}
			if whole.Len() != len(data) || whole.Tokens() < 1 {
				t.Fatalf("cfg %+v: Len=%d Tokens=%d for %d bytes", c.Config(), whole.Len(), whole.Tokens(), len(data))
			}
			if whole.FullBlocks()*c.Config().BlockTokens > whole.Tokens() {
				t.Fatalf("cfg %+v: full blocks exceed token count", c.Config())
			}
		}
	})
}
