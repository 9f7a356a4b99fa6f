package sim

import (
	"cmp"
	"math"
	"slices"
)

// greedyDecide is the greedy-ttft arm: it replaces the hub and the pylons'
// engine choice and sends the request to the engine whose TTFT for it is
// lowest now, from exact cached tokens in the engine's KV cache, exact
// slots, FIFO, requests in transit and prefill backlog, and no further
// arrivals. Each choice is the fastest first token for this request; it
// is not an optimum for the run (a request that takes the fastest engine
// now can push a later, better-cached one elsewhere), so it is no bound on
// any other arm's cache hits or latency. Ties go to the first engine in
// cluster-id order. It never waits.
func (r *runner) greedyDecide(rs *reqState) {
	var best *engine
	bestT, bestWork := math.Inf(1), int64(0)
	for _, e := range r.engines {
		cached := peekCached(e, rs)
		work := int64(e.spec.prefillWork(rs.pr.tokens-cached, cached))
		t := r.predictTTFT(e, work)
		if t < bestT {
			best, bestT, bestWork = e, t, work
		}
	}
	if best == nil {
		r.reject(rs, "no_engine")
		return
	}
	rs.rankDepth = 1
	r.notePrevious(rs, func(string) bool { return true })
	f := r.dispatch(rs, best.p, best)
	f.estWork = bestWork
}

// peekCached is how many prompt tokens e's cache holds for rs now.
// kvcache has no read-only probe, so it looks up and releases at once:
// that pins nothing and inserts nothing, but it refreshes the probed
// prefix's LRU position (the greedy-ttft arm only).
func peekCached(e *engine, rs *reqState) int {
	l := e.kv.Lookup(rs.pr.prompt)
	n := l.CachedTokens()
	l.Release(nil)
	return n
}

// predictTTFT is the client TTFT (ns) of a request with work ns of solo
// prefill sent to e now, by running e's slots, FIFO, transit and shared
// prefill forward with no further arrivals. Requests not yet started count
// with the work the arm estimated when it routed them.
func (r *runner) predictTTFT(e *engine, work int64) float64 {
	type job struct {
		rem  float64
		hold float64 // slot time after prefill: TTFT base + decode
		cand bool
	}
	type arrival struct {
		at   float64
		work float64
		hold float64
		cand bool
	}
	ttftBase := float64(msDuration(e.spec.TTFTMs))
	delay := float64(msDuration(e.spec.TokenDelayMs))
	hold := func(out int) float64 { return ttftBase + float64(out-1)*delay }
	now := float64(r.now)
	half := float64(e.c.halfTransit)

	rem := e.ps.remainingAt(r.now)
	jobs := make([]job, 0, len(rem)+1)
	for i, f := range e.ps.jobs {
		jobs = append(jobs, job{rem: rem[i], hold: hold(f.r.wr.OutputTokens)})
	}
	var frees []float64
	for _, f := range e.active {
		if f.phase != phPrefill {
			frees = append(frees, float64(f.finish))
		}
	}
	running := e.running
	var fifo []arrival
	for _, f := range e.fifo {
		fifo = append(fifo, arrival{work: float64(f.estWork), hold: hold(f.r.wr.OutputTokens)})
	}
	arrivals := make([]arrival, 0, len(e.transit)+1)
	for _, f := range e.transit {
		arrivals = append(arrivals, arrival{at: float64(f.arriveAt), work: float64(f.estWork), hold: hold(f.r.wr.OutputTokens)})
	}
	arrivals = append(arrivals, arrival{at: now + half, work: float64(work), cand: true})
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	limit := e.spec.MaxConcurrency
	t := now
	for range 1 << 20 {
		// Start what the free slots allow.
		for len(fifo) > 0 && (limit == 0 || running < limit) {
			a := fifo[0]
			fifo = fifo[1:]
			running++
			if a.work <= psTolerance {
				if a.cand {
					return t + ttftBase + half - now
				}
				frees = append(frees, t+a.hold)
				continue
			}
			jobs = append(jobs, job{rem: a.work, hold: a.hold, cand: a.cand})
		}
		next := math.Inf(1)
		if n := len(jobs); n > 0 {
			least := jobs[0].rem
			for _, j := range jobs[1:] {
				least = min(least, j.rem)
			}
			next = t + least*float64(n)
		}
		for _, x := range frees {
			next = min(next, x)
		}
		if len(arrivals) > 0 {
			next = min(next, arrivals[0].at)
		}
		if math.IsInf(next, 1) {
			return math.Inf(1)
		}
		if n := len(jobs); n > 0 {
			share := (next - t) / float64(n)
			kept := jobs[:0]
			for _, j := range jobs {
				j.rem -= share
				if j.rem <= psTolerance {
					if j.cand {
						return next + ttftBase + half - now
					}
					frees = append(frees, next+j.hold)
					continue
				}
				kept = append(kept, j)
			}
			jobs = kept
		}
		t = next
		kept := frees[:0]
		for _, x := range frees {
			if x <= t {
				running--
				continue
			}
			kept = append(kept, x)
		}
		frees = kept
		for len(arrivals) > 0 && arrivals[0].at <= t {
			fifo = append(fifo, arrivals[0])
			arrivals = arrivals[1:]
		}
	}
	return math.Inf(1)
}
