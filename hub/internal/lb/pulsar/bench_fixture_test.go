package pulsar

import (
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// The fixture of upstream Stargate's lb-microbench (methodology
// choose-only-v3; docs/design/algorithms.md#microbenchmark-method). The
// names must not change: TestHashPinned pins the hash of its first request.
const (
	// microbenchClusters is --candidates.
	microbenchClusters = 64
	// microbenchKeys is --cache-key-count.
	microbenchKeys = 1024
	// microbenchSeed is the seed upstream's benchmark gives pulsar.
	microbenchSeed = "lb-microbench-seed"
)

// microbenchTarget is the benchmark's routing target (routing key tenant-a;
// upstream's benchmark names the model after the scenario).
var microbenchTarget = routing.Target{RoutingKey: "tenant-a", Model: "lb-bench-pulsar"}

// microbenchSnapshot is the benchmark's candidate pool (lbtest.Snapshot).
func microbenchSnapshot(n int) *routing.Snapshot { return lbtest.Snapshot(microbenchTarget.Model, n) }

// microbenchRequests returns one period of the benchmark's request stream.
func microbenchRequests(keys int, excluded []string) []routing.Request {
	return lbtest.Requests(keys, excluded)
}
