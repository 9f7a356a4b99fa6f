package lb

import (
	"math"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The formulas below are docs/design/algorithms.md#estimates, term for term.
// s is a cluster's stats (reservations included), tok the request's
// x-input-tokens and p its x-priority.

// ValidTPS reports whether x is a usable throughput: positive and finite.
func ValidTPS(x float64) bool { return x > 0 && !math.IsInf(x, 1) && !math.IsNaN(x) }

// InputTPS is s.LastMeanInputTPS when valid, else 0.
func InputTPS(s *protocol.ModelStats) float64 {
	if ValidTPS(s.LastMeanInputTPS) {
		return s.LastMeanInputTPS
	}
	return 0
}

// Delay is the time in seconds to process work at rate: 0 when there is no
// work, +Inf when the rate is not positive, else work/rate.
func Delay(work, rate float64) float64 {
	if work == 0 {
		return 0
	}
	if rate <= 0 {
		return math.Inf(1)
	}
	return work / rate
}

// DelayMs is 1000·Delay(work, rate).
func DelayMs(work, rate float64) float64 { return Delay(work, rate) * 1000 }

// twoTo64 is 2^64 as a float64: the smallest float64 that no uint64 reaches.
const twoTo64 = 18446744073709551616.0

// QueueTimeDeltaMs is the queue time, in whole milliseconds rounded up, that
// tok queued tokens add at tps: 0 for no tokens, false when tps is not valid
// or the result does not fit in a uint64.
func QueueTimeDeltaMs(tok uint64, tps float64) (uint64, bool) {
	if tok == 0 {
		return 0, true
	}
	if !ValidTPS(tps) {
		return 0, false
	}
	ms := math.Ceil(1000 * float64(tok) / tps)
	if !(ms < twoTo64) {
		return 0, false
	}
	return uint64(ms), true
}

// PriorityMapEstimate looks p up in a queue_time_estimate_ms_by_priority map:
// the value at the greatest key ≤ p. ok is false when no key is ≤ p (the map
// is never searched upward and never clamped to its lowest key).
func PriorityMapEstimate(m map[uint32]uint64, p uint32) (ms uint64, ok bool) {
	// Pylons key the map by the priorities that have work, so requests
	// usually find their own key; a lookup is several times cheaper than
	// iterating a map.
	if ms, ok = m[p]; ok {
		return ms, ok
	}
	var best uint32
	for k, v := range m {
		if k <= p && (!ok || k > best) {
			best, ms, ok = k, v, true
		}
	}
	return ms, ok
}

// QueueEstimate is qest(s, p), the value sent as x-stargate-expected-queue-ms:
//   - a non-empty priority map gives the value at its greatest key ≤ p, or 0
//     when there is none;
//   - otherwise no queued input gives 0;
//   - otherwise a valid TPS gives ceil(1000·queued_input_size/tps);
//   - otherwise the estimate is undefined (ok false).
func QueueEstimate(s *protocol.ModelStats, p uint32) (ms uint64, ok bool) {
	if FreeSlot(s) {
		return 0, true
	}
	if len(s.QueueTimeEstimateMsByPriority) > 0 {
		ms, _ = PriorityMapEstimate(s.QueueTimeEstimateMsByPriority, p)
		return ms, true
	}
	return QueueTimeDeltaMs(s.QueuedInputSize, s.LastMeanInputTPS)
}

// FreeSlot is the free-slot rule (docs/design/algorithms.md#free-slot-rule):
// a cluster that reports its engine concurrency and has fewer running
// requests than that (pending reservations included) starts a new request
// at once, so its queue delay is 0 whatever its queue fields say. An unknown
// concurrency (0) never qualifies.
func FreeSlot(s *protocol.ModelStats) bool {
	return s.MaxEngineConcurrency > 0 && s.NumRunningQueries < s.MaxEngineConcurrency
}

// ViewQueueEstimate is QueueEstimate of v's stats, reading the priority
// map through v.Priorities when the store sorted it (the same answer, no
// map iteration).
func ViewQueueEstimate(v *routing.ClusterView, p uint32) (ms uint64, ok bool) {
	if FreeSlot(&v.Stats) {
		return 0, true
	}
	if len(v.Priorities) == 0 || len(v.Priorities) != len(v.Stats.QueueTimeEstimateMsByPriority) {
		return QueueEstimate(&v.Stats, p)
	}
	// Greatest priority ≤ p, or 0 when every key is above p. The slice
	// holds the few priorities a pylon reports: a linear scan wins.
	ms = 0
	for _, e := range v.Priorities {
		if e.Priority > p {
			break
		}
		ms = e.Ms
	}
	return ms, true
}

// ViewQueueMs is QueueMs of v's stats through ViewQueueEstimate.
func ViewQueueMs(v *routing.ClusterView, p uint32) float64 {
	if ms, ok := ViewQueueEstimate(v, p); ok {
		return float64(ms)
	}
	return DelayMs(float64(v.Stats.QueuedInputSize), InputTPS(&v.Stats))
}

// QueueMs is qest(s, p) when defined, else DelayMs(queued_input_size, tps),
// which is +Inf whenever there is queued work.
func QueueMs(s *protocol.ModelStats, p uint32) float64 {
	if ms, ok := QueueEstimate(s, p); ok {
		return float64(ms)
	}
	return DelayMs(float64(s.QueuedInputSize), InputTPS(s))
}

// PrefillMs is DelayMs(tok, tps), not rounded.
func PrefillMs(s *protocol.ModelStats, tok uint64) float64 {
	return DelayMs(float64(tok), InputTPS(s))
}

// RTTMs is the cluster's representative RTT in milliseconds.
func RTTMs(v *routing.ClusterView) float64 { return v.RTT.Seconds() * 1000 }

// TTFTMs is rtt_ms + queue_ms + prefill_ms: the full time-to-first-token
// estimate that the ttft comparator always uses.
func TTFTMs(v *routing.ClusterView, tok uint64, p uint32) float64 {
	return RTTMs(v) + ViewQueueMs(v, p) + PrefillMs(&v.Stats, tok)
}

// InputWorkSeconds is Delay(queued_input_size + tok, tps).
func InputWorkSeconds(s *protocol.ModelStats, tok uint64) float64 {
	return Delay(float64(s.QueuedInputSize)+float64(tok), InputTPS(s))
}

// Utilization is num_running_queries / max(max_engine_concurrency, 1).
func Utilization(s *protocol.ModelStats) float64 {
	return float64(s.NumRunningQueries) / float64(max(s.MaxEngineConcurrency, 1))
}

// TotalCompare orders floats like Rust's f64::total_cmp, which upstream
// Stargate uses for every score, so that both order ties and infinities
// alike: -NaN < -Inf < … < -0 < +0 < … < +Inf < NaN. +Inf therefore sorts
// after every finite score.
func TotalCompare(a, b float64) int {
	return compareUint64(totalKey(a), totalKey(b))
}

// totalKey maps a float64 to a uint64 whose unsigned order is the IEEE 754
// totalOrder of the float.
func totalKey(f float64) uint64 {
	u := math.Float64bits(f)
	if u>>63 != 0 {
		return ^u
	}
	return u | 1<<63
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
