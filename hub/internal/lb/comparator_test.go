package lb

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

func TestParseComparator(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Comparator
	}{
		{"ttft", ComparatorTTFT},
		{"queue-time", ComparatorQueueTime},
		{"input-work-seconds", ComparatorInputWorkSeconds},
		{"utilization", ComparatorUtilization},
		{"num-requests-queued", ComparatorNumRequestsQueued},
	} {
		got, err := ParseComparator(tc.name)
		if err != nil || got != tc.want {
			t.Errorf("ParseComparator(%q) = %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if got.String() != tc.name {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	for _, bad := range []string{"", "TTFT", "Ttft", "queue_time", "queue-time ", "ttft_ms", "least-queue"} {
		if _, err := ParseComparator(bad); !errors.Is(err, ErrUnknownComparator) {
			t.Errorf("ParseComparator(%q) err = %v, want ErrUnknownComparator", bad, err)
		}
	}
	var zero Comparator
	if zero != ComparatorTTFT {
		t.Error("the zero Comparator must be the default, ttft")
	}
	if Comparator(200).Valid() || Comparator(200).String() != "Comparator(200)" {
		t.Error("an out-of-range comparator must be invalid")
	}
}

func TestComparatorJSON(t *testing.T) {
	var cfg struct {
		C Comparator `json:"comparator"`
	}
	if err := json.Unmarshal([]byte(`{"comparator":"utilization"}`), &cfg); err != nil || cfg.C != ComparatorUtilization {
		t.Fatalf("decode = %v, %v", cfg.C, err)
	}
	if err := json.Unmarshal([]byte(`{"comparator":"Utilization"}`), &cfg); !errors.Is(err, ErrUnknownComparator) {
		t.Fatalf("decode of a wrong-case name: err = %v", err)
	}
	b, err := json.Marshal(struct {
		C Comparator `json:"comparator"`
	}{ComparatorNumRequestsQueued})
	if err != nil || string(b) != `{"comparator":"num-requests-queued"}` {
		t.Fatalf("encode = %s, %v", b, err)
	}
}

// Two clusters on which every comparator gives a hand-computed answer.
//
//	a: rtt 1 ms, tps 1000, queued 2000 (qest 2000 ms), queue_size 1, running 16 of 16 (no free slot)
//	b: rtt 1 ms, tps 4000, queued 4000 (qest 1000 ms), queue_size 5, running 2 of 1
//
// request: 1000 tokens, priority 0.
//
//	ttft:   a = 1 + 2000 + 1000 = 3001,  b = 1 + 1000 + 250 = 1251 → b
//	queue:  a = 2000, b = 1000 → b
//	work:   a = 3000/1000 = 3 s, b = 5000/4000 = 1.25 s → b
//	util:   a = 1, b = 2 → a
//	queued: a = 1, b = 5 → a
func TestComparators(t *testing.T) {
	a := routing.ClusterView{ClusterID: "a", RTT: time.Millisecond, Stats: protocol.ModelStats{
		LastMeanInputTPS: 1000, QueuedInputSize: 2000, QueueSize: 1, NumRunningQueries: 16, MaxEngineConcurrency: 16}}
	b := routing.ClusterView{ClusterID: "b", RTT: time.Millisecond, Stats: protocol.ModelStats{
		LastMeanInputTPS: 4000, QueuedInputSize: 4000, QueueSize: 5, NumRunningQueries: 2, MaxEngineConcurrency: 1}}
	req := &routing.Request{InputTokens: 1000}
	for _, tc := range []struct {
		c          Comparator
		scoreA     float64
		scoreB     float64
		wantAvsB   int
		comparator string
	}{
		{ComparatorTTFT, 3001, 1251, 1, "ttft"},
		{ComparatorQueueTime, 2000, 1000, 1, "queue-time"},
		{ComparatorInputWorkSeconds, 3, 1.25, 1, "input-work-seconds"},
		{ComparatorUtilization, 1, 2, -1, "utilization"},
		{ComparatorNumRequestsQueued, 1, 5, -1, "num-requests-queued"},
	} {
		t.Run(tc.comparator, func(t *testing.T) {
			if got := tc.c.Score(req, &a).Float(); got != tc.scoreA {
				t.Errorf("score(a) = %v, want %v", got, tc.scoreA)
			}
			if got := tc.c.Score(req, &b).Float(); got != tc.scoreB {
				t.Errorf("score(b) = %v, want %v", got, tc.scoreB)
			}
			if got := tc.c.Compare(req, &a, &b); got != tc.wantAvsB {
				t.Errorf("Compare(a, b) = %d, want %d", got, tc.wantAvsB)
			}
			if got := tc.c.Compare(req, &b, &a); got != -tc.wantAvsB {
				t.Errorf("Compare(b, a) = %d, want %d", got, -tc.wantAvsB)
			}
			if got := tc.c.Compare(req, &a, &a); got != 0 {
				t.Errorf("Compare(a, a) = %d, want 0", got)
			}
		})
	}
}

// A cluster with queued work and no valid TPS scores +Inf on the time-based
// comparators and sorts after any finite score; two of them tie.
func TestComparatorInfinityLast(t *testing.T) {
	stuck := routing.ClusterView{ClusterID: "stuck", Stats: protocol.ModelStats{QueuedInputSize: 1}}
	slow := routing.ClusterView{ClusterID: "slow", RTT: time.Hour, Stats: protocol.ModelStats{
		LastMeanInputTPS: 1e-9, QueuedInputSize: 1e12}}
	req := &routing.Request{InputTokens: 1}
	for _, c := range []Comparator{ComparatorTTFT, ComparatorQueueTime, ComparatorInputWorkSeconds} {
		if got := c.Score(req, &stuck).Float(); got != inf {
			t.Errorf("%v: score = %v, want +Inf", c, got)
		}
		if c.Compare(req, &stuck, &slow) != 1 || c.Compare(req, &slow, &stuck) != -1 {
			t.Errorf("%v: +Inf must sort after a finite score", c)
		}
		if c.Compare(req, &stuck, &stuck) != 0 {
			t.Errorf("%v: two +Inf scores must tie", c)
		}
	}
}

// num-requests-queued compares integers exactly, even where float64 cannot.
func TestNumRequestsQueuedIsExact(t *testing.T) {
	a := routing.ClusterView{Stats: protocol.ModelStats{QueueSize: 1 << 60}}
	b := routing.ClusterView{Stats: protocol.ModelStats{QueueSize: 1<<60 + 1}}
	if got := ComparatorNumRequestsQueued.Compare(&routing.Request{}, &a, &b); got != -1 {
		t.Fatalf("Compare = %d, want -1", got)
	}
}

func TestNewDecision(t *testing.T) {
	snap := &routing.Snapshot{Clusters: []routing.ClusterView{
		{ClusterID: "a", Stats: protocol.ModelStats{QueuedInputSize: 1}},                                           // qest undefined
		{ClusterID: "b", Stats: protocol.ModelStats{QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 7, 3: 9}}}, // qest from map
	}}
	d := NewDecision(snap, 0, 1, &routing.Request{Priority: 4})
	if d.ClusterID != "a" || d.Cluster != 0 || d.RankDepth != 1 || d.QueueEstimateKnown {
		t.Errorf("decision a = %+v", d)
	}
	d = NewDecision(snap, 1, 3, &routing.Request{Priority: 4})
	if d.ClusterID != "b" || d.Cluster != 1 || d.RankDepth != 3 || !d.QueueEstimateKnown || d.QueueEstimateMs != 9 {
		t.Errorf("decision b = %+v", d)
	}
}

func TestFieldError(t *testing.T) {
	err := error(&FieldError{Algorithm: "power-of-n", Field: "sample_count", Problem: "must be between 1 and 64, got 0"})
	if err.Error() != "power-of-n sample_count must be between 1 and 64, got 0" {
		t.Fatal(err)
	}
}
