package lb

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var inf = math.Inf(1)

func TestValidTPS(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want bool
	}{
		{1, true}, {1e-300, true}, {2200.5, true},
		{0, false}, {-1, false}, {inf, false}, {math.Inf(-1), false}, {math.NaN(), false},
	} {
		if got := ValidTPS(tc.x); got != tc.want {
			t.Errorf("ValidTPS(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		work, rate, want float64
	}{
		{0, 0, 0},    // no work is free even without a rate
		{0, -1, 0},   //
		{5, 0, inf},  // work with no rate never finishes
		{5, -2, inf}, //
		{500, 1000, 0.5},
		{1, 3, 1.0 / 3},
	} {
		if got := Delay(tc.work, tc.rate); got != tc.want {
			t.Errorf("Delay(%v, %v) = %v, want %v", tc.work, tc.rate, got, tc.want)
		}
		if got, want := DelayMs(tc.work, tc.rate), tc.want*1000; got != want {
			t.Errorf("DelayMs(%v, %v) = %v, want %v", tc.work, tc.rate, got, want)
		}
	}
}

func TestQueueTimeDeltaMs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tok    uint64
		tps    float64
		want   uint64
		wantOK bool
	}{
		{"no tokens, invalid tps", 0, math.NaN(), 0, true},
		{"exact", 1000, 1000, 1000, true},
		{"ceil", 1, 3, 334, true}, // 333.33… rounds up
		{"ceil just above", 1001, 1000, 1001, true},
		{"zero tps", 1, 0, 0, false},
		{"inf tps", 1, inf, 0, false},
		{"does not fit", math.MaxUint64, 1e-3, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := QueueTimeDeltaMs(tc.tok, tc.tps)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("QueueTimeDeltaMs(%d, %v) = %d, %v; want %d, %v", tc.tok, tc.tps, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestQueueEstimate(t *testing.T) {
	pm := map[uint32]uint64{0: 5, 2: 20, 4: 40}
	for _, tc := range []struct {
		name   string
		s      protocol.ModelStats
		p      uint32
		want   uint64
		wantOK bool
	}{
		{"map exact key", protocol.ModelStats{QueueTimeEstimateMsByPriority: pm}, 2, 20, true},
		{"map greatest key below", protocol.ModelStats{QueueTimeEstimateMsByPriority: pm}, 3, 20, true},
		{"map lowest key", protocol.ModelStats{QueueTimeEstimateMsByPriority: pm}, 0, 5, true},
		{"map above every key", protocol.ModelStats{QueueTimeEstimateMsByPriority: pm}, 100, 40, true},
		{"map with no key at or below p gives 0, not the lowest key",
			protocol.ModelStats{QueueTimeEstimateMsByPriority: map[uint32]uint64{2: 20, 4: 40}}, 1, 0, true},
		{"map wins over queued input and invalid tps",
			protocol.ModelStats{QueueTimeEstimateMsByPriority: pm, QueuedInputSize: 1e6}, 1, 5, true},
		{"no queued input", protocol.ModelStats{}, 0, 0, true},
		{"no queued input, invalid tps", protocol.ModelStats{LastMeanInputTPS: math.NaN()}, 0, 0, true},
		{"tps based, ceil", protocol.ModelStats{QueuedInputSize: 1000, LastMeanInputTPS: 300}, 0, 3334, true},
		{"tps based, exact", protocol.ModelStats{QueuedInputSize: 1000, LastMeanInputTPS: 4000}, 9, 250, true},
		{"queued with zero tps is undefined", protocol.ModelStats{QueuedInputSize: 1000}, 0, 0, false},
		{"queued with inf tps is undefined", protocol.ModelStats{QueuedInputSize: 1000, LastMeanInputTPS: inf}, 0, 0, false},
		{"empty map falls through", protocol.ModelStats{QueueTimeEstimateMsByPriority: map[uint32]uint64{}, QueuedInputSize: 10, LastMeanInputTPS: 10}, 0, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := QueueEstimate(&tc.s, tc.p)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("QueueEstimate = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
			// The decision's estimate (what the proxy forwards) comes from
			// the view, through the published priority slice.
			v := routing.ClusterView{Stats: tc.s, Priorities: routing.SortPriorities(tc.s.QueueTimeEstimateMsByPriority)}
			if g2, ok2 := ViewQueueEstimate(&v, tc.p); g2 != got || ok2 != ok {
				t.Errorf("ViewQueueEstimate disagrees with QueueEstimate")
			}
			wantMs := float64(tc.want)
			if !tc.wantOK {
				wantMs = inf
			}
			if got := QueueMs(&tc.s, tc.p); got != wantMs {
				t.Errorf("QueueMs = %v, want %v", got, wantMs)
			}
		})
	}
}

func TestPrefillTTFTWorkUtilization(t *testing.T) {
	v := routing.ClusterView{
		ClusterID: "c",
		RTT:       1500 * time.Microsecond,
		Stats: protocol.ModelStats{
			LastMeanInputTPS: 4000, QueuedInputSize: 1000,
			NumRunningQueries: 6, MaxEngineConcurrency: 4, // no free slot: the queue counts

		},
	}
	if got := PrefillMs(&v.Stats, 500); got != 125 {
		t.Errorf("PrefillMs = %v, want 125", got)
	}
	if got := PrefillMs(&protocol.ModelStats{LastMeanInputTPS: 3}, 1); got != 1000.0/3 {
		t.Errorf("PrefillMs is rounded: %v", got)
	}
	if got := RTTMs(&v); got != 1.5 {
		t.Errorf("RTTMs = %v, want 1.5", got)
	}
	// 1.5 (rtt) + 250 (ceil(1000·1000/4000)) + 125 (500/4000 s)
	if got := TTFTMs(&v, 500, 0); got != 376.5 {
		t.Errorf("TTFTMs = %v, want 376.5", got)
	}
	if got := InputWorkSeconds(&v.Stats, 1000); got != 0.5 {
		t.Errorf("InputWorkSeconds = %v, want 0.5", got)
	}
	if got := Utilization(&v.Stats); got != 1.5 {
		t.Errorf("Utilization = %v, want 1.5", got)
	}
	if got := Utilization(&protocol.ModelStats{NumRunningQueries: 3}); got != 3 {
		t.Errorf("Utilization with unknown concurrency = %v, want 3 (divided by 1)", got)
	}

	noRate := routing.ClusterView{RTT: time.Millisecond, Stats: protocol.ModelStats{QueuedInputSize: 1}}
	for name, got := range map[string]float64{
		"prefill":    PrefillMs(&noRate.Stats, 1),
		"ttft":       TTFTMs(&noRate, 0, 0),
		"input work": InputWorkSeconds(&noRate.Stats, 0),
	} {
		if got != inf {
			t.Errorf("%s with invalid tps = %v, want +Inf", name, got)
		}
	}
	idle := routing.ClusterView{RTT: 2 * time.Millisecond}
	if got := TTFTMs(&idle, 0, 0); got != 2 {
		t.Errorf("TTFTMs of an idle cluster with no rate and no tokens = %v, want the RTT 2", got)
	}
}

func TestTotalCompare(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		a, b float64
		want int
	}{
		{1, 1, 0}, {1, 2, -1}, {2, 1, 1},
		{inf, 1e308, 1}, {inf, inf, 0}, {math.Inf(-1), -1, -1},
		{math.Copysign(0, -1), 0, -1},
		{nan, inf, 1}, {-nan, math.Inf(-1), -1},
	} {
		if got := TotalCompare(tc.a, tc.b); got != tc.want {
			t.Errorf("TotalCompare(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestPriorityMapEstimate(t *testing.T) {
	m := map[uint32]uint64{1: 10, 5: 50}
	for _, tc := range []struct {
		p      uint32
		want   uint64
		wantOK bool
	}{{0, 0, false}, {1, 10, true}, {4, 10, true}, {5, 50, true}, {math.MaxUint32, 50, true}} {
		got, ok := PriorityMapEstimate(m, tc.p)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("PriorityMapEstimate(p=%d) = %d, %v; want %d, %v", tc.p, got, ok, tc.want, tc.wantOK)
		}
	}
}

// ViewQueueEstimate through the sorted slice answers exactly what
// QueueEstimate answers from the map, for every priority.
func TestViewQueueEstimateMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		m := map[uint32]uint64{}
		for range r.IntN(6) {
			m[uint32(r.IntN(10))] = uint64(r.IntN(1000))
		}
		v := routing.ClusterView{Stats: protocol.ModelStats{QueueTimeEstimateMsByPriority: m, QueuedInputSize: uint64(r.IntN(3)), LastMeanInputTPS: float64(r.IntN(2)) * 100}}
		v.Priorities = routing.SortPriorities(m)
		for p := range uint32(12) {
			wms, wok := QueueEstimate(&v.Stats, p)
			gms, gok := ViewQueueEstimate(&v, p)
			if wms != gms || wok != gok {
				t.Fatalf("map %v p %d: view (%d,%v), map (%d,%v)", m, p, gms, gok, wms, wok)
			}
			if ViewQueueMs(&v, p) != QueueMs(&v.Stats, p) && !(math.IsInf(QueueMs(&v.Stats, p), 1)) {
				t.Fatalf("ViewQueueMs differs for %v p %d", m, p)
			}
		}
	}
}

// The free-slot rule: with a known engine concurrency and fewer running
// requests, the queue delay is 0 whatever the queue fields say; a full or
// unknown limit keeps the estimate.
func TestFreeSlot(t *testing.T) {
	m := map[uint32]uint64{0: 700}
	for _, tc := range []struct {
		name          string
		running, mec  uint64
		wantMs        uint64
		wantFreeSlots bool
	}{
		{"free slot", 3, 4, 0, true},
		{"full", 4, 4, 700, false},
		{"unknown limit", 0, 0, 700, false},
	} {
		s := protocol.ModelStats{LastMeanInputTPS: 1000, QueuedInputSize: 5000, NumRunningQueries: tc.running,
			MaxEngineConcurrency: tc.mec, QueueTimeEstimateMsByPriority: m}
		v := routing.ClusterView{Stats: s, Priorities: routing.SortPriorities(m)}
		if FreeSlot(&s) != tc.wantFreeSlots {
			t.Errorf("%s: FreeSlot = %v", tc.name, !tc.wantFreeSlots)
		}
		if ms, ok := QueueEstimate(&s, 0); !ok || ms != tc.wantMs {
			t.Errorf("%s: QueueEstimate = %d, %v; want %d", tc.name, ms, ok, tc.wantMs)
		}
		if ms, ok := ViewQueueEstimate(&v, 0); !ok || ms != tc.wantMs {
			t.Errorf("%s: ViewQueueEstimate = %d, %v; want %d", tc.name, ms, ok, tc.wantMs)
		}
		if got := ViewQueueMs(&v, 0); got != float64(tc.wantMs) {
			t.Errorf("%s: ViewQueueMs = %v", tc.name, got)
		}
	}
}
