package random

import (
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// microbenchSnapshot is the lb-microbench candidate pool
// (docs/design/algorithms.md#microbenchmark-method). random reads only the
// ids, but the full stats keep the decision cost (lb.NewDecision's queue
// estimate) the same as in upstream Stargate's benchmark.
func microbenchSnapshot(n int) *routing.Snapshot { return lbtest.Snapshot("lb-bench-random", n) }

// microbenchRequests is one period of the benchmark's request stream.
func microbenchRequests(keys int, excluded []string) []routing.Request {
	return lbtest.Requests(keys, excluded)
}
