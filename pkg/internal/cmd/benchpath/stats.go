package main

import (
	"math"
	"slices"
	"time"
)

// summary is a distribution of durations in milliseconds.
type summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// summarize sorts ds in place and summarises it; an empty ds gives a
// zero summary.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return summary{N: len(ds), Mean: ms(sum) / float64(len(ds)), P50: ms(percentile(ds, 50)), P90: ms(percentile(ds, 90)),
		P99: ms(percentile(ds, 99)), Max: ms(ds[len(ds)-1])}
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// value with at least p % of the values at or below it. It never
// interpolates, so a p99 is a latency some request really had.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// median is the median of xs (the mean of the middle two for an even
// count), NaN for none. Values are medians over rounds, so one round
// disturbed by another user of the machine moves it little.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
