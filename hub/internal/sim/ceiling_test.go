package sim

import (
	"testing"

	"github.com/stargate-router/stargate/pkg/workload"
)

// The ceiling of a hand-built workload, by hand (16-token blocks of 64
// bytes, the prompts of TestHandCheckedSession):
//
//	session s, turn 1: 1002 tokens, nothing earlier            →    0
//	anonymous request: 1002 tokens of its own text             →    0
//	session s, turn 2: 1156 tokens; turn 1's prompt and reply
//	                   fill floor(4217/64) = 65 blocks          → 1040
//	session t, turn 1: 1002 tokens, another session's text     →    0
//	session s, turn 3: 1310 tokens; 75 blocks                   → 1200
//
// so 2240 of 5472 prompt tokens, 40.936 %.
func TestWorkloadCeilingByHand(t *testing.T) {
	w := openWorkload(t, oreq{0, "s", 1, 1000, 50}, oreq{1, "", 1, 1000, 50}, oreq{5000, "s", 2, 100, 50},
		oreq{6000, "t", 1, 1000, 50}, oreq{10000, "s", 3, 100, 50})
	p := prepare(t, w, equalFleet(1, 1, 25, 1))
	got := WorkloadCeiling(p)
	want := Ceiling{BlockTokens: 16, PromptTokens: 1002 + 1002 + 1156 + 1002 + 1310, CacheableTokens: 2240, Pct: 40.936}
	if got != want {
		t.Errorf("ceiling %+v, want %+v", got, want)
	}
}

// No arm caches more than the ceiling, even with no eviction, and an arm
// that keeps every session on one engine with room to spare reaches it:
// greedy-ttft on one engine with an unbounded-enough cache.
func TestCeilingBoundsEveryArm(t *testing.T) {
	f := DefaultFleet()
	p := prepare(t, closedSessions(t, 8, 32, 4, 3000, 300, 30), f)
	arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,greedy-ttft")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Compare(p, f, arms, Options{Seed: 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ceiling.CacheableTokens <= 0 {
		t.Fatalf("ceiling %+v", rep.Ceiling)
	}
	for _, a := range rep.Arms {
		if a.Cache.CachedTokens > rep.Ceiling.CacheableTokens || a.Cache.PctOfCeiling > 100 {
			t.Errorf("%s: cached %d tokens (%.1f %% of the ceiling), ceiling %d", a.Name, a.Cache.CachedTokens,
				a.Cache.PctOfCeiling, rep.Ceiling.CacheableTokens)
		}
	}
	one := equalFleet(1, 1, 0, 1)
	one.Clusters[0].Engine.KVCapacityTokens = 1 << 40
	p = prepare(t, closedSessions(t, 8, 32, 4, 3000, 300, 30), one)
	res, err := Run(p, one, builtin(t, GreedyTTFTName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cache.PctOfCeiling != 100 {
		t.Errorf("one engine, unbounded cache: %.3f %% of the ceiling, want 100", res.Cache.PctOfCeiling)
	}
}

// The workload package's ceiling counts the prompts the simulator
// replays: the same tokens per request, and the same cacheable tokens as
// replaying the simulator's own prompts through one unbounded mock-engine
// cache (lookup, commit, release with the reply), so "% of ceiling"
// compares like with like. The prefix suites are among the workloads: a
// replay that left out a first turn's shared prefix (workload.Opening)
// would count fewer tokens than the ceiling.
func TestCeilingMatchesSimEncoding(t *testing.T) {
	for _, w := range append([]*workload.Workload{
		closedSessions(t, 4, 24, 5, 1500, 150, 40),
		openWorkload(t, oreq{0, "s", 1, 1000, 50}, oreq{1, "", 1, 1000, 50}, oreq{5000, "s", 2, 100, 50}),
	}, prefixSuiteWorkloads(t)...) {
		p := prepare(t, w, equalFleet(1, 1, 25, 1))
		kv, err := workload.NewCeilingCache(p.BlockTokens)
		if err != nil {
			t.Fatal(err)
		}
		var cacheable, total int64
		for i := range p.reqs {
			pr, wr := &p.reqs[i], &p.W.Requests[i]
			l := kv.Lookup(pr.prompt)
			cacheable += int64(l.CachedTokens())
			total += int64(pr.tokens)
			l.Commit()
			l.Release(replyMessage(p.W.Header.Seed, pr.text, wr.Turn, wr.OutputTokens))
		}
		got := WorkloadCeiling(p)
		if got.CacheableTokens != cacheable || got.PromptTokens != total || cacheable == 0 {
			t.Errorf("workload ceiling %d of %d, simulator's prompts %d of %d", got.CacheableTokens, got.PromptTokens, cacheable, total)
		}
	}
}
