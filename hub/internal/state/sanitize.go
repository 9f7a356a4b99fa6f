package state

import (
	"maps"
	"math"
	"slices"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// Bounds on the statistics a registration may carry. A pylon is a peer
// the hub authenticates but does not control: a bug or a hostile process
// behind a valid token can report any number JSON holds, and the
// estimates, sums and reservations built on those numbers must stay
// meaningful whatever it sends.
const (
	// MaxStatCount bounds every count, token and millisecond field of
	// ModelStats (queue_size, queued_input_size, the KV fields,
	// num_running_queries, max_engine_concurrency, the priority map's
	// values, ...). 2^53 is the largest integer a float64 holds exactly,
	// and the estimates convert these fields to float64; it is also far
	// from the uint64 limit, so a cluster's sum over its backends plus
	// the hub's reservations cannot reach saturation in practice.
	MaxStatCount = 1 << 53
	// MaxStatRate bounds every throughput field (last_mean_input_tps,
	// output_tps, max_output_tps, max_input_tps), in tokens per second. It
	// is orders of magnitude above any real cluster and keeps every sum
	// of rates finite.
	MaxStatRate = 1e12
)

// sanitizeStats deep-copies in with every field brought within the
// bounds above, so that nothing the caller does later, and nothing the
// pylon sent, can reach a published snapshot unchecked:
//   - a rate that is NaN, infinite or not positive becomes 0, the value
//     every estimate already reads as "no valid rate"; a finite rate
//     above MaxStatRate is clamped to it;
//   - a count above MaxStatCount is clamped to it.
//
// JSON cannot carry NaN, an infinity or a negative value for an unsigned
// field (the registration line fails to decode and the session ends), so
// these cases reach the store only through a caller other than the
// tunnel; the clamps of finite values apply to every caller.
func sanitizeStats(in *protocol.ModelStats) protocol.ModelStats {
	out := *in
	for _, r := range [...]*float64{&out.LastMeanInputTPS, &out.OutputTPS, &out.MaxOutputTPS, &out.MaxInputTPS} {
		*r = clampRate(*r)
	}
	for _, c := range [...]*uint64{&out.QueueSize, &out.QueuedInputSize, &out.KVCacheCapacityTokens,
		&out.KVCacheUsedTokens, &out.KVCacheFreeTokens, &out.NumRunningQueries, &out.MaxEngineConcurrency,
		&out.TotalQueryInputSize, &out.InputProcessingQueries, &out.OutputGenerationQueries} {
		*c = min(*c, MaxStatCount)
	}
	if in.QueueTimeEstimateMsByPriority != nil {
		out.QueueTimeEstimateMsByPriority = maps.Clone(in.QueueTimeEstimateMsByPriority)
		for k, v := range out.QueueTimeEstimateMsByPriority {
			out.QueueTimeEstimateMsByPriority[k] = min(v, MaxStatCount)
		}
	}
	out.StatsCapabilities = slices.Clone(in.StatsCapabilities)
	out.StatsSources = slices.Clone(in.StatsSources)
	return out
}

// clampRate is a rate within [0, MaxStatRate], 0 for anything that is not
// a positive finite number.
func clampRate(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0
	}
	return min(v, MaxStatRate)
}
