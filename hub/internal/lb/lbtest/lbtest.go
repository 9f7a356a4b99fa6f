// Package lbtest holds fixtures shared by the load balancers' tests and
// benchmarks: the candidate pool and request stream of upstream Stargate's
// lb-microbench (docs/design/algorithms.md#microbenchmark-method), so every
// package measures against the same numbers and our results compare with
// upstream's. The names and seeds must not change: the affinity hashes, and
// with them rank depths and cluster spreads, depend on them.
package lbtest

import (
	"fmt"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Upstream Stargate's lb-microbench defaults.
const (
	// Candidates is --candidates.
	Candidates = 64
	// Keys is --cache-key-count.
	Keys = 1024
	// Seed is the seed upstream's benchmark gives every seeded algorithm.
	Seed = "lb-microbench-seed"
	// RoutingKey is the benchmark target's routing key.
	RoutingKey = "tenant-a"
)

// Snapshot is the benchmark's candidate pool of n clusters for model:
// cluster i is `cluster-%04d` with tps 1200+31·(i%13) (as both last_mean_input_tps
// and max_input_tps), output tps 120+i%11, queued input 256·(i%5),
// queue_size i%7, running i%9 of 16, KV capacity 131072 (used
// 8192+64·(i%23), free the rest), total query input 384·(i%6), priority
// map {0: i%5, 2: 2+i%11, 4: 4+i%17} and RTT 500+75·(i%19) µs. Version and
// the sorted priorities are set as the state store sets them, so caches
// trust the snapshot and estimates take the published fast path.
func Snapshot(model string, n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{RoutingKey: RoutingKey, Model: model}, Version: 1, Generation: 1}
	for i := range n {
		tps := float64(1200 + 31*(i%13))
		prio := map[uint32]uint64{0: uint64(i % 5), 2: uint64(2 + i%11), 4: uint64(4 + i%17)}
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID:      fmt.Sprintf("cluster-%04d", i),
			RTT:            time.Duration(500+75*(i%19)) * time.Microsecond,
			ActiveBackends: 1,
			Priorities:     routing.SortPriorities(prio),
			Stats: protocol.ModelStats{
				LastMeanInputTPS:              tps,
				MaxInputTPS:                   tps,
				OutputTPS:                     float64(120 + i%11),
				MaxOutputTPS:                  500,
				QueuedInputSize:               uint64(256 * (i % 5)),
				QueueSize:                     uint64(i % 7),
				NumRunningQueries:             uint64(i % 9),
				MaxEngineConcurrency:          16,
				KVCacheCapacityTokens:         131072,
				KVCacheUsedTokens:             uint64(8192 + 64*(i%23)),
				KVCacheFreeTokens:             uint64(122880 - 64*(i%23)),
				TotalQueryInputSize:           uint64(384 * (i % 6)),
				QueueTimeEstimateMsByPriority: prio,
			},
		})
	}
	return s
}

// Key is the affinity key of request i: `cache-prefix-%06d` of i mod Keys.
func Key(i int) string { return fmt.Sprintf("cache-prefix-%06d", i%Keys) }

// Request is request i of the benchmark's stream: key (Key(i), which
// callers in a timed loop compute beforehand), 512+64·(i%8) input tokens,
// priority i%4 and a 250 ms SLO.
func Request(i int, key string, excluded []string) routing.Request {
	return routing.Request{
		AffinityKey: key,
		InputTokens: uint64(512 + 64*(i%8)),
		Priority:    uint32(i % 4),
		SLO:         250 * time.Millisecond,
		Excluded:    excluded,
	}
}

// Requests is one period of the stream: requests 0..keys-1 (with keys a
// multiple of 8 the stream repeats after keys requests).
func Requests(keys int, excluded []string) []routing.Request {
	reqs := make([]routing.Request, keys)
	for i := range reqs {
		reqs[i] = Request(i, fmt.Sprintf("cache-prefix-%06d", i%keys), excluded)
	}
	return reqs
}
