package prefixhash

import (
	"bytes"

	"github.com/zeebo/xxh3"
)

// Version names the blocking, hashing and prompt layout of this package. It
// goes with every Summary, and it changes whenever any of them does: a hub
// that compared hashes made two different ways would only ever miss, so it
// ignores summaries of a version it does not know instead. Version 1
// chained SHA-256; version 2 chains seeded XXH3.
const Version = 2

const (
	// DefaultBlockTokens is vLLM's default KV block size, so prefixes are
	// counted in the same units a real engine caches them in.
	DefaultBlockTokens = 16
	// DefaultCharsPerToken is the usual rule of thumb for English text with
	// BPE tokenizers; nothing here runs a real tokenizer.
	DefaultCharsPerToken = 4.0
	// DefaultBlockBytes is the block size in prompt bytes at the defaults.
	DefaultBlockBytes = DefaultBlockTokens * DefaultCharsPerToken
)

// Seed stands in for the hash of the block before the first one, so the
// first block is hashed exactly like every other (fractional bits of the
// golden ratio: any fixed constant works, it only has to never change).
const Seed uint64 = 0x9e3779b97f4a7c15

// stackBlock is the largest block AppendBlocks joins from a stack buffer
// when a previous call's tail starts it; the default 64-byte block fits.
const stackBlock = 256

// BlockBytes is how many bytes of prompt text make one block of blockTokens
// estimated tokens. It is at least 1 so that a tiny charsPerToken still
// makes progress through the text.
func BlockBytes(blockTokens int, charsPerToken float64) int {
	return max(1, int(float64(blockTokens)*charsPerToken))
}

// BlockHash is the chain hash of one block: the 64-bit XXH3 of the block's
// bytes, seeded with the parent's hash. The parent of the first block is
// Seed. Seeding with the parent is what makes one hash name a whole prefix,
// as vLLM's block hashes do; XXH3 mixes the input's length into its
// result, so blocks of different sizes never need a length field to stay
// apart.
func BlockHash(parent uint64, block []byte) uint64 {
	return xxh3.HashSeed(block, parent)
}

// blockHashString is BlockHash of a block held in a string, hashed without
// converting it to bytes.
func blockHashString(parent uint64, block string) uint64 {
	return xxh3.HashStringSeed(block, parent)
}

// AppendBlocks hashes the full blocks of blockBytes bytes of tail||more,
// chaining from prev (Seed for a prompt's first block), and appends their
// hashes to dst. It returns the bytes left after the last full block in a
// fresh slice, nil when none, so the result never aliases the caller's
// buffers. tail is what a previous call left; passing it back continues the
// chain without hashing anything twice.
func AppendBlocks(dst []uint64, prev uint64, blockBytes int, tail, more []byte) ([]uint64, []byte) {
	bb := blockBytes
	if len(tail)+len(more) < bb {
		if len(tail)+len(more) == 0 {
			return dst, nil
		}
		rest := make([]byte, 0, len(tail)+len(more))
		rest = append(rest, tail...)
		return dst, append(rest, more...)
	}
	if len(tail) > 0 {
		// Only the block that straddles tail and more is copied; every
		// other block is hashed where it lies.
		var stack [stackBlock]byte
		var block []byte
		if bb <= len(stack) {
			block = stack[:bb]
		} else {
			block = make([]byte, bb)
		}
		n := copy(block, tail)
		more = more[copy(block[n:], more):]
		prev = BlockHash(prev, block)
		dst = append(dst, prev)
	}
	for len(more) >= bb {
		prev = BlockHash(prev, more[:bb])
		dst = append(dst, prev)
		more = more[bb:]
	}
	if len(more) == 0 {
		return dst, nil
	}
	return dst, bytes.Clone(more)
}
