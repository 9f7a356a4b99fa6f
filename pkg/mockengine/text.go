package mockengine

import (
	"encoding/binary"
	"hash/fnv"
	"strings"
	"time"
)

// vocabulary is cycled through to produce output tokens. Each entry is one
// token and starts with a space, so the text reads as words and a pylon
// counting whitespace-separated words counts one per token.
var vocabulary = [...]string{
	" Hello", " there", " how", " can", " I", " help", " you", " today",
	" the", " cache", " keeps", " every", " prefix", " it", " has", " seen",
	" so", " the", " next", " turn", " of", " this", " session", " starts",
	" warm", " and", " prefill", " is", " short", " again",
}

// hash64 is FNV-1a 64 over the seed, the request id and a salt: the one
// source of per-request determinism (text offset and jitter).
func hash64(seed uint64, requestID, salt string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seed)
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(requestID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(salt))
	return h.Sum64()
}

// jitter returns a deterministic duration in [0, bound] for the request id
// and salt; 0 when bound is 0.
func jitter(seed uint64, requestID, salt string, bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	step := time.Millisecond
	if bound < step {
		step = 1
	}
	n := uint64(bound / step)
	return time.Duration(hash64(seed, requestID, salt)%(n+1)) * step
}

// tokens returns the n output tokens of a request, starting at a position of
// the vocabulary chosen by the seed and the request id.
func outputTokens(seed uint64, requestID string, n int) []string {
	start := int(hash64(seed, requestID, "text") % uint64(len(vocabulary)))
	out := make([]string, n)
	for i := range out {
		out[i] = vocabulary[(start+i)%len(vocabulary)]
	}
	return out
}

// joinTokens concatenates tokens into the reply text.
func joinTokens(toks []string) string { return strings.Join(toks, "") }
