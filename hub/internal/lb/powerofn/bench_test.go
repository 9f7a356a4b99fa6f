package powerofn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// microbenchSnapshot is the candidate pool of upstream Stargate's
// lb-microbench (docs/design/algorithms.md#microbenchmark-method).
func microbenchSnapshot(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{RoutingKey: "tenant-a", Model: "m"}}
	for i := range n {
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID:      fmt.Sprintf("cluster-%04d", i),
			RTT:            time.Duration(500+75*(i%19)) * time.Microsecond,
			ActiveBackends: 1,
			Stats: protocol.ModelStats{
				LastMeanInputTPS:      float64(1200 + 31*(i%13)),
				QueuedInputSize:       uint64(256 * (i % 5)),
				QueueSize:             uint64(i % 7),
				NumRunningQueries:     uint64(i % 9),
				MaxEngineConcurrency:  16,
				KVCacheCapacityTokens: 131072,
				QueueTimeEstimateMsByPriority: map[uint32]uint64{
					0: uint64(i % 5), 2: uint64(2 + i%11), 4: uint64(4 + i%17)},
			},
		})
	}
	return s
}

func BenchmarkPick(b *testing.B) {
	snap := microbenchSnapshot(64)
	for _, bc := range []struct {
		name     string
		sc       int
		excluded []string
	}{
		{"sample-2", 2, nil},
		{"sample-1", 1, nil},
		{"sample-4", 4, nil},
		{"sample-8", 8, nil},
		{"full-pool", 64, nil},
		{"one-excluded", 2, []string{"cluster-0000"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := New(Config{SampleCount: bc.sc, Comparator: lb.ComparatorTTFT})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			reqs := make([]routing.Request, 64)
			for i := range reqs {
				reqs[i] = routing.Request{InputTokens: uint64(512 + 64*(i%8)), Priority: uint32(i % 4),
					SLO: 250 * time.Millisecond, Excluded: bc.excluded}
			}
			now := time.Unix(0, 0)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := p.Pick(&reqs[i%len(reqs)], snap, now, rng); !ok {
					b.Fatal("no decision")
				}
				i++
			}
		})
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	snap := microbenchSnapshot(64)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sc := range []int{1, 2, 4, 64} {
		for _, ex := range [][]string{nil, {"cluster-0000", "cluster-0001"}} {
			p, _ := New(Config{SampleCount: sc})
			req := &routing.Request{InputTokens: 512, Excluded: ex}
			if n := testing.AllocsPerRun(200, func() { p.Pick(req, snap, time.Time{}, rng) }); n != 0 {
				t.Errorf("sample_count %d, excluded %v: %v allocs per Pick", sc, ex, n)
			}
		}
	}
}
