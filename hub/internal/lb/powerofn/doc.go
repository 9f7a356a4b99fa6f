// Package powerofn is the power-of-n load balancer
// (docs/design/algorithms.md#power-of-n): sample up to sample_count clusters
// uniformly without replacement among those not excluded, and take the best
// of the sample by the configured comparator, breaking ties uniformly at
// random.
//
// A Picker holds only its configuration, so one instance can be shared by
// every target and every goroutine; all randomness comes from the caller's
// *rand.Rand.
package powerofn
