package pulsar

import (
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
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

// microbenchSnapshot is the §9.2 candidate pool (lbtest.Snapshot).
func microbenchSnapshot(n int) *routing.Snapshot { return lbtest.Snapshot(microbenchTarget.Model, n) }

// microbenchRequests returns one period of the §9.2 request stream.
func microbenchRequests(keys int, excluded []string) []routing.Request {
	return lbtest.Requests(keys, excluded)
}
