package pulsar

import (
	"fmt"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The lb-microbench fixture of hub.md §9.2 (stargate-bench
// src/microbench/lb.rs, methodology choose-only-v3).
const (
	// microbenchClusters is --candidates.
	microbenchClusters = 64
	// microbenchKeys is --cache-key-count.
	microbenchKeys = 1024
	// microbenchSeed is the seed the reference benchmark gives pulsar.
	microbenchSeed = "lb-microbench-seed"
)

// microbenchTarget is the benchmark's routing target (routing key tenant-a;
// the reference names the model after the scenario).
var microbenchTarget = routing.Target{RoutingKey: "tenant-a", Model: "lb-bench-pulsar"}

// microbenchSnapshot is the §9.2 candidate pool: cluster i is `cluster-%04d`
// with tps 1200+31·(i%13) (as both last_mean_input_tps and max_input_tps),
// queued_input 256·(i%5), queue_size i%7, running i%9, mec 16, KV capacity
// 131072 (used 8192+64·(i%23), free the rest), priority map {0: i%5,
// 2: 2+i%11, 4: 4+i%17} and rtt 500+75·(i%19) µs. Version is set as the
// state store would, so the ranking cache can trust it.
func microbenchSnapshot(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: microbenchTarget, Version: 1, Generation: 1}
	for i := range n {
		tps := float64(1200 + 31*(i%13))
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID:      fmt.Sprintf("cluster-%04d", i),
			RTT:            time.Duration(500+75*(i%19)) * time.Microsecond,
			ActiveBackends: 1,
			Stats: protocol.ModelStats{
				LastMeanInputTPS:      tps,
				MaxInputTPS:           tps,
				OutputTPS:             float64(120 + i%11),
				QueuedInputSize:       uint64(256 * (i % 5)),
				QueueSize:             uint64(i % 7),
				NumRunningQueries:     uint64(i % 9),
				MaxEngineConcurrency:  16,
				KVCacheCapacityTokens: 131072,
				KVCacheUsedTokens:     uint64(8192 + 64*(i%23)),
				KVCacheFreeTokens:     uint64(122880 - 64*(i%23)),
				TotalQueryInputSize:   uint64(384 * (i % 6)),
				QueueTimeEstimateMsByPriority: map[uint32]uint64{
					0: uint64(i % 5), 2: uint64(2 + i%11), 4: uint64(4 + i%17)},
			},
		})
	}
	return s
}

// microbenchRequests returns one period of the §9.2 request stream: request i
// has key `cache-prefix-%06d` (i mod keys), 512+64·(i%8) input tokens,
// priority i%4 and a 250 ms SLO. With keys a multiple of 8 the stream repeats
// after keys requests.
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
