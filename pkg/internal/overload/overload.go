package overload

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/stargate-router/stargate/pkg/loadgen"
)

// Class is one session class's outcome in a run.
type Class struct {
	// Requests were sent; OK of them succeeded. Skipped are later turns
	// the load generator did not send because an earlier turn of their
	// session failed.
	Requests, OK, Skipped int
	// Failures counts the failed requests by reason (Reason).
	Failures map[string]int
	// TTFTp50Ms and TTFTp99Ms are over the successful requests.
	TTFTp50Ms, TTFTp99Ms float64
}

// SuccessPct is the share of the class's sent requests that succeeded.
func (c Class) SuccessPct() float64 {
	if c.Requests == 0 {
		return 0
	}
	return 100 * float64(c.OK) / float64(c.Requests)
}

// Reason names a failed request's cause from the load generator's error
// text: the hub's shedding codes, its overload answer, or the text's
// start.
func Reason(status int, msg string) string {
	for _, code := range []string{"waiting_room_full", "shed_for_returning_session", "input_work_limit_exceeded",
		"model_temporarily_unavailable", "deadline_exceeded"} {
		if strings.Contains(msg, code) {
			return code
		}
	}
	if strings.Contains(msg, "no cluster can serve model") {
		return "overloaded_error"
	}
	if status != 0 {
		return fmt.Sprintf("HTTP %d", status)
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return msg
}

// Peak is one process's highest goroutine count and resident memory seen
// during a run.
type Peak struct {
	Goroutines float64
	RSSBytes   float64
}

// Run is one arm's run.
type Run struct {
	Arm string
	// RateRPS is the offered open-loop rate; AchievedRPS what was sent;
	// GoodputRPS the successful requests per second.
	RateRPS, AchievedRPS, GoodputRPS float64
	New, Returning                   Class
	// Sessions counts the multi-turn sessions the run started; Whole
	// those whose every turn succeeded.
	Sessions, Whole int
	// Refusals counts the hub's refusals by reason
	// (stargate_admission_rejections_total).
	Refusals map[string]float64
	Peaks    map[string]Peak
}

// FromRecords fills a run's outcome from the load generator's statistics
// and its per-request records: New are turn 1 and anonymous requests,
// Returning later turns (sent only when every earlier turn of the session
// succeeded, so the hub sees them with their last cluster).
func FromRecords(arm string, rate float64, s *loadgen.Stats, recs []loadgen.Record) Run {
	r := Run{Arm: arm, RateRPS: rate, AchievedRPS: s.AchievedRate, GoodputRPS: s.ThroughputRPS}
	var ttft [2][]float64
	whole := map[string]bool{}
	for i := range recs {
		rec := &recs[i]
		if rec.Session != "" {
			ok, seen := whole[rec.Session]
			whole[rec.Session] = (ok || !seen) && rec.Outcome == loadgen.OutcomeOK
		}
		c, k := &r.New, 0
		if rec.Turn > 1 {
			c, k = &r.Returning, 1
		}
		switch rec.Outcome {
		case loadgen.OutcomeOK:
			c.Requests++
			c.OK++
			ttft[k] = append(ttft[k], rec.TTFTMs)
		case loadgen.OutcomeError:
			c.Requests++
			if c.Failures == nil {
				c.Failures = map[string]int{}
			}
			c.Failures[Reason(rec.Status, rec.Error)]++
		case loadgen.OutcomeSkipped:
			c.Skipped++
		}
	}
	r.Sessions = len(whole)
	for _, ok := range whole {
		if ok {
			r.Whole++
		}
	}
	for k, c := range []*Class{&r.New, &r.Returning} {
		d := loadgen.NewDist(ttft[k])
		c.TTFTp50Ms, c.TTFTp99Ms = d.P50, d.P99
	}
	return r
}

// Observe raises process's peaks to a sample's values.
func (r *Run) Observe(process string, goroutines, rss float64) {
	if r.Peaks == nil {
		r.Peaks = map[string]Peak{}
	}
	p := r.Peaks[process]
	p.Goroutines = max(p.Goroutines, goroutines)
	p.RSSBytes = max(p.RSSBytes, rss)
	r.Peaks[process] = p
}

// WriteReport writes the runs as markdown: the classes side by side, the
// refusals and failures, the peaks. capacity is the measured capacity the
// rate is a multiple of.
func WriteReport(w io.Writer, title string, capacity float64, runs []Run) {
	fmt.Fprintf(w, "# %s\n\nMeasured capacity: %.1f successful req/s.\n\n", title, capacity)
	fmt.Fprintln(w, "| arm | offered req/s | goodput req/s | new: ok / sent | new TTFT p50 / p99 ms | returning: ok / sent | returning TTFT p50 / p99 ms | sessions served whole |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %d / %d (%.1f %%) | %.0f / %.0f | %d / %d (%.1f %%) | %.0f / %.0f | %d / %d |\n",
			r.Arm, r.AchievedRPS, r.GoodputRPS, r.New.OK, r.New.Requests, r.New.SuccessPct(), r.New.TTFTp50Ms, r.New.TTFTp99Ms,
			r.Returning.OK, r.Returning.Requests, r.Returning.SuccessPct(), r.Returning.TTFTp50Ms, r.Returning.TTFTp99Ms,
			r.Whole, r.Sessions)
	}
	for _, r := range runs {
		fmt.Fprintf(w, "\n## %s\n\n", r.Arm)
		fmt.Fprintf(w, "Hub refusals by reason: %s.\n\n", counts(r.Refusals))
		for _, c := range []struct {
			name string
			c    *Class
		}{{"new", &r.New}, {"returning", &r.Returning}} {
			fails := map[string]float64{}
			for k, v := range c.c.Failures {
				fails[k] = float64(v)
			}
			fmt.Fprintf(w, "Failed %s requests by reason: %s; %d later turns not sent after an earlier turn failed.\n\n",
				c.name, counts(fails), c.c.Skipped)
		}
		fmt.Fprintln(w, "| process | peak goroutines | peak RSS MiB |")
		fmt.Fprintln(w, "| --- | --- | --- |")
		for _, name := range slices.Sorted(maps.Keys(r.Peaks)) {
			p := r.Peaks[name]
			fmt.Fprintf(w, "| %s | %.0f | %.1f |\n", name, p.Goroutines, p.RSSBytes/(1<<20))
		}
	}
}

// counts lists m's entries, largest first, or "none".
func counts(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range m {
		if v > 0 {
			all = append(all, kv{k, v})
		}
	}
	if len(all) == 0 {
		return "none"
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.v, a.v), strings.Compare(a.k, b.k)) })
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %.0f", strings.TrimSpace(e.k), e.v)
	}
	return strings.Join(parts, ", ")
}
