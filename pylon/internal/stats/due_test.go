package stats

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDueHeapOrder: checks come out in time order, whatever order they
// went in, with repeats.
func TestDueHeapOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var h dueHeap
		var want []time.Time
		n := r.IntN(200)
		for i := range n {
			at := epoch.Add(time.Duration(r.IntN(50)) * time.Second)
			h.push(dueCheck{at: at, id: fmt.Sprint(i)})
			want = append(want, at)
			if r.IntN(4) == 0 && len(h) > 0 { // pops between pushes
				got := h.pop()
				slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
				if !got.at.Equal(want[0]) {
					t.Fatalf("round %d: popped %v, want %v", round, got.at, want[0])
				}
				want = want[1:]
			}
		}
		slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
		for i := range want {
			if got := h.pop(); !got.at.Equal(want[i]) {
				t.Fatalf("round %d: pop %d = %v, want %v", round, i, got.at, want[i])
			}
		}
		if len(h) != 0 {
			t.Fatalf("round %d: %d left", round, len(h))
		}
	}
}

// sweepAll is the request-memory rule stated as a walk of all of the
// memory every sweep, as the collector once did it: the oracle
// TestSweepLooksOnlyAtWhatIsDue holds the due heap to.
func sweepAll(c *Collector, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, t := range c.reqs {
		switch {
		case t.finalized:
			if now.Sub(t.finalizedAt) >= RequestTTL {
				delete(c.reqs, id)
			}
		case t.counting:
			if now.Sub(t.lastSeen) >= RequestTTL {
				c.finalizeLocked(t, now)
				c.m.staleCleanup("request", t.source)
			}
		case !t.owned || t.obsDone:
			if now.Sub(t.obsDoneAt) >= RequestTTL {
				delete(c.reqs, id)
			}
		}
	}
}

// countLive counts the request memory's live counters by source, as
// the scrape once did.
func countLive(c *Collector) map[throughputSource]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[throughputSource]int{sourceEngine: 0, sourceFallback: 0}
	for _, t := range c.reqs {
		if t.counting {
			live[t.source]++
		}
	}
	return live
}

// memoryState is what the request memory holds, in a comparable form.
func memoryState(c *Collector) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, t := range c.reqs {
		out = append(out, fmt.Sprintf("%s owned=%t done=%t@%v counting=%t seen=%v final=%t@%v",
			id, t.owned, t.obsDone, t.obsDoneAt.Sub(epoch), t.counting, t.lastSeen.Sub(epoch), t.finalized, t.finalizedAt.Sub(epoch)))
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// TestSweepLooksOnlyAtWhatIsDue: the sweep, which looks only at the
// request memory that is due, leaves the memory exactly as a walk of all
// of it does, over random runs of begins, engine events (finished or not,
// for owned ids and unknown ones) or usage in answer chunks, retries, ends, reused ids, model
// removal and clock steps of up to two TTLs, with a sweep after each step.
func TestSweepLooksOnlyAtWhatIsDue(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		// Odd seeds measure by the OpenAI fallback: counters come from
		// usage in the answer's chunks instead of the engine's stream.
		mode := []string{ModeRequired, ModeOff}[seed%2]
		due := newHarness(t, Config{StreamMode: mode})
		all := newHarness(t, Config{StreamMode: mode})
		type live struct{ a, b *Observer }
		var open []live
		counters := map[string]uint64{}
		for _, h := range []*harness{due, all} {
			h.c.AddModel(model)
		}
		for step := range 400 {
			id := fmt.Sprintf("r%d", r.IntN(30))
			switch op := r.IntN(10); {
			case op < 3:
				info := RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: 10}
				a, b := due.c.Begin(info), all.c.Begin(info)
				a.Dispatched(0)
				b.Dispatched(0)
				open = append(open, live{a, b})
			case op < 6 && mode == ModeOff && len(open) > 0:
				i := r.IntN(len(open))
				n := r.IntN(5)
				chunk := fmt.Appendf(nil, `{"choices":[{"delta":{"content":"w"}}],"usage":{"completion_tokens":%d}}`, n)
				for _, o := range []*Observer{open[i].a, open[i].b} {
					o.Headers(200)
					o.Output(chunk)
				}
			case op < 6:
				counters[id] += uint64(r.IntN(3))
				fin := r.IntN(4) == 0
				stat(due, id, counters[id], counters[id], fin)
				stat(all, id, counters[id], counters[id], fin)
			case op < 8 && len(open) > 0:
				i := r.IntN(len(open))
				s := []State{Complete, Failed, Cancelled}[r.IntN(3)]
				open[i].a.Finish(s)
				open[i].b.Finish(s)
				open = slices.Delete(open, i, i+1)
			case op == 8 && len(open) > 0:
				i := r.IntN(len(open))
				e := r.IntN(2)
				open[i].a.Dispatched(e)
				open[i].b.Dispatched(e)
			case op == 9 && r.IntN(20) == 0:
				for _, h := range []*harness{due, all} {
					h.c.RemoveModel(model)
					h.c.AddModel(model)
				}
			}
			d := time.Duration(r.IntN(int(2*RequestTTL/time.Second))) * time.Second
			if r.IntN(3) > 0 {
				d = time.Duration(r.IntN(5000)) * time.Millisecond
			}
			due.clk.Advance(d)
			all.clk.Advance(d)
			due.c.sweep(due.clk.Now())
			sweepAll(all.c, all.clk.Now())
			if got, want := memoryState(due.c), memoryState(all.c); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: the due sweep left\n%v\nthe full walk\n%v", seed, step, got, want)
			}
			for _, h := range []*harness{due, all} {
				if got, want := h.c.counting, countLive(h.c); !maps.Equal(got, want) {
					t.Fatalf("seed %d step %d: live counters kept %v, the memory holds %v", seed, step, got, want)
				}
			}
		}
		for _, src := range []string{"engine_stats_stream", "openai_fallback"} {
			l := "kind=request,source=" + src
			if got, want := due.metric("pylon_engine_stats_stale_cleanups_total", l), all.metric("pylon_engine_stats_stale_cleanups_total", l); got != want {
				t.Fatalf("seed %d: stale request cleanups %s %v, full walk %v", seed, src, got, want)
			}
		}
	}
}
