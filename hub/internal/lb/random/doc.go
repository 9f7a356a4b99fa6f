// Package random is the random load balancer
// (docs/design/algorithms.md#random): a uniform choice among the clusters the
// request has not excluded, with rank depth 1.
//
// It owns only the sampling: it reads no statistics, so a cluster's load never
// changes its chance of being chosen. A Picker has no state at all; every draw
// comes from the caller's *rand.Rand, so one instance may serve every target
// and every goroutine.
package random
