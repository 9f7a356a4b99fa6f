package pulsar

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// benchPick runs the lb-microbench choose-only loop: the 1024-request stream
// cycles over the 64-cluster pool. One pass over the stream before the timer
// starts fills the ranking cache, as upstream's warm-up iterations do, so the
// timed loop measures steady-state decisions.
func benchPick(b *testing.B, excluded []string) {
	p, err := New(Config{Seed: microbenchSeed})
	if err != nil {
		b.Fatal(err)
	}
	snap := microbenchSnapshot(microbenchClusters)
	reqs := microbenchRequests(microbenchKeys, excluded)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(0, 0)
	depth := 0
	for i := range reqs {
		if _, ok := p.Pick(&reqs[i], snap, now, rng); !ok {
			b.Fatal("no decision")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, ok := p.Pick(&reqs[i%len(reqs)], snap, now, rng)
		if !ok {
			b.Fatal("no decision")
		}
		depth += d.RankDepth
		i++
	}
	b.ReportMetric(float64(depth)/float64(i), "rank_depth")
}

// BenchmarkPulsar is the lb-microbench `pulsar` scenario.
func BenchmarkPulsar(b *testing.B) { benchPick(b, nil) }

// BenchmarkPulsarOneExcluded is `pulsar-one-excluded`: cluster-0000 excluded.
func BenchmarkPulsarOneExcluded(b *testing.B) { benchPick(b, []string{"cluster-0000"}) }

// BenchmarkPulsarParallel runs the `pulsar` scenario from every P at once
// through one Picker, to measure contention on the cache lock.
func BenchmarkPulsarParallel(b *testing.B) {
	p, err := New(Config{Seed: microbenchSeed})
	if err != nil {
		b.Fatal(err)
	}
	snap := microbenchSnapshot(microbenchClusters)
	reqs := microbenchRequests(microbenchKeys, nil)
	for i := range reqs {
		p.Pick(&reqs[i], snap, time.Time{}, nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := p.Pick(&reqs[i%len(reqs)], snap, time.Time{}, nil); !ok {
				b.Error("no decision")
				return
			}
			i++
		}
	})
}

// BenchmarkPulsarRankMiss measures building one full 64-cluster ranking (a
// cache miss), the cost the cache exists to avoid.
func BenchmarkPulsarRankMiss(b *testing.B) {
	r := NewRanker(microbenchSeed, WeightMaxInputTPS)
	snap := microbenchSnapshot(microbenchClusters)
	b.ReportAllocs()
	for b.Loop() {
		r.compute("cache-prefix-000001", snap)
	}
}

// BenchmarkPulsarScan measures the O(n) answer for an uncached key.
func BenchmarkPulsarScan(b *testing.B) {
	p, err := New(Config{Seed: microbenchSeed})
	if err != nil {
		b.Fatal(err)
	}
	snap := microbenchSnapshot(microbenchClusters)
	req := microbenchRequests(1, []string{"cluster-0000"})[0]
	b.ReportAllocs()
	for b.Loop() {
		p.scan(&req, snap)
	}
}

// tieredGap cuts the fixture's RTTs (500 µs + 75 µs steps) into one tier
// per distinct RTT, the most sorting tiers ever cost.
const tieredGap = 50 * time.Microsecond

// BenchmarkPulsarTieredRankMiss is BenchmarkPulsarRankMiss with RTT tiers:
// the tiers of a snapshot are computed with every full ranking.
func BenchmarkPulsarTieredRankMiss(b *testing.B) {
	r := NewTieredRanker(microbenchSeed, WeightMaxInputTPS, tieredGap)
	snap := microbenchSnapshot(microbenchClusters)
	b.ReportAllocs()
	for b.Loop() {
		r.compute("cache-prefix-000001", snap)
	}
}

// BenchmarkPulsarTieredScan is BenchmarkPulsarScan with RTT tiers.
func BenchmarkPulsarTieredScan(b *testing.B) {
	p, err := New(Config{Seed: microbenchSeed, RTTTier: tieredGap})
	if err != nil {
		b.Fatal(err)
	}
	snap := microbenchSnapshot(microbenchClusters)
	req := microbenchRequests(1, []string{"cluster-0000"})[0]
	b.ReportAllocs()
	for b.Loop() {
		p.scan(&req, snap)
	}
}

// BenchmarkPulsarTieredNewVersion is a cache hit on a snapshot version the
// ranker has not checked yet, where the new snapshot is compared with the
// cached signature; two snapshots alternate so every decision takes that
// path. They are equal, or (jitter) differ by 1 µs in every RTT, which
// moves no tier but makes the ranker work the tiers out.
func BenchmarkPulsarTieredNewVersion(b *testing.B) {
	for _, tc := range []struct {
		gap    time.Duration
		jitter bool
	}{{0, false}, {tieredGap, false}, {0, true}, {tieredGap, true}} {
		b.Run(fmt.Sprintf("gap=%v/jitter=%v", tc.gap, tc.jitter), func(b *testing.B) {
			p, err := New(Config{Seed: microbenchSeed, RTTTier: tc.gap})
			if err != nil {
				b.Fatal(err)
			}
			snaps := []*routing.Snapshot{microbenchSnapshot(microbenchClusters), microbenchSnapshot(microbenchClusters)}
			snaps[1].Version = 2
			if tc.jitter {
				for i := range snaps[1].Clusters {
					snaps[1].Clusters[i].RTT += time.Microsecond
				}
			}
			req := microbenchRequests(1, nil)[0]
			p.Pick(&req, snaps[0], time.Time{}, nil)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p.Pick(&req, snaps[i%2], time.Time{}, nil)
				i++
			}
		})
	}
}
