// Package lbtest holds fixtures shared by the load balancers' tests and
// benchmarks: the candidate pool and request stream of upstream Stargate's
// lb-microbench (docs/design/algorithms.md#microbenchmark-method), so every
// package measures against the same numbers and our results compare with
// upstream's. The names and seeds must not change: the affinity hashes, and
// with them rank depths and cluster spreads, depend on them.
//
// It also holds small behaviour fleets (Idle, Regions) and the helpers that
// change one cluster of them (With, Saturate), so the session and region
// tests of several algorithms describe their fleets alike.
package lbtest

import (
	"fmt"
	"slices"
	"strings"
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

// FleetTarget is the routing target of the behaviour fleets.
var FleetTarget = routing.Target{RoutingKey: "rk", Model: "m"}

// Slots is every behaviour-fleet cluster's max_engine_concurrency.
const Slots = 4

// Cluster is an idle behaviour-fleet cluster: input throughput 1000
// tokens/s (as both last_mean_input_tps and max_input_tps, so every
// cluster weighs the same in pulsar), Slots engine slots with none
// running, a 100000-token KV cache that is all free, and the given RTT.
func Cluster(id string, rtt time.Duration) routing.ClusterView {
	return routing.ClusterView{
		ClusterID:      id,
		RTT:            rtt,
		ActiveBackends: 1,
		Stats: protocol.ModelStats{
			LastMeanInputTPS:      1000,
			MaxInputTPS:           1000,
			MaxEngineConcurrency:  Slots,
			KVCacheCapacityTokens: 100000,
			KVCacheFreeTokens:     100000,
		},
	}
}

// Fleet is a published-looking snapshot of cs for FleetTarget: sorted by
// cluster id, as the state store sorts them, with Version 1.
func Fleet(cs ...routing.ClusterView) *routing.Snapshot {
	s := &routing.Snapshot{Target: FleetTarget, Version: 1, Generation: 1, Clusters: slices.Clone(cs)}
	slices.SortFunc(s.Clusters, func(a, b routing.ClusterView) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return s
}

// Idle is n idle clusters c0…c(n-1), all 2 ms away.
func Idle(n int) *routing.Snapshot {
	cs := make([]routing.ClusterView, n)
	for i := range cs {
		cs[i] = Cluster(fmt.Sprintf("c%d", i), 2*time.Millisecond)
	}
	return Fleet(cs...)
}

// Regions is two regions of idle clusters: near-0…near-(near-1) at
// nearRTT and far-0…far-(far-1) at farRTT.
func Regions(near, far int, nearRTT, farRTT time.Duration) *routing.Snapshot {
	var cs []routing.ClusterView
	for i := range near {
		cs = append(cs, Cluster(fmt.Sprintf("near-%d", i), nearRTT))
	}
	for i := range far {
		cs = append(cs, Cluster(fmt.Sprintf("far-%d", i), farRTT))
	}
	return Fleet(cs...)
}

// With returns a copy of snap with the next Version in which mut has
// changed every cluster named in ids; snap itself is not touched, as a
// published snapshot never is. It panics on an id snap does not hold, so
// a typo cannot make a test pass.
func With(snap *routing.Snapshot, mut func(*routing.ClusterView), ids ...string) *routing.Snapshot {
	s := *snap
	s.Clusters = slices.Clone(snap.Clusters)
	s.Version++
	for _, id := range ids {
		i := s.Index(id)
		if i < 0 {
			panic("lbtest: no cluster " + id)
		}
		mut(&s.Clusters[i])
	}
	return &s
}

// Saturate returns With(snap, …) in which the named clusters run far more
// requests than their slots plus any queue allowance a test configures, so
// they have no room by any algorithm's capacity rule.
func Saturate(snap *routing.Snapshot, ids ...string) *routing.Snapshot {
	return With(snap, func(c *routing.ClusterView) { c.Stats.NumRunningQueries = c.Stats.MaxEngineConcurrency + 1000 }, ids...)
}
