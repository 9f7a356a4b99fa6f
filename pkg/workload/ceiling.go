package workload

import (
	"math"
	"strconv"

	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
)

// DefaultBlockTokens is the mock engine's KV block size (and vLLM's), the
// geometry CacheCeiling counts in unless told otherwise.
const DefaultBlockTokens = kvcache.DefaultBlockTokens

// NewCeilingCache returns the mock engine's own prefix cache (package
// kvcache, the code that decides what the engine reports as cached) with
// blockTokens-token blocks of CharsPerToken bytes per token and no
// capacity bound: it never evicts, so what it finds is the most any
// engine with that geometry could find. blockTokens 0 takes
// DefaultBlockTokens; an invalid one is an error wrapping
// kvcache.ErrInvalidConfig.
func NewCeilingCache(blockTokens int) (*kvcache.Cache, error) {
	return kvcache.New(kvcache.Config{BlockTokens: blockTokens, CharsPerToken: CharsPerToken, CapacityTokens: math.MaxInt64})
}

// MessageBytes is one message as the mock engine lays it out in the prompt
// it caches ("role:content\n", the same for chat and Responses input), so
// a replay can count blocks exactly as the engine cuts them.
func MessageBytes(role, content string) []byte {
	b := make([]byte, 0, len(role)+len(content)+2)
	b = append(b, role...)
	b = append(b, ':')
	b = append(b, content...)
	return append(b, '\n')
}

// CacheCeiling is the cache ceiling of w: of the total prompt tokens of
// its requests (as the mock engine counts them), how many an unbounded
// prefix cache with blockTokens-token blocks would serve, because an
// earlier request already sent them: an earlier turn of the same session
// (its messages and its reply), or any identical prefix of another
// request. Only whole blocks count, as in the engine. No router and no
// fleet can make an engine report more cached tokens than this, so a
// measured cache hit is best read as a share of it.
//
// The file holds no replies, so each reply is modelled as OutputTokens ·
// CharsPerToken bytes of text, as the routing simulator models it; a live
// run knows its real replies, and loadgen counts its own ceiling from
// them (replies from the mock engine average a little more than
// CharsPerToken bytes per token, so the live ceiling of the same file is
// slightly higher). Prompts are those of an unsalted replay
// (UserText keyed by the session id, "#<index>" for an anonymous
// request, after the Opening of a first turn). Requests are taken in
// file order; with an unbounded cache the total does not depend on the
// order, since every distinct block misses exactly once. A turn 1 starts
// its session afresh. blockTokens 0 is DefaultBlockTokens; an invalid
// block size is an error.
func CacheCeiling(w *Workload, blockTokens int) (cacheable, total int64, err error) {
	kv, err := NewCeilingCache(blockTokens)
	if err != nil {
		return 0, 0, err
	}
	last := map[string]int{} // each session's last request, to free its history
	for i := range w.Requests {
		if s := w.Requests[i].Session; s != "" {
			last[s] = i
		}
	}
	history := map[string]kvcache.Sequence{} // prompt and reply so far
	seed := w.Header.Seed
	for i := range w.Requests {
		r := &w.Requests[i]
		name := r.Session
		if name == "" {
			name = "#" + strconv.Itoa(r.Index)
		}
		msg := MessageBytes("user", UserText(seed, name, r.Turn, r.NewInputTokens))
		var prompt kvcache.Sequence
		if h, ok := history[r.Session]; ok && r.Session != "" && r.Turn > 1 {
			prompt = h.Extend(msg)
		} else {
			prompt = kv.NewSequence(append(Opening(seed, r), msg...))
		}
		lease := kv.Lookup(prompt)
		cacheable += int64(lease.CachedTokens())
		total += int64(prompt.Tokens())
		lease.Commit()
		reply := MessageBytes("assistant", UserText(seed, "reply:"+name, r.Turn, r.OutputTokens))
		lease.Release(reply)
		switch {
		case r.Session == "":
		case last[r.Session] == i:
			delete(history, r.Session)
		default:
			history[r.Session] = prompt.Extend(reply)
		}
	}
	return cacheable, total, nil
}

// Opening is what a first turn's prompt holds before its user message, as
// the mock engine lays it out: the request's shared prefix
// (PrefixMessage), or nothing. It takes the prefix name as the file gives
// it (an unsalted replay).
func Opening(seed uint64, r *Request) []byte {
	if r.Prefix == "" {
		return nil
	}
	return PrefixMessage(seed, r.Prefix, r.PrefixTokens)
}
