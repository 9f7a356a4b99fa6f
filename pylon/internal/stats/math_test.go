package stats

import (
	"math"
	"testing"
	"time"
)

func u(v uint64) *uint64 { return &v }

func TestCounterStateRules(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms    int
		next  *uint64
		units uint64
		d     time.Duration
		ok    bool
	}
	tests := []struct {
		name     string
		baseline uint64
		steps    []step
	}{
		{"engine baseline 0: first event measured over the 10 ms floor", 0, []step{
			{0, u(4), 4, DurationFloor, true},
		}},
		{"engine (0,0) then (in,0): the prior 0 also raises to the floor", 0, []step{
			{0, u(0), 0, 0, false},
			{3, u(1000), 1000, DurationFloor, true},
		}},
		{"engine (0,0) then a later value: measured from the first event", 0, []step{
			{0, u(0), 0, 0, false},
			{500, u(1000), 1000, 500 * time.Millisecond, true},
		}},
		{"fallback baseline is the first value and yields no sample", 7, []step{
			{0, u(7), 0, 0, false},
			{5, u(9), 0, 0, false}, // under the floor: accumulates
			{20, u(12), 5, 20 * time.Millisecond, true},
		}},
		{"units accumulate below 10 ms, then sample the total", 0, []step{
			{0, u(10), 10, DurationFloor, true},
			{3, u(11), 0, 0, false},
			{6, u(13), 0, 0, false},
			{10, u(14), 4, 10 * time.Millisecond, true},
		}},
		{"no units only moves observed", 0, []step{
			{0, u(5), 5, DurationFloor, true},
			{100, u(5), 0, 0, false},
			{200, u(6), 1, 200 * time.Millisecond, true},
		}},
		{"missing counter is ignored", 0, []step{
			{0, nil, 0, 0, false},
			{100, u(3), 3, 100 * time.Millisecond, true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newCounter(tc.baseline, at(0))
			for i, st := range tc.steps {
				units, d, ok := s.observe(st.next, at(st.ms))
				if units != st.units || d != st.d || ok != st.ok {
					t.Fatalf("step %d: got (%d, %v, %v), want (%d, %v, %v)", i, units, d, ok, st.units, st.d, st.ok)
				}
			}
		})
	}
}

func TestWelfordNeedsValidSamples(t *testing.T) {
	t.Parallel()
	var w welford
	for _, v := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if w.add(v) {
			t.Fatalf("add(%v) accepted", v)
		}
	}
	for _, v := range []float64{10, 20, 30, 40, 50} {
		w.add(v)
	}
	if w.count != 5 || w.mean != 30 || w.min != 10 || w.max != 50 || w.variance() != 250 {
		t.Fatalf("got count %d mean %v min %v max %v var %v", w.count, w.mean, w.min, w.max, w.variance())
	}
	s := seeded(1000)
	s.add(2000)
	if s.count != 6 || math.Abs(s.mean-(5*1000+2000)/6.0) > 1e-9 {
		t.Fatalf("seeded mean moved to %v (count %d), want %v", s.mean, s.count, (5*1000+2000)/6.0)
	}
}

func TestWindowKeepsLastEight(t *testing.T) {
	t.Parallel()
	var w window
	if w.mean() != 0 {
		t.Fatal("empty window mean not 0")
	}
	for i := 1; i <= 10; i++ {
		w.push(float64(i))
	}
	if got := w.mean(); got != (3+4+5+6+7+8+9+10)/8.0 {
		t.Fatalf("mean %v", got)
	}
}

func TestQueueMs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tokens uint64
		tps    float64
		want   uint64
	}{
		{0, 1000, 0},
		{250, 1000, 250},
		{1, 3, 334},
		{3000, 2000, 1500},
		{math.MaxUint64, 1e-300, math.MaxUint64},
	}
	for _, tc := range tests {
		if got := queueMs(tc.tokens, tc.tps); got != tc.want {
			t.Errorf("queueMs(%d, %v) = %d, want %d", tc.tokens, tc.tps, got, tc.want)
		}
	}
	if addSat(math.MaxUint64, 1) != math.MaxUint64 || addSat(2, 3) != 5 {
		t.Fatal("addSat")
	}
}
