package overload

import (
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/loadgen"
)

func TestReportShowsEveryClassAndPeak(t *testing.T) {
	s := &loadgen.Stats{AchievedRate: 20, ThroughputRPS: 9.5}
	var recs []loadgen.Record
	add := func(n, turn int, outcome string, ttft float64, status int, msg string) {
		for range n {
			recs = append(recs, loadgen.Record{Turn: turn, Outcome: outcome, TTFTMs: ttft, Status: status, Error: msg})
		}
	}
	add(40, 1, loadgen.OutcomeOK, 900, 200, "")
	add(50, 1, loadgen.OutcomeError, 0, 503, "HTTP 503: no cluster can serve model m now (waiting_room_full)")
	add(10, 1, loadgen.OutcomeError, 0, 503, "HTTP 503: no cluster can serve model m now")
	add(190, 2, loadgen.OutcomeOK, 120, 200, "")
	add(10, 3, loadgen.OutcomeError, 0, 503, "HTTP 503: no cluster can serve model m now (shed_for_returning_session)")
	add(7, 2, loadgen.OutcomeSkipped, 0, 0, "an earlier turn of the session failed")
	recs = append(recs, loadgen.Record{Session: "s1", Turn: 1, Outcome: loadgen.OutcomeOK},
		loadgen.Record{Session: "s1", Turn: 2, Outcome: loadgen.OutcomeOK},
		loadgen.Record{Session: "s2", Turn: 1, Outcome: loadgen.OutcomeOK},
		loadgen.Record{Session: "s2", Turn: 2, Outcome: loadgen.OutcomeError, Status: 503},
		loadgen.Record{Session: "s3", Turn: 1, Outcome: loadgen.OutcomeError, Status: 503},
		loadgen.Record{Session: "s3", Turn: 2, Outcome: loadgen.OutcomeSkipped})
	r := FromRecords("policy", 20, s, recs)
	r.Refusals = map[string]float64{"waiting_room_full": 60, "shed_for_returning_session": 3, "unused": 0}
	r.Observe("hub", 80, 30<<20)
	r.Observe("hub", 120, 20<<20)
	if p := r.Peaks["hub"]; p.Goroutines != 120 || p.RSSBytes != 30<<20 {
		t.Fatalf("peak %+v, want the highest of each", p)
	}
	if r.Sessions != 3 || r.Whole != 1 {
		t.Fatalf("sessions %d whole %d, want 3 and 1", r.Sessions, r.Whole)
	}
	var b strings.Builder
	WriteReport(&b, "overload", 10, []Run{r})
	out := b.String()
	for _, want := range []string{"| policy | 20.0 | 9.5 | 42 / 103 (40.8 %) | 900 / 900 | 191 / 202 (94.6 %) | 120 / 120 | 1 / 3 |",
		"Hub refusals by reason: waiting_room_full 60, shed_for_returning_session 3.",
		"Failed new requests by reason: waiting_room_full 50, overloaded_error 10, HTTP 503 1; 0 later turns",
		"Failed returning requests by reason: shed_for_returning_session 10, HTTP 503 1; 8 later turns not sent",
		"| hub | 120 | 30.0 |", "Measured capacity: 10.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "unused") {
		t.Errorf("a zero count is listed:\n%s", out)
	}
}
