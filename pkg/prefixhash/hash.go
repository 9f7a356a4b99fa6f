package prefixhash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
)

// Version names the blocking, hashing and prompt layout of this package. It
// goes with every Summary, and it changes whenever any of them does: a hub
// that compared hashes made two different ways would only ever miss, so it
// ignores summaries of a version it does not know instead.
const Version = 1

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

// hashHeaderLen is the uint64 parent hash plus the uint32 block length that
// precede each block in the hash input; the length keeps the encoding
// unambiguous even though every full block has the same size today.
const hashHeaderLen = 8 + 4

// stackScratch is the largest hash input hashed from a stack buffer; the
// default geometry (64-byte blocks) fits, so hashing allocates nothing.
const stackScratch = 256

// BlockBytes is how many bytes of prompt text make one block of blockTokens
// estimated tokens. It is at least 1 so that a tiny charsPerToken still
// makes progress through the text.
func BlockBytes(blockTokens int, charsPerToken float64) int {
	return max(1, int(float64(blockTokens)*charsPerToken))
}

// BlockHash is the chain hash of one block: the first 8 bytes, big-endian,
// of SHA-256 over the parent's hash (uint64 big-endian), the block's length
// (uint32 big-endian) and the block's bytes. The parent of the first block
// is Seed. Folding the parent in is what makes one hash name a whole
// prefix, as vLLM's block hashes do.
func BlockHash(parent uint64, block []byte) uint64 {
	var stack [stackScratch]byte
	var scratch []byte
	if hashHeaderLen+len(block) <= len(stack) {
		scratch = stack[:hashHeaderLen+len(block)]
	} else {
		scratch = make([]byte, hashHeaderLen+len(block))
	}
	binary.BigEndian.PutUint32(scratch[8:hashHeaderLen], uint32(len(block)))
	copy(scratch[hashHeaderLen:], block)
	return chainHash(scratch, parent)
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
	var stack [stackScratch]byte
	var scratch []byte
	if hashHeaderLen+bb <= len(stack) {
		scratch = stack[:hashHeaderLen+bb]
	} else {
		scratch = make([]byte, hashHeaderLen+bb)
	}
	binary.BigEndian.PutUint32(scratch[8:hashHeaderLen], uint32(bb))
	body := scratch[hashHeaderLen:]
	if len(tail) > 0 {
		copy(body, tail)
		n := copy(body[len(tail):], more)
		more = more[n:]
		prev = chainHash(scratch, prev)
		dst = append(dst, prev)
	}
	for len(more) >= bb {
		copy(body, more[:bb])
		more = more[bb:]
		prev = chainHash(scratch, prev)
		dst = append(dst, prev)
	}
	if len(more) == 0 {
		return dst, nil
	}
	return dst, bytes.Clone(more)
}

// chainHash fills the parent-hash slot of scratch (whose length field and
// block bytes are already in place) and returns the first 8 bytes of its
// SHA-256, big-endian.
func chainHash(scratch []byte, prev uint64) uint64 {
	binary.BigEndian.PutUint64(scratch[:8], prev)
	sum := sha256.Sum256(scratch)
	return binary.BigEndian.Uint64(sum[:8])
}
