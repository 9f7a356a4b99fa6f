package sim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/mockengine/prefill"
)

// manualClock is a clock.Clock whose one AfterFunc timer the test fires
// itself, synchronously, at exactly its deadline: it exposes
// prefill.Scheduler's next completion, which the scheduler keeps private.
type manualClock struct {
	mu    sync.Mutex
	now   time.Time
	timer *manualTimer
	armed chan struct{} // one value per arming
}

type manualTimer struct {
	c      *manualClock
	f      func()
	when   time.Time
	active bool
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *manualClock) NewTimer(time.Duration) clock.Timer { panic("prefill uses AfterFunc only") }

func (c *manualClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &manualTimer{c: c, f: f}
	c.mu.Lock()
	c.timer = t
	c.mu.Unlock()
	t.Reset(d)
	return t
}

func (t *manualTimer) C() <-chan time.Time { return nil }

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.active
	t.active, t.when = true, t.c.now.Add(d)
	t.c.mu.Unlock()
	t.c.armed <- struct{}{}
	return was
}

// next returns the armed deadline, if any.
func (c *manualClock) next() (time.Time, func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil || !c.timer.active {
		return time.Time{}, nil, false
	}
	return c.timer.when, c.timer.f, true
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	if c.timer != nil && !c.timer.when.After(t) {
		c.timer.active = false
	}
	c.mu.Unlock()
}

type psJoin struct {
	at, work time.Duration
}

// realCompletions runs joins through pkg/mockengine/prefill.Scheduler and
// returns each job's completion time.
func realCompletions(t *testing.T, joins []psJoin) []time.Duration {
	t.Helper()
	clk := &manualClock{now: Epoch, armed: make(chan struct{}, 64)}
	s := prefill.New(clk)
	type doneMsg struct{ job int }
	done := make(chan doneMsg, len(joins))
	out := make([]time.Duration, len(joins))
	next := 0
	for finished := 0; finished < len(joins); {
		when, fire, armed := clk.next()
		if next < len(joins) && (!armed || !when.Before(Epoch.Add(joins[next].at))) {
			// A join first (at equal times too: it arrives before the
			// completion is settled, as in the simulator's event order).
			clk.set(Epoch.Add(joins[next].at))
			j := next
			next++
			go func() {
				if err := s.Do(context.Background(), joins[j].work); err != nil {
					t.Error(err)
				}
				done <- doneMsg{j}
			}()
			<-clk.armed // the job joined and re-armed the timer
			continue
		}
		if !armed {
			t.Fatal("no job and no timer")
		}
		before := s.Active()
		clk.set(when)
		fire()
		for len(clk.armed) > 0 {
			<-clk.armed
		}
		for range before - s.Active() {
			m := <-done
			out[m.job] = when.Sub(Epoch)
			finished++
		}
	}
	return out
}

// simCompletions runs the same joins through procShare.
func simCompletions(joins []psJoin) []time.Duration {
	var p procShare
	fl := make([]*flight, len(joins))
	out := make([]time.Duration, len(joins))
	index := map[*flight]int{}
	done := func(f *flight) { out[index[f]] = time.Duration(p.settled) }
	next := 0
	for {
		d, ok := p.deadline()
		if next < len(joins) && (!ok || int64(joins[next].at) <= d) {
			fl[next] = &flight{}
			index[fl[next]] = next
			p.join(int64(joins[next].at), fl[next], int64(joins[next].work), done)
			next++
			continue
		}
		if !ok {
			return out
		}
		p.settle(d, done)
	}
}

// procShare is the mock engine's prefill scheduler with explicit times:
// the same joins give the same completion instants, to the nanosecond.
func TestProcShareMatchesPrefillScheduler(t *testing.T) {
	ms := time.Millisecond
	for name, joins := range map[string][]psJoin{
		"alone":       {{0, 10 * ms}},
		"two equal":   {{0, 10 * ms}, {0, 10 * ms}},
		"late joiner": {{0, 10 * ms}, {2 * ms, 5 * ms}, {3 * ms, 1 * ms}},
		"staggered":   {{0, 7 * ms}, {1 * ms, 3 * ms}, {1 * ms, 3 * ms}, {4 * ms, 20 * ms}, {30 * ms, 2 * ms}, {30*ms + 333, 1234567}},
		"odd":         {{0, 1000003}, {17, 999999}, {5 * ms, 3}, {5 * ms, 7777777}},
	} {
		t.Run(name, func(t *testing.T) {
			real, got := realCompletions(t, joins), simCompletions(joins)
			for i := range joins {
				if real[i] != got[i] {
					t.Errorf("job %d: simulator %v, prefill.Scheduler %v", i, got[i], real[i])
				}
			}
		})
	}
}

// The greedy-ttft arm's look-ahead agrees with what the engine then does when
// nothing else arrives: a request joining two running prefills.
func TestPredictTTFTMatchesEngine(t *testing.T) {
	f := equalFleet(1, 1, 25, 4)
	w := openWorkload(t, oreq{0, "a", 1, 3000, 5}, oreq{1, "b", 1, 2000, 5}, oreq{2, "c", 1, 1000, 5})
	p := prepare(t, w, f)
	r, err := newRunner(p, f, Arm{Name: GreedyTTFTName, GreedyTTFT: true}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(r, 1*time.Millisecond) // a and b routed, c not yet
	e := r.engines[0]
	work := int64(e.spec.prefillWork(p.reqs[2].tokens, 0))
	r.now = int64(2 * time.Millisecond)
	predicted := r.predictTTFT(e, work)
	for r.step() {
	}
	if got := float64(r.reqs[2].ttft); got < predicted-2 || got > predicted+2 {
		t.Errorf("predicted TTFT %.0f ns, engine gave %.0f ns", predicted, got)
	}
}
