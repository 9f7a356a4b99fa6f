package prefixhash

import (
	"math/rand/v2"
	"testing"
)

func seqHashes(n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = uint64(i + 1)
	}
	return h
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		total      int
		wantStride int
		// wantBlocks are the block counts the checkpoints cover.
		wantFirst, wantLast, wantCount int
	}{
		{total: 1, wantStride: 1, wantFirst: 1, wantLast: 1, wantCount: 1},
		{total: 64, wantStride: 1, wantFirst: 1, wantLast: 64, wantCount: 64},
		{total: 65, wantStride: 2, wantFirst: 2, wantLast: 65, wantCount: 33},
		{total: 128, wantStride: 2, wantFirst: 2, wantLast: 128, wantCount: 64},
		{total: 129, wantStride: 4, wantFirst: 4, wantLast: 129, wantCount: 33},
		{total: 8192, wantStride: 128, wantFirst: 128, wantLast: 8192, wantCount: 64},
		{total: 8193, wantStride: 256, wantFirst: 256, wantLast: 8193, wantCount: 33},
	}
	for _, tt := range tests {
		s := Summarize(seqHashes(tt.total), 16)
		if s.Version != Version || s.BlockTokens != 16 || s.TotalBlocks != tt.total || s.Stride != tt.wantStride || len(s.Hashes) != tt.wantCount {
			t.Fatalf("total %d: %+v", tt.total, s)
		}
		if s.Blocks(0) != tt.wantFirst || s.Blocks(len(s.Hashes)-1) != tt.wantLast {
			t.Fatalf("total %d: checkpoints cover %d..%d blocks, want %d..%d", tt.total, s.Blocks(0), s.Blocks(len(s.Hashes)-1), tt.wantFirst, tt.wantLast)
		}
		for i, h := range s.Hashes {
			// seqHashes gives block k (1-based) the hash k.
			if int(h) != s.Blocks(i) {
				t.Fatalf("total %d: checkpoint %d holds block %d's hash, want block %d's", tt.total, i, h, s.Blocks(i))
			}
		}
		if s.Tokens(len(s.Hashes)-1) != tt.total*16 {
			t.Fatalf("total %d: last checkpoint covers %d tokens", tt.total, s.Tokens(len(s.Hashes)-1))
		}
	}
	if s := Summarize(nil, 16); !s.Empty() || s.TotalBlocks != 0 {
		t.Fatalf("no blocks: %+v", s)
	}
}

// TestLongerTurnFindsShorterTurn is the property the stride rule exists
// for: when a conversation grows, every checkpoint of the longer prompt
// that lies within the shorter prompt's full stride multiples is also a
// checkpoint of the shorter prompt, with the same hash, so an index of the
// shorter turn finds the longer turn's shared prefix.
func TestLongerTurnFindsShorterTurn(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	for range 300 {
		shortLen := rng.IntN(3000) * DefaultBlockBytes / 8
		short := randomText(rng, shortLen)
		long := append(append([]byte(nil), short...), randomText(rng, rng.IntN(40000))...)
		hs, _ := AppendBlocks(nil, Seed, DefaultBlockBytes, nil, short)
		hl, _ := AppendBlocks(nil, Seed, DefaultBlockBytes, nil, long)
		ss, sl := Summarize(hs, 16), Summarize(hl, 16)
		at := map[int]uint64{}
		for i, h := range ss.Hashes {
			at[ss.Blocks(i)] = h
		}
		for i, h := range sl.Hashes {
			b := sl.Blocks(i)
			if b > ss.TotalBlocks || b%sl.Stride != 0 {
				continue // beyond the shorter turn, or the trailing checkpoint
			}
			if got, ok := at[b]; !ok || got != h {
				t.Fatalf("short %d blocks (stride %d), long %d blocks (stride %d): long's checkpoint at %d blocks missing from short's",
					ss.TotalBlocks, ss.Stride, sl.TotalBlocks, sl.Stride, b)
			}
		}
	}
}
