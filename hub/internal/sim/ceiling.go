package sim

import (
	"github.com/stargate-router/stargate/pkg/workload"
)

// Ceiling is how much of a workload's prompts any routing could serve from
// cache (workload.CacheCeiling): the prompt tokens an earlier request had
// already sent, in a cache of the fleet's block geometry with no capacity
// bound. It bounds every arm's cached tokens; greedy-ttft does not.
type Ceiling struct {
	BlockTokens int `json:"block_tokens"`
	// PromptTokens sums every request's prompt tokens; CacheableTokens
	// those an unbounded cache would serve; Pct is their ratio.
	PromptTokens    int64   `json:"prompt_tokens"`
	CacheableTokens int64   `json:"cacheable_tokens"`
	Pct             float64 `json:"pct"`
}

// WorkloadCeiling is p's ceiling in p's block geometry: the workload
// package's count, the one loadgen prints for the same file, over the same
// prompt encoding the simulator replays (TestCeilingMatchesSimEncoding).
func WorkloadCeiling(p *Prepared) Ceiling {
	cacheable, total, err := workload.CacheCeiling(p.W, p.BlockTokens)
	if err != nil {
		// Prepare built its prompts with this block size, so it is valid.
		panic(err)
	}
	return Ceiling{BlockTokens: p.BlockTokens, PromptTokens: total, CacheableTokens: cacheable, Pct: pct(cacheable, total)}
}
