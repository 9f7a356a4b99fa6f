package kvcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

var benchSizes = []int{8 << 10, 128 << 10} // tokens

// benchPrompt returns incompressible-looking prompt text of the given token
// count under the default geometry (4 bytes per token).
func benchPrompt(tokens int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, tokens*4)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return b
}

func benchName(tokens int) string { return fmt.Sprintf("tokens=%dk", tokens>>10) }

// BenchmarkLookup is the per-request cost on a warm cache: cut the prompt
// into blocks, find and pin the fully cached prefix, release it.
func BenchmarkLookup(b *testing.B) {
	for _, tokens := range benchSizes {
		b.Run(benchName(tokens), func(b *testing.B) {
			c := newCache(b, Config{CapacityTokens: 1 << 20})
			prompt := benchPrompt(tokens)
			store(c, string(prompt), "")
			b.ReportAllocs()
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				l := c.Lookup(c.NewSequence(prompt))
				if l.CachedTokens() != tokens {
					b.Fatalf("cached %d, want %d", l.CachedTokens(), tokens)
				}
				l.Release(nil)
			}
		})
	}
}

// BenchmarkLookupOnly isolates the locked part of BenchmarkLookup.
func BenchmarkLookupOnly(b *testing.B) {
	for _, tokens := range benchSizes {
		b.Run(benchName(tokens), func(b *testing.B) {
			c := newCache(b, Config{CapacityTokens: 1 << 20})
			prompt := benchPrompt(tokens)
			store(c, string(prompt), "")
			seq := c.NewSequence(prompt)
			b.ReportAllocs()
			for b.Loop() {
				c.Lookup(seq).Release(nil)
			}
		})
	}
}

// BenchmarkNewSequence shows the hashing cost, which dominates a lookup.
func BenchmarkNewSequence(b *testing.B) {
	for _, tokens := range benchSizes {
		b.Run(benchName(tokens), func(b *testing.B) {
			c := newCache(b, Config{})
			prompt := benchPrompt(tokens)
			b.ReportAllocs()
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				c.NewSequence(prompt)
			}
		})
	}
}

// BenchmarkChurn is a full request under eviction pressure: every prompt is
// new, so each Commit evicts as much as it inserts.
func BenchmarkChurn(b *testing.B) {
	c := newCache(b, Config{CapacityTokens: 64 << 10})
	prompt := benchPrompt(8 << 10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		prompt[0], prompt[1], prompt[2] = byte(i), byte(i>>8), byte(i>>16)
		l := c.Lookup(c.NewSequence(prompt))
		l.Commit()
		l.Release(prompt[:512])
	}
}
