package state

import (
	"math"
	"slices"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// aggregate builds a cluster's view from its active backends (sorted by id,
// at least one), per docs/design/routing-state.md#cluster-aggregation:
//
//   - sums: last_mean_input_tps (valid values only: positive and finite),
//     output_tps, queue_size, queued_input_size, input_processing_queries,
//     output_generation_queries (integers saturate);
//   - latest-wins, from the source backend: max_output_tps, the three KV
//     fields, num_running_queries, max_engine_concurrency,
//     total_query_input_size, queue_time_estimate_ms_by_priority, and the
//     view's UpdatedAt (the source's receive time);
//   - max: stats_observed_at_unix_ms, and max_input_tps when every backend
//     reports a valid one (else 0);
//   - ordered union: stats_capabilities and stats_sources, in backend-id
//     order, first occurrence kept;
//   - RTT: floor of the mean of the backends' RTTs in whole nanoseconds.
func aggregate(clusterID string, backends []*member, source string) routing.ClusterView {
	src := backends[0]
	for _, m := range backends {
		if m.backend.ID == source {
			src = m
			break
		}
	}
	var out protocol.ModelStats
	allPeaks := true
	for _, m := range backends {
		st := &m.stats
		if validTPS(st.LastMeanInputTPS) {
			out.LastMeanInputTPS += st.LastMeanInputTPS
		}
		if validTPS(st.MaxInputTPS) {
			out.MaxInputTPS = max(out.MaxInputTPS, st.MaxInputTPS)
		} else {
			allPeaks = false
		}
		if st.OutputTPS >= 0 && !math.IsInf(st.OutputTPS, 1) {
			out.OutputTPS += st.OutputTPS // NaN fails the test above
		}
		out.QueueSize = satAdd(out.QueueSize, st.QueueSize)
		out.QueuedInputSize = satAdd(out.QueuedInputSize, st.QueuedInputSize)
		out.InputProcessingQueries = satAdd(out.InputProcessingQueries, st.InputProcessingQueries)
		out.OutputGenerationQueries = satAdd(out.OutputGenerationQueries, st.OutputGenerationQueries)
		out.StatsObservedAtUnixMs = max(out.StatsObservedAtUnixMs, st.StatsObservedAtUnixMs)
		out.StatsCapabilities = appendUnique(out.StatsCapabilities, st.StatsCapabilities)
		out.StatsSources = appendUnique(out.StatsSources, st.StatsSources)
	}
	// A sum of finite values can still overflow to +Inf; report 0 (no
	// usable rate) rather than an infinite one, as upstream Stargate does:
	// an infinite rate would make every estimate of the cluster 0.
	if math.IsInf(out.LastMeanInputTPS, 0) {
		out.LastMeanInputTPS = 0
	}
	if math.IsInf(out.OutputTPS, 0) {
		out.OutputTPS = 0
	}
	// A cluster's peak is its greatest backend peak, and only when every
	// backend knows one: a backend still warming up would otherwise hide
	// behind a sibling's number, and the cluster would win pulsar keys for
	// capacity it has not shown.
	if !allPeaks {
		out.MaxInputTPS = 0
	}
	s := &src.stats
	out.MaxOutputTPS = s.MaxOutputTPS
	out.KVCacheCapacityTokens = s.KVCacheCapacityTokens
	out.KVCacheUsedTokens = s.KVCacheUsedTokens
	out.KVCacheFreeTokens = s.KVCacheFreeTokens
	out.NumRunningQueries = s.NumRunningQueries
	out.MaxEngineConcurrency = s.MaxEngineConcurrency
	out.TotalQueryInputSize = s.TotalQueryInputSize
	out.QueueTimeEstimateMsByPriority = s.QueueTimeEstimateMsByPriority // shared: never modified

	rtts := make([]time.Duration, 0, 8)
	for _, m := range backends {
		rtts = append(rtts, m.rtt)
	}
	return routing.ClusterView{
		ClusterID:      clusterID,
		Stats:          out,
		RTT:            meanRTT(rtts),
		UpdatedAt:      src.receivedAt,
		ActiveBackends: len(backends),
	}
}

// meanRTT is floor(Σ rtts / n) in whole nanoseconds for non-negative rtts,
// computed without overflow: each sample is divided before it is added and
// the remainders are carried, so the running mean never exceeds the largest
// sample.
func meanRTT(rtts []time.Duration) time.Duration {
	n := uint64(len(rtts))
	if n == 0 {
		return 0
	}
	var mean, rem uint64
	for _, r := range rtts {
		v := uint64(max(r, 0))
		mean += v / n
		rem += v % n // < 2n: rem < n before, v%n < n after
		mean += rem / n
		rem %= n
	}
	return time.Duration(mean)
}

func appendUnique(dst, values []string) []string {
	for _, v := range values {
		if !slices.Contains(dst, v) {
			dst = append(dst, v)
		}
	}
	return dst
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// validTPS, queueTimeDeltaMs and priorityEstimate restate the lb package's
// ValidTPS, QueueTimeDeltaMs and PriorityMapEstimate
// (docs/design/algorithms.md#estimates), which the state store may not
// import; a test pins them together.

func validTPS(x float64) bool { return x > 0 && !math.IsInf(x, 1) && !math.IsNaN(x) }

func queueTimeDeltaMs(tok uint64, tps float64) (uint64, bool) {
	if tok == 0 {
		return 0, true
	}
	if !validTPS(tps) {
		return 0, false
	}
	ms := math.Ceil(1000 * float64(tok) / tps)
	if !(ms < 18446744073709551616.0) {
		return 0, false
	}
	return uint64(ms), true
}

func priorityEstimate(m map[uint32]uint64, p uint32) uint64 {
	var best uint32
	var ms uint64
	found := false
	for k, v := range m {
		if k <= p && (!found || k > best) {
			best, ms, found = k, v, true
		}
	}
	return ms
}
