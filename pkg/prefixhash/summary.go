package prefixhash

// MaxCheckpoints bounds the hashes one Summary carries, and so the size of
// the header that carries it: 64 hashes are 512 bytes before encoding, for a
// prompt of any length.
const MaxCheckpoints = 64

// Summary is a prompt's prefix fingerprint as the gateway sends it to the
// hub: the chain hash after every Stride-th full block, plus the chain hash
// after the last full block when TotalBlocks is not a multiple of Stride.
//
// Because a chain hash covers every byte before it, one hash names a whole
// prefix: two prompts that share a checkpoint hash share every block up to
// it. Stride is the smallest power of two that keeps the checkpoints within
// MaxCheckpoints, so a longer prompt's checkpoints are a subset of the
// positions a shorter prompt of the same conversation was summarised at:
// the hub finds a growing session's earlier turns at full resolution up to
// the longer prompt's stride.
type Summary struct {
	// Version is the hashing and blocking version the summary was made with
	// (Version); a hub ignores summaries of another version.
	Version int
	// BlockTokens is the block size in estimated tokens.
	BlockTokens int
	// TotalBlocks is the number of full blocks in the prompt.
	TotalBlocks int
	// Stride is the distance in blocks between two checkpoints.
	Stride int
	// Hashes holds the checkpoint hashes in prompt order.
	Hashes []uint64
}

// StrideFor returns the smallest power of two s such that a prompt of
// totalBlocks full blocks has at most MaxCheckpoints checkpoints at stride s.
func StrideFor(totalBlocks int) int {
	s := 1
	for Checkpoints(totalBlocks, s) > MaxCheckpoints {
		s *= 2
	}
	return s
}

// Checkpoints is the number of checkpoints of a prompt of totalBlocks full
// blocks at the given stride: one per multiple of stride, plus one for the
// last block when it is not a multiple.
func Checkpoints(totalBlocks, stride int) int {
	if totalBlocks <= 0 || stride <= 0 {
		return 0
	}
	n := totalBlocks / stride
	if totalBlocks%stride != 0 {
		n++
	}
	return n
}

// Blocks returns the number of prompt blocks checkpoint i covers (1-based
// block count): (i+1)*Stride, or TotalBlocks for the trailing checkpoint.
func (s Summary) Blocks(i int) int {
	return min((i+1)*s.Stride, s.TotalBlocks)
}

// Tokens returns the estimated prompt tokens checkpoint i covers.
func (s Summary) Tokens(i int) int { return s.Blocks(i) * s.BlockTokens }

// Empty reports whether the summary holds no checkpoint (no summary was
// sent, or the prompt has no full block).
func (s Summary) Empty() bool { return len(s.Hashes) == 0 }

// Summarize returns the summary of a prompt whose full blocks have the
// given chain hashes (AppendBlocks from Seed), blocks of blockTokens
// estimated tokens. The Hashes slice is fresh; a prompt without a full
// block gives an empty summary.
func Summarize(blockHashes []uint64, blockTokens int) Summary {
	total := len(blockHashes)
	s := Summary{Version: Version, BlockTokens: blockTokens, TotalBlocks: total, Stride: StrideFor(total)}
	if total == 0 {
		return s
	}
	s.Hashes = make([]uint64, 0, Checkpoints(total, s.Stride))
	for k := s.Stride; k <= total; k += s.Stride {
		s.Hashes = append(s.Hashes, blockHashes[k-1])
	}
	if total%s.Stride != 0 {
		s.Hashes = append(s.Hashes, blockHashes[total-1])
	}
	return s
}
