package stats

import (
	"math"
	"time"
)

// counterState samples one cumulative per-request counter
// (docs/design/statistics.md#aggregation):
// observed is the latest value, sampled the value at the last emitted sample
// and sampledAt when it was taken.
type counterState struct {
	observed  uint64
	sampled   uint64
	sampledAt time.Time
}

// newCounter starts a counter at baseline. An engine-stream counter starts
// at 0 (its first event is measured against 0); a fallback counter starts at
// its own first value, which therefore yields no sample.
func newCounter(baseline uint64, at time.Time) counterState {
	return counterState{observed: baseline, sampled: baseline, sampledAt: at}
}

// observe applies next (nil: the counter was not in the update) and returns
// the units and duration of a sample when one is due. Units below 1 only
// move observed; an interval shorter than DurationFloor keeps accumulating,
// except that a counter which has sampled nothing and was 0 is measured over
// at least the floor. So a request that yields a single event (a canary,
// or a non-streamed call) reads as units / 10 ms: a 4-token canary counts
// as 400 tokens/s, which is why benchmarks run without canaries.
func (s *counterState) observe(next *uint64, at time.Time) (units uint64, d time.Duration, ok bool) {
	if next == nil {
		return 0, 0, false
	}
	priorObserved := s.observed
	s.observed = *next
	if *next <= s.sampled {
		return 0, 0, false
	}
	units = *next - s.sampled
	d = max(at.Sub(s.sampledAt), 0)
	if s.sampled == 0 && priorObserved == 0 {
		d = max(d, DurationFloor)
	}
	if d < DurationFloor {
		return 0, 0, false
	}
	s.sampled, s.sampledAt = *next, at
	return units, d, true
}

// rate is units per second over d, or false when there are no units or d is
// under the floor.
func rate(units uint64, d time.Duration) (float64, bool) {
	if units == 0 || d < DurationFloor {
		return 0, false
	}
	return float64(units) / d.Seconds(), true
}

// welford is a running distribution of input-TPS samples: mean, min, max and
// variance over every sample, with no decay.
type welford struct {
	count    uint64
	mean     float64
	m2       float64
	min, max float64
}

// seeded returns the distribution --initial-input-tps X starts from: mean X
// with the weight of MinInputSamples samples.
func seeded(x float64) welford {
	return welford{count: MinInputSamples, mean: x, min: x, max: x}
}

// add folds in v; values that are not validTPS (non-positive, non-finite,
// above MaxTPS) are ignored.
func (w *welford) add(v float64) bool {
	if !validTPS(v) {
		return false
	}
	if w.count == 0 || v < w.min {
		w.min = v
	}
	if w.count == 0 || v > w.max {
		w.max = v
	}
	w.count++
	delta := v - w.mean
	w.mean += delta / float64(w.count)
	w.m2 += delta * (v - w.mean)
	return true
}

// variance is the sample variance, 0 below two samples.
func (w *welford) variance() float64 {
	if w.count < 2 {
		return 0
	}
	return w.m2 / float64(w.count-1)
}

// window holds the last WindowSize output-TPS samples.
type window struct {
	samples [WindowSize]float64
	n, next int
}

func (w *window) push(v float64) {
	w.samples[w.next] = v
	w.next = (w.next + 1) % WindowSize
	w.n = min(w.n+1, WindowSize)
}

func (w *window) mean() float64 {
	if w.n == 0 {
		return 0
	}
	var sum float64
	for i := range w.n {
		sum += w.samples[i]
	}
	return sum / float64(w.n)
}

func (w *window) clear() { *w = window{} }

// validTPS reports whether a throughput can divide work and is one an
// engine can have: > 0 and at most MaxTPS (so finite; NaN fails both
// comparisons).
func validTPS(v float64) bool { return v > 0 && v <= MaxTPS }

// boundTPS is v when validTPS, else 0 (no throughput known): the last guard
// before a throughput is published.
func boundTPS(v float64) float64 {
	if validTPS(v) {
		return v
	}
	return 0
}

// queueMs is ceil(tokens / tps × 1000), saturating at MaxUint64 (the same
// operation order as the hub, so both ends round alike). tps must be valid.
func queueMs(tokens uint64, tps float64) uint64 {
	if tokens == 0 {
		return 0
	}
	ms := math.Ceil(float64(tokens) / tps * 1000)
	if !(ms < math.MaxUint64) { // also catches NaN
		return math.MaxUint64
	}
	return uint64(ms)
}

// addSat adds without wrapping.
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
