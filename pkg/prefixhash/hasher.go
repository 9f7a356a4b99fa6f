package prefixhash

import (
	"fmt"
)

const (
	// MaxBlockTokens bounds the block size a Summary may name. Real engines
	// use 16 to 128 tokens per block; the bound keeps a malformed header
	// from claiming a prefix of absurd length.
	MaxBlockTokens = 1024
	// MaxTotalBlocks bounds the blocks a Summary may count: 2^24 blocks of
	// 64 bytes are a 1 GiB prompt, far beyond any accepted request body.
	MaxTotalBlocks = 1 << 24
	// maxBlockBytes bounds one block, as kvcache does, so a Hasher's
	// partial-block buffer stays reasonable.
	maxBlockBytes = 1 << 24
)

// Hasher hashes a prompt written to it in pieces of any size, exactly as
// AppendBlocks hashes the same bytes written at once, and keeps only what a
// Summary needs: the hash of every Stride-th block at the finest stride
// that still fits MaxCheckpoints, the last block's hash and the partial
// block at the end. Its memory is therefore fixed whatever the prompt's
// length, and once its buffers exist (NewHasher, or a Hasher reused after
// Reset) writing allocates nothing.
//
// It implements io.Writer, io.StringWriter and io.ByteWriter, so the
// prompt layout (Writer) can render straight into it without building the
// prompt in memory. A Hasher is not safe for concurrent use.
type Hasher struct {
	blockTokens int
	blockBytes  int
	// partial holds the first n bytes of a block that started in an
	// earlier write. A block that lies whole inside one write is hashed
	// where it lies and never copied here: the prompt's long texts reach
	// the Hasher in one write each, the layout's punctuation byte by byte.
	partial []byte
	n       int
	prev    uint64
	blocks  int
	// kept holds the hashes after blocks stride, 2*stride, ...: doubling
	// stride and dropping every other entry when they outgrow
	// MaxCheckpoints keeps stride at or below the final StrideFor(blocks),
	// whose multiples are then a subset of what is kept.
	stride int
	kept   [MaxCheckpoints + 1]uint64
	nkept  int
}

// NewHasher returns a Hasher for blocks of blockTokens estimated tokens at
// charsPerToken bytes per token (BlockBytes). It panics when blockTokens is
// outside 1..MaxBlockTokens or the block would exceed 16 MiB: the geometry
// is a constant of the caller, not input.
func NewHasher(blockTokens int, charsPerToken float64) *Hasher {
	if blockTokens < 1 || blockTokens > MaxBlockTokens || !(charsPerToken > 0) || float64(blockTokens)*charsPerToken > maxBlockBytes {
		panic(fmt.Sprintf("prefixhash: invalid geometry: %d tokens per block at %v bytes per token", blockTokens, charsPerToken))
	}
	bb := BlockBytes(blockTokens, charsPerToken)
	h := &Hasher{blockTokens: blockTokens, blockBytes: bb, partial: make([]byte, bb)}
	h.Reset()
	return h
}

// Reset forgets everything written, keeping the geometry and the buffers.
func (h *Hasher) Reset() {
	h.n, h.prev, h.blocks, h.stride, h.nkept = 0, Seed, 0, 1, 0
}

// Write hashes p as the next bytes of the prompt. It never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	n := len(p)
	if h.n > 0 {
		c := copy(h.partial[h.n:], p)
		h.n += c
		p = p[c:]
		if h.n < h.blockBytes {
			return n, nil
		}
		h.block(BlockHash(h.prev, h.partial))
	}
	for len(p) >= h.blockBytes {
		h.block(BlockHash(h.prev, p[:h.blockBytes]))
		p = p[h.blockBytes:]
	}
	h.n = copy(h.partial, p)
	return n, nil
}

// WriteString is Write for a string, without converting it to bytes.
func (h *Hasher) WriteString(s string) (int, error) {
	n := len(s)
	if h.n > 0 {
		c := copy(h.partial[h.n:], s)
		h.n += c
		s = s[c:]
		if h.n < h.blockBytes {
			return n, nil
		}
		h.block(BlockHash(h.prev, h.partial))
	}
	for len(s) >= h.blockBytes {
		h.block(blockHashString(h.prev, s[:h.blockBytes]))
		s = s[h.blockBytes:]
	}
	h.n = copy(h.partial, s)
	return n, nil
}

// WriteByte is Write for one byte.
func (h *Hasher) WriteByte(c byte) error {
	h.partial[h.n] = c
	h.n++
	if h.n == h.blockBytes {
		h.block(BlockHash(h.prev, h.partial))
		h.n = 0
	}
	return nil
}

// block records the chain hash of the block just completed and keeps it if
// it falls on the current stride.
func (h *Hasher) block(hash uint64) {
	h.prev = hash
	h.blocks++
	if h.blocks%h.stride != 0 {
		return
	}
	h.kept[h.nkept] = h.prev
	h.nkept++
	if h.nkept <= MaxCheckpoints {
		return
	}
	// kept[i] is the hash after (i+1)*stride blocks: the odd i are the
	// multiples of the doubled stride.
	j := 0
	for i := 1; i < h.nkept; i += 2 {
		h.kept[j] = h.kept[i]
		j++
	}
	h.nkept = j
	h.stride *= 2
}

// Blocks is the number of full blocks written so far.
func (h *Hasher) Blocks() int { return h.blocks }

// Len is the number of bytes written so far.
func (h *Hasher) Len() int { return h.blocks*h.blockBytes + h.n }

// Summary returns the summary of what was written so far, in a fresh
// Hashes slice; it is Summarize of the same prompt's block hashes.
func (h *Hasher) Summary() Summary {
	s := Summary{Version: Version, BlockTokens: h.blockTokens, TotalBlocks: h.blocks, Stride: StrideFor(h.blocks)}
	if h.blocks == 0 {
		return s
	}
	s.Hashes = h.appendCheckpoints(make([]uint64, 0, Checkpoints(h.blocks, s.Stride)))
	return s
}

// AppendHeader appends the header encoding of Summary() to dst without
// building the Summary: the gateway's path, which allocates only dst. It
// appends nothing when no full block was written.
func (h *Hasher) AppendHeader(dst []byte) []byte {
	if h.blocks == 0 {
		return dst
	}
	var buf [MaxCheckpoints]uint64
	return appendHeader(dst, h.blockTokens, h.blocks, h.appendCheckpoints(buf[:0]))
}

// appendCheckpoints appends the checkpoint hashes at StrideFor(blocks).
func (h *Hasher) appendCheckpoints(dst []uint64) []uint64 {
	stride := StrideFor(h.blocks)
	step := stride / h.stride
	for i := step - 1; i < h.nkept; i += step {
		dst = append(dst, h.kept[i])
	}
	if h.blocks%stride != 0 {
		dst = append(dst, h.prev)
	}
	return dst
}
