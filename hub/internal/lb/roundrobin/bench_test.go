package roundrobin

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

// BenchmarkRoundRobinOneExcluded is `round-robin-one-excluded`: cluster-0000
// excluded.
func BenchmarkRoundRobinOneExcluded(b *testing.B) { benchPick(b, []string{"cluster-0000"}) }

// BenchmarkRoundRobinMultiExcluded is `round-robin-multi-excluded`:
// cluster-0000 and cluster-0001 excluded.
func BenchmarkRoundRobinMultiExcluded(b *testing.B) {
	benchPick(b, []string{"cluster-0000", "cluster-0001"})
}
