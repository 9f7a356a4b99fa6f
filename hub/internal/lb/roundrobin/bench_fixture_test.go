package roundrobin

import (
	"fmt"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// microbenchSnapshot is the lb-microbench candidate pool of hub.md §9.2, a
// copy of the one in package pulsar's bench_fixture_test.go (test files
// cannot be shared across packages). round-robin reads only the ids, but the full
// stats keep the decision cost (lb.NewDecision's queue estimate) the same as
// in the reference benchmark.
func microbenchSnapshot(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{RoutingKey: "tenant-a", Model: "lb-bench-round-robin"}, Version: 1, Generation: 1}
	for i := range n {
		tps := float64(1200 + 31*(i%13))
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID:      fmt.Sprintf("cluster-%04d", i),
			RTT:            time.Duration(500+75*(i%19)) * time.Microsecond,
			ActiveBackends: 1,
			Stats: protocol.ModelStats{
				LastMeanInputTPS:      tps,
				MaxInputTPS:           tps,
				QueuedInputSize:       uint64(256 * (i % 5)),
				QueueSize:             uint64(i % 7),
				NumRunningQueries:     uint64(i % 9),
				MaxEngineConcurrency:  16,
				KVCacheCapacityTokens: 131072,
				KVCacheUsedTokens:     uint64(8192 + 64*(i%23)),
				KVCacheFreeTokens:     uint64(122880 - 64*(i%23)),
				QueueTimeEstimateMsByPriority: map[uint32]uint64{
					0: uint64(i % 5), 2: uint64(2 + i%11), 4: uint64(4 + i%17)},
			},
		})
	}
	return s
}

// microbenchRequests is one period of the §9.2 request stream.
func microbenchRequests(keys int, excluded []string) []routing.Request {
	reqs := make([]routing.Request, keys)
	for i := range reqs {
		reqs[i] = routing.Request{
			AffinityKey: fmt.Sprintf("cache-prefix-%06d", i%keys),
			InputTokens: uint64(512 + 64*(i%8)),
			Priority:    uint32(i % 4),
			SLO:         250 * time.Millisecond,
			Excluded:    excluded,
		}
	}
	return reqs
}
