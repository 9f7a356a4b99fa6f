package random

import (
	"math/rand/v2"
	"testing"
	"time"
)

func benchPick(b *testing.B, excluded []string) {
	p := New()
	snap := microbenchSnapshot(64)
	reqs := microbenchRequests(1024, excluded)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(0, 0)
	for i := range reqs {
		p.Pick(&reqs[i], snap, now, rng)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok := p.Pick(&reqs[i%len(reqs)], snap, now, rng); !ok {
			b.Fatal("no decision")
		}
		i++
	}
}

// BenchmarkRandom is the lb-microbench `random` scenario.
func BenchmarkRandom(b *testing.B) { benchPick(b, nil) }

// BenchmarkRandomOneExcluded is `random-one-excluded`: cluster-0000 excluded.
func BenchmarkRandomOneExcluded(b *testing.B) { benchPick(b, []string{"cluster-0000"}) }
