package kvcache

import (
	"bytes"
	"math"
	"slices"

	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// chainSeed is the parent of a prompt's first block; the chain hashing
// itself lives in prefixhash, shared with the gateway's prompt summary.
const chainSeed = prefixhash.Seed

// geometry is the part of Config that shapes a Sequence. Lookup compares it
// so a Sequence cut for one geometry is never matched against another.
type geometry struct {
	blockBytes    int
	blockTokens   int
	charsPerToken float64
}

func newGeometry(c Config) geometry {
	return geometry{blockBytes: c.BlockBytes(), blockTokens: c.BlockTokens, charsPerToken: c.CharsPerToken}
}

// Sequence is prompt text cut into cacheable blocks: the chain hash of every
// full block plus the bytes of the trailing partial block, which are kept so
// Extend can continue without rehashing. Build one with Cache.NewSequence;
// the zero value is not usable. A Sequence is immutable and safe to share.
type Sequence struct {
	geom   geometry
	hashes []uint64
	tail   []byte
	tokens int
}

func newSequence(g geometry, content []byte) Sequence {
	hashes := make([]uint64, 0, len(content)/g.blockBytes)
	hashes, tail := appendBlocks(g, hashes, chainSeed, nil, content)
	return Sequence{geom: g, hashes: hashes, tail: tail, tokens: g.tokens(len(hashes), len(tail))}
}

// Tokens is the estimated token count: BlockTokens per full block plus the
// tail's bytes divided by CharsPerToken, rounded up, and never below 1
// because an engine always processes at least one token.
func (s Sequence) Tokens() int { return s.tokens }

// FullBlocks is how many whole, cacheable blocks the sequence holds.
func (s Sequence) FullBlocks() int { return len(s.hashes) }

// Len is the length in bytes of the content the sequence was built from.
func (s Sequence) Len() int { return len(s.hashes)*s.geom.blockBytes + len(s.tail) }

// Extend returns the sequence of s's content followed by more. Only the tail
// and more are hashed, so appending a reply to a long prompt costs the reply,
// not the prompt. s is left unchanged and more is not retained.
func (s Sequence) Extend(more []byte) Sequence {
	n := len(s.hashes)
	hashes := make([]uint64, n, n+(len(s.tail)+len(more))/s.geom.blockBytes)
	copy(hashes, s.hashes)
	hashes, tail := appendBlocks(s.geom, hashes, s.lastHash(), s.tail, more)
	return Sequence{geom: s.geom, hashes: hashes, tail: tail, tokens: s.geom.tokens(len(hashes), len(tail))}
}

// BlockHashes returns the chain hash of every full block, in prompt order,
// in a fresh slice: what prefixhash.Summarize takes, so a test can check
// the gateway's summary of a request against the blocks this cache keys.
func (s Sequence) BlockHashes() []uint64 { return slices.Clone(s.hashes) }

// equal reports whether s and o describe the same content under the same
// geometry; tests use it to check Extend against a fresh build.
func (s Sequence) equal(o Sequence) bool {
	if s.geom != o.geom || s.tokens != o.tokens || len(s.hashes) != len(o.hashes) {
		return false
	}
	for i := range s.hashes {
		if s.hashes[i] != o.hashes[i] {
			return false
		}
	}
	return bytes.Equal(s.tail, o.tail)
}

func (s Sequence) lastHash() uint64 {
	if len(s.hashes) == 0 {
		return chainSeed
	}
	return s.hashes[len(s.hashes)-1]
}

func (g geometry) tokens(fullBlocks, tailBytes int) int {
	t := fullBlocks*g.blockTokens + int(math.Ceil(float64(tailBytes)/g.charsPerToken))
	return max(1, t)
}

// appendBlocks hashes the full blocks of tail||more, chaining from prev, and
// appends their hashes to dst. It returns the new leftover bytes in a fresh
// slice so the result never aliases the caller's buffers.
func appendBlocks(g geometry, dst []uint64, prev uint64, tail, more []byte) ([]uint64, []byte) {
	return prefixhash.AppendBlocks(dst, prev, g.blockBytes, tail, more)
}
