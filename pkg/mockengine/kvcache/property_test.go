package kvcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRandomWorkload drives random conversations with shared prefixes,
// overlapping leases, cancellations and tight capacities, and checks the
// cache's invariants after every step: cached tokens never exceed the prompt,
// usage never exceeds capacity, and all pins are gone once every lease is
// released.
func TestRandomWorkload(t *testing.T) {
	t.Parallel()
	configs := []Config{
		byteCfg(0),
		byteCfg(3),
		byteCfg(17),
		{BlockTokens: 2, CharsPerToken: 1.5, CapacityTokens: 40},
		{BlockTokens: 4, CharsPerToken: 1, CapacityTokens: 200},
		{BlockTokens: 4, CharsPerToken: 1, CapacityTokens: 5},
	}
	for ci, cfg := range configs {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("cfg=%d/seed=%d", ci, seed), func(t *testing.T) {
				t.Parallel()
				runRandomWorkload(t, cfg, rand.New(rand.NewPCG(seed, uint64(ci))))
			})
		}
	}
}

func runRandomWorkload(t *testing.T, cfg Config, rng *rand.Rand) {
	c := newCache(t, cfg)
	// A small alphabet and a few shared roots make prefix sharing, sibling
	// branches and identical blocks under different prefixes all common.
	roots := []string{"", "sys:", "system prompt ", "ab"}
	randText := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abxy"[rng.IntN(4)]
		}
		return string(b)
	}
	histories := make([]string, 5)
	var open []*Lease
	for step := range 400 {
		switch op := rng.IntN(10); {
		case op < 4 || len(open) == 0: // start a request
			h := rng.IntN(len(histories))
			if rng.IntN(8) == 0 {
				histories[h] = roots[rng.IntN(len(roots))]
			}
			prompt := histories[h] + randText(rng.IntN(12))
			histories[h] = prompt
			seq := c.NewSequence([]byte(prompt))
			l := c.Lookup(seq)
			if l.CachedTokens() > seq.Tokens() {
				t.Fatalf("step %d: cached %d tokens of a %d-token prompt", step, l.CachedTokens(), seq.Tokens())
			}
			if l.CachedTokens()%cfg.BlockTokens != 0 {
				t.Fatalf("step %d: cached %d is not whole blocks", step, l.CachedTokens())
			}
			open = append(open, l)
		case op < 7: // finish the prefill of some open request
			open[rng.IntN(len(open))].Commit()
		case op < 9: // finish a request, possibly cancelled
			i := rng.IntN(len(open))
			l := open[i]
			open = append(open[:i], open[i+1:]...)
			var out []byte
			if rng.IntN(4) != 0 {
				out = []byte(randText(rng.IntN(10)))
			}
			l.Release(out)
			if rng.IntN(10) == 0 {
				l.Release(out) // double release must stay harmless
			}
		default:
			if rng.IntN(40) == 0 {
				c.Reset()
			}
		}
		checkInvariants(t, c)
	}
	for _, l := range open {
		l.Commit()
		l.Release([]byte("tail"))
	}
	checkInvariants(t, c)
	s := c.Stats()
	if s.PinnedBlocks != 0 {
		t.Fatalf("PinnedBlocks = %d after every lease was released", s.PinnedBlocks)
	}
	if s.HitTokens > s.QueryTokens {
		t.Fatalf("HitTokens %d > QueryTokens %d", s.HitTokens, s.QueryTokens)
	}
	if cfg.CapacityTokens == 0 && (s.Blocks != 0 || s.HitCount != 0) {
		t.Fatalf("disabled cache stored or hit: %+v", s)
	}
}
