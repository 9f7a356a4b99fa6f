package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose: summarize sorts
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := summarize(ds)
	if s.N != 100 || s.P50 != 50 || s.P90 != 90 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Errorf("summary of 1..100 ms = %+v", s)
	}
	// Ten values: p99 is the largest (rank ceil(9.9) = 10), p50 the fifth.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(ten, 99); p != 10 {
		t.Errorf("p99 of ten = %v, want 10", p)
	}
	if p := percentile(ten, 50); p != 5 {
		t.Errorf("p50 of ten = %v, want 5", p)
	}
	if p := percentile([]time.Duration{7}, 1); p != 7 {
		t.Errorf("p1 of one = %v", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("p50 of none = %v", p)
	}
	if s := summarize(nil); s != (summary{}) {
		t.Errorf("summary of none = %+v", s)
	}
}

func TestMedian(t *testing.T) {
	in := []float64{5, 1, 3}
	if m := median(in); m != 3 {
		t.Errorf("median(5,1,3) = %v", m)
	}
	if in[0] != 5 {
		t.Error("median sorted its argument")
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median(4,1,3,2) = %v", m)
	}
	if m := median(nil); !math.IsNaN(m) {
		t.Errorf("median() = %v, want NaN", m)
	}
}
