package prefixhash

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// writeChunked writes data to h in random pieces through all three write
// methods.
func writeChunked(rng *rand.Rand, h *Hasher, data []byte) {
	for len(data) > 0 {
		n := min(len(data), rng.IntN(200))
		switch rng.IntN(3) {
		case 0:
			_, _ = h.Write(data[:n])
		case 1:
			_, _ = h.WriteString(string(data[:n]))
		default:
			if n == 0 {
				n = 1
			}
			for _, c := range data[:n] {
				_ = h.WriteByte(c)
			}
		}
		data = data[n:]
	}
}

func equalSummary(a, b Summary) bool {
	return a.Version == b.Version && a.BlockTokens == b.BlockTokens && a.TotalBlocks == b.TotalBlocks &&
		a.Stride == b.Stride && slices.Equal(a.Hashes, b.Hashes)
}

// TestHasherMatchesSummarize checks the streaming Hasher, which keeps only
// checkpoints, against Summarize of every block hash, across the stride
// doublings (64, 65, 128, 129, ... blocks) and any chunking.
func TestHasherMatchesSummarize(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, geo := range []struct {
		tokens int
		cpt    float64
	}{{DefaultBlockTokens, DefaultCharsPerToken}, {1, 1}, {2, 1.5}} {
		bb := BlockBytes(geo.tokens, geo.cpt)
		for _, blocks := range []int{0, 1, 2, 63, 64, 65, 127, 128, 129, 200, 1000, 4097} {
			data := randomText(rng, blocks*bb+rng.IntN(bb))
			h := NewHasher(geo.tokens, geo.cpt)
			writeChunked(rng, h, data)
			hashes, _ := AppendBlocks(nil, Seed, bb, nil, data)
			want := Summarize(hashes, geo.tokens)
			got := h.Summary()
			if !equalSummary(got, want) {
				t.Fatalf("bb=%d blocks=%d: Hasher %+v\nwant %+v", bb, blocks, got, want)
			}
			if h.Blocks() != blocks || h.Len() != len(data) {
				t.Fatalf("Blocks=%d Len=%d, want %d %d", h.Blocks(), h.Len(), blocks, len(data))
			}
			if hdr := string(h.AppendHeader(nil)); hdr != FormatHeader(want) {
				t.Fatalf("AppendHeader %q, want %q", hdr, FormatHeader(want))
			}
		}
	}
}

func TestHasherReset(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	h := NewHasher(DefaultBlockTokens, DefaultCharsPerToken)
	writeChunked(rng, h, randomText(rng, 100_000))
	h.Reset()
	data := randomText(rng, 5000)
	writeChunked(rng, h, data)
	hashes, _ := AppendBlocks(nil, Seed, DefaultBlockBytes, nil, data)
	if got, want := h.Summary(), Summarize(hashes, DefaultBlockTokens); !equalSummary(got, want) {
		t.Fatalf("after Reset: %+v, want %+v", got, want)
	}
}

// TestHasherAllocatesNothing: once built, hashing a long prompt and
// encoding its header into a reused buffer allocates nothing.
func TestHasherAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := randomText(rng, 300_000)
	s := string(data)
	h := NewHasher(DefaultBlockTokens, DefaultCharsPerToken)
	dst := make([]byte, 0, MaxHeaderLen)
	allocs := testing.AllocsPerRun(5, func() {
		h.Reset()
		_, _ = h.Write(data[:1000])
		_, _ = h.WriteString(s[1000:])
		_ = h.WriteByte('\n')
		dst = h.AppendHeader(dst[:0])
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per prompt, want 0", allocs)
	}
}

func TestNewHasherRejectsGeometry(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		tokens int
		cpt    float64
	}{{0, 4}, {MaxBlockTokens + 1, 4}, {16, 0}, {16, -1}, {1024, 1 << 20}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewHasher(%d, %v) did not panic", g.tokens, g.cpt)
				}
			}()
			NewHasher(g.tokens, g.cpt)
		}()
	}
}
