package sim

import "time"

// minInputSamples and sampleFloor are the live pylon's constants for its
// input rate (docs/design/statistics.md#aggregation): the published mean
// moves only once the distribution holds five samples, and no sample
// spans less than 10 ms.
const (
	minInputSamples = 5
	sampleFloor     = 10 * time.Millisecond
)

// pylonTPS is the input rate a pylon learns and publishes as
// last_mean_input_tps (docs/design/statistics.md#aggregation): the mean
// of every input-TPS sample since the pylon started, never decaying, with
// --initial-input-tps counting as five samples of its value. max is the
// highest mean published (max_input_tps, pulsar's default weight; the
// seed counts).
//
// It lives for the pylon process, not for one workload: the live
// campaign runs an arm's workloads one after another on one stack, so a
// later run starts with the rate the earlier ones taught the pylon
// (Options.Warmup).
type pylonTPS struct {
	n         int
	mean, max float64
}

// seededTPS is the distribution --initial-input-tps x starts; with x = 0
// (no seed) the pylon publishes 0 until five samples.
func seededTPS(x float64) pylonTPS {
	if x <= 0 {
		return pylonTPS{}
	}
	return pylonTPS{n: minInputSamples, mean: x, max: x}
}

// add folds one sample in.
func (t *pylonTPS) add(v float64) {
	if !(v > 0) {
		return
	}
	t.n++
	t.mean += (v - t.mean) / float64(t.n)
	if t.n >= minInputSamples {
		t.max = max(t.max, t.mean)
	}
}

// published is last_mean_input_tps: the mean once there are enough
// samples, else 0 (unknown).
func (t *pylonTPS) published() float64 {
	if t.n < minInputSamples {
		return 0
	}
	return t.mean
}

// inputSample is the input rate one request teaches its pylon, as the
// live pylon measures it from the mock engine's stats stream: the engine
// reports 0 tokens processed when the request takes a slot and all its
// prompt tokens with its first output, so the sample is the prompt's
// tokens over that span (prefill, shared with the engine's other
// prefills, plus the TTFT base), at least 10 ms. Cached tokens prefill
// faster, so cache hits raise it; a crowded engine lowers it.
func inputSample(tokens int, span time.Duration) float64 {
	return float64(tokens) / max(span, sampleFloor).Seconds()
}
