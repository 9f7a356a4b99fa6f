package prefixhash

import (
	"math/rand/v2"
	"testing"
)

// FuzzParseHeader: no input panics; anything that parses is canonical (it
// re-encodes to the same string) and consistent (the hash count follows
// from TotalBlocks); and a summary built from the other arguments
// round-trips through the header.
func FuzzParseHeader(f *testing.F) {
	f.Add("2.16.3.AQIDBAUGBwj__v38-_r5-AAAAAAAAAAB", uint32(3), uint16(16), uint64(1))
	f.Add("2.16.65."+string(make([]byte, 10)), uint32(65), uint16(16), uint64(2))
	f.Add(FormatHeader(Summarize(seqHashes(1000), 32)), uint32(1000), uint16(32), uint64(3))
	f.Add("1.16.1.AAAAAAAAAAA", uint32(1<<24), uint16(1024), uint64(4))
	f.Add("2.016.1.AAAAAAAAAAA", uint32(0), uint16(0), uint64(5))
	f.Fuzz(func(t *testing.T, v string, total uint32, blockTokens uint16, seed uint64) {
		if s, err := ParseHeader(v); err == nil {
			if got := FormatHeader(s); got != v {
				t.Fatalf("ParseHeader(%q) re-encodes as %q", v, got)
			}
			if s.Version != Version || s.Stride != StrideFor(s.TotalBlocks) || len(s.Hashes) != Checkpoints(s.TotalBlocks, s.Stride) {
				t.Fatalf("ParseHeader(%q) = inconsistent %+v", v, s)
			}
		}
		n := int(total%MaxTotalBlocks) + 1
		bt := int(blockTokens%MaxBlockTokens) + 1
		rng := rand.New(rand.NewPCG(seed, uint64(n)))
		s := Summary{Version: Version, BlockTokens: bt, TotalBlocks: n, Stride: StrideFor(n)}
		s.Hashes = make([]uint64, Checkpoints(n, s.Stride))
		for i := range s.Hashes {
			s.Hashes[i] = rng.Uint64() >> rng.IntN(64) // small values too, zero included
		}
		p, err := ParseHeader(FormatHeader(s))
		if err != nil || !equalSummary(p, s) {
			t.Fatalf("summary of %d blocks (%d tokens) does not round-trip: %v", n, bt, err)
		}
	})
}
