package prefixhash

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkHasher is the cost of summarising a prompt: chain-hash every
// 64-byte block (one seeded XXH3 each) and encode the header.
func BenchmarkHasher(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 512 << 10} {
		data := randomText(rand.New(rand.NewPCG(1, 2)), size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			h := NewHasher(DefaultBlockTokens, DefaultCharsPerToken)
			dst := make([]byte, 0, MaxHeaderLen)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				h.Reset()
				_, _ = h.Write(data)
				dst = h.AppendHeader(dst[:0])
			}
		})
	}
}

// BenchmarkParseHeader is the hub's cost of reading the largest header.
func BenchmarkParseHeader(b *testing.B) {
	v := FormatHeader(Summarize(seqHashes(100_000), DefaultBlockTokens))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseHeader(v); err != nil {
			b.Fatal(err)
		}
	}
}
