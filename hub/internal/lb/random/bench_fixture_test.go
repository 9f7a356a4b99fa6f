package random

import (
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// microbenchSnapshot is the lb-microbench candidate pool of hub.md §9.2.
// random reads only the ids, but the full stats keep the decision cost
// (lb.NewDecision's queue estimate) the same as in the reference benchmark.
func microbenchSnapshot(n int) *routing.Snapshot { return lbtest.Snapshot("lb-bench-random", n) }

// microbenchRequests is one period of the §9.2 request stream.
func microbenchRequests(keys int, excluded []string) []routing.Request {
	return lbtest.Requests(keys, excluded)
}
