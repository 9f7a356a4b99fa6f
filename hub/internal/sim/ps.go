package sim

import "math"

// psTolerance is pkg/mockengine/prefill's: remaining work (ns) at or below
// which a job counts as served.
const psTolerance = 1.0

// procShare is the mock engine's processor-sharing prefill
// (pkg/mockengine/prefill.Scheduler) driven by explicit times instead of a
// clock: while n jobs are active each is served at 1/n, remaining work is
// settled only when a job joins or the earliest completion is due, and
// that completion is due at settled + ceil(least·n) ns, the scheduler's own
// rounding. prefill.Scheduler blocks its caller in Do and keeps its next
// deadline private, so a single-threaded discrete-event loop cannot drive
// it; TestProcShareMatchesPrefillScheduler checks that the two agree to the
// nanosecond.
type procShare struct {
	jobs    []*flight
	settled int64 // ns since the start of the run
}

// join settles to now (passing finished jobs to done) and adds f with work ns of solo prefill.
func (p *procShare) join(now int64, f *flight, work int64, done func(*flight)) {
	p.settle(now, done)
	f.psRemaining = float64(work)
	p.jobs = append(p.jobs, f)
}

// settle charges every job its share of the time since the last
// settlement; jobs that are served are removed and passed to done in join
// order.
func (p *procShare) settle(now int64, done func(*flight)) {
	if now <= p.settled {
		return
	}
	if n := len(p.jobs); n > 0 {
		share := float64(now-p.settled) / float64(n)
		kept := p.jobs[:0]
		var finished []*flight
		for _, f := range p.jobs {
			f.psRemaining -= share
			if f.psRemaining <= psTolerance {
				finished = append(finished, f)
				continue
			}
			kept = append(kept, f)
		}
		clear(p.jobs[len(kept):])
		p.jobs = kept
		p.settled = now
		for _, f := range finished {
			if done != nil {
				done(f)
			}
		}
	}
	p.settled = now
}

// deadline is when the earliest active job will be served, if any.
func (p *procShare) deadline() (int64, bool) {
	n := len(p.jobs)
	if n == 0 {
		return 0, false
	}
	least := p.jobs[0].psRemaining
	for _, f := range p.jobs[1:] {
		least = min(least, f.psRemaining)
	}
	ns := math.Ceil(least * float64(n))
	if ns >= float64(math.MaxInt64/2) {
		return math.MaxInt64 / 2, true
	}
	return p.settled + int64(ns), true
}

// remainingAt returns each active job's remaining work as it would be at
// now (≥ settled) without settling, for the oracle's look-ahead.
func (p *procShare) remainingAt(now int64) []float64 {
	out := make([]float64, len(p.jobs))
	share := 0.0
	if n := len(p.jobs); n > 0 && now > p.settled {
		share = float64(now-p.settled) / float64(n)
	}
	for i, f := range p.jobs {
		out[i] = f.psRemaining - share
	}
	return out
}
