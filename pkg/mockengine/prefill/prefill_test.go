package prefill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig drives a Scheduler on a fake clock. Jobs run in goroutines and report
// the fake time at which Do returned; the test advances the clock only after
// waiting, through the scheduler's onChange hook, for the state it expects.
type rig struct {
	t    *testing.T
	clk  *clock.Fake
	s    *Scheduler
	poke chan struct{}
}

// result is what one Do call reported.
type result struct {
	id  int
	err error
	at  time.Duration // fake time since epoch when Do returned
}

func newRig(t *testing.T) *rig {
	t.Helper()
	clk := clock.NewFake(epoch)
	r := &rig{t: t, clk: clk, s: New(clk), poke: make(chan struct{}, 1)}
	r.s.onChange = func() {
		select {
		case r.poke <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if n := r.s.Active(); n != 0 {
			t.Errorf("Active() = %d after the test, want 0", n)
		}
		if n := r.clk.Timers(); n != 0 {
			t.Errorf("fake clock has %d armed timers after the test, want 0", n)
		}
	})
	return r
}

// waitFor blocks until cond holds. It re-checks cond after every scheduler
// state change; the buffered poke means a change between the check and the
// wait is never missed. The real-time guard only turns a hang into a failure.
func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	for !cond() {
		select {
		case <-r.poke:
		case <-guard.C:
			r.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (r *rig) waitActive(n int) {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("Active() == %d", n), func() bool { return r.s.Active() == n })
}

// start runs Do(ctx, work) in a goroutine and returns the channel that will
// carry its result.
func (r *rig) start(ctx context.Context, id int, work time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		err := r.s.Do(ctx, work)
		ch <- result{id: id, err: err, at: r.clk.Since(epoch)}
	}()
	return ch
}

// join starts a job and waits until it is active, so the next Advance
// already counts it.
func (r *rig) join(ctx context.Context, id int, work time.Duration) <-chan result {
	r.t.Helper()
	want := r.s.Active() + 1
	ch := r.start(ctx, id, work)
	r.waitActive(want)
	return ch
}

// advanceTo moves the fake clock to epoch+at.
func (r *rig) advanceTo(at time.Duration) { r.clk.Set(epoch.Add(at)) }

func (r *rig) receive(ch <-chan result) result {
	r.t.Helper()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	select {
	case res := <-ch:
		return res
	case <-guard.C:
		r.t.Fatal("timed out waiting for Do to return")
		return result{}
	}
}

// expectDone checks that the job on ch returned nil at exactly epoch+at.
func (r *rig) expectDone(ch <-chan result, at time.Duration) {
	r.t.Helper()
	res := r.receive(ch)
	if res.err != nil {
		r.t.Fatalf("job %d: Do = %v, want nil", res.id, res.err)
	}
	if res.at != at {
		r.t.Fatalf("job %d finished at +%v, want +%v", res.id, res.at, at)
	}
}

// expectRunning checks that the job on ch has not returned. It is exact, not
// a race: with the clock short of the armed deadline no timer callback is in
// flight, so nothing can finish the job.
func (r *rig) expectRunning(ch <-chan result) {
	r.t.Helper()
	select {
	case res := <-ch:
		r.t.Fatalf("job %d returned at +%v (err %v), want it still running", res.id, res.at, res.err)
	default:
	}
}

func TestSingleJobFinishesAtItsWork(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.join(t.Context(), 0, time.Second)
	r.advanceTo(999 * time.Millisecond)
	r.expectRunning(job)
	if n := r.s.Active(); n != 1 {
		t.Fatalf("Active() = %d at +999ms, want 1", n)
	}
	r.advanceTo(time.Second - time.Nanosecond)
	r.expectRunning(job)
	r.advanceTo(time.Second)
	r.expectDone(job, time.Second)
}

func TestEqualJobsShareCapacity(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var jobs []<-chan result
	for i := range 4 {
		jobs = append(jobs, r.join(t.Context(), i, time.Second))
	}
	r.advanceTo(4*time.Second - time.Nanosecond)
	for _, j := range jobs {
		r.expectRunning(j)
	}
	r.advanceTo(4 * time.Second)
	// All four must finish in the same timer callback, at the same instant.
	for _, j := range jobs {
		r.expectDone(j, 4*time.Second)
	}
}

func TestLateShortJobDelaysLongJobByItsWork(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	long := r.join(t.Context(), 0, 10*time.Second)
	r.advanceTo(2 * time.Second)
	short := r.join(t.Context(), 1, time.Second)
	r.advanceTo(4 * time.Second)
	r.expectDone(short, 4*time.Second)
	r.advanceTo(11*time.Second - time.Nanosecond)
	r.expectRunning(long)
	r.advanceTo(11 * time.Second)
	r.expectDone(long, 11*time.Second)
}

func TestCancelledJobStopsConsumingAtOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stays := r.join(t.Context(), 0, 2*time.Second)
	goes := r.join(ctx, 1, 2*time.Second)

	r.advanceTo(time.Second)
	cancel()
	// Promptly: no clock movement is needed for the cancelled Do to return.
	res := r.receive(goes)
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("cancelled Do = %v, want context.Canceled", res.err)
	}
	if res.at != time.Second {
		t.Fatalf("cancelled Do returned at +%v, want +1s", res.at)
	}
	if n := r.s.Active(); n != 1 {
		t.Fatalf("Active() = %d after cancel, want 1", n)
	}
	// Half speed for 1s served 0.5s; the remaining 1.5s now runs alone.
	r.advanceTo(2500*time.Millisecond - time.Nanosecond)
	r.expectRunning(stays)
	r.advanceTo(2500 * time.Millisecond)
	r.expectDone(stays, 2500*time.Millisecond)
}

func TestUnequalJobsFinishInWorkOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	a := r.join(t.Context(), 0, time.Second)
	b := r.join(t.Context(), 1, 2*time.Second)
	c := r.join(t.Context(), 2, 3*time.Second)
	r.advanceTo(3 * time.Second)
	r.expectDone(a, 3*time.Second)
	r.expectRunning(b)
	r.advanceTo(5 * time.Second)
	r.expectDone(b, 5*time.Second)
	r.expectRunning(c)
	r.advanceTo(6 * time.Second)
	r.expectDone(c, 6*time.Second)
}

func TestNoWorkAndDoneContextDoNotJoin(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, work := range []time.Duration{0, -time.Second} {
		if err := r.s.Do(t.Context(), work); err != nil {
			t.Fatalf("Do(%v) = %v, want nil", work, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.s.Do(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a cancelled context = %v, want context.Canceled", err)
	}
	if n := r.s.Active(); n != 0 {
		t.Fatalf("Active() = %d, want 0", n)
	}
	if n := r.clk.Timers(); n != 0 {
		t.Fatalf("Timers() = %d, want 0: nothing joined", n)
	}
}

func TestCancellingLastJobStopsTimer(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithCancel(t.Context())
	job := r.join(ctx, 0, time.Second)
	if n := r.clk.Timers(); n != 1 {
		t.Fatalf("Timers() = %d with one job, want exactly 1", n)
	}
	cancel()
	if res := r.receive(job); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", res.err)
	}
	// The cleanup asserts Active() == 0 and no armed timer.
}

func TestJoinAtCompletionInstantFinishesDueJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	first := r.join(t.Context(), 0, time.Second)
	r.advanceTo(time.Second)
	// Whether the timer callback or this join settles first, the first job
	// finishes at +1s and the second runs alone from +1s.
	second := r.start(t.Context(), 1, time.Second)
	r.expectDone(first, time.Second)
	r.waitActive(1) // first has left, so this is the second having joined
	r.advanceTo(2 * time.Second)
	r.expectDone(second, 2*time.Second)
}

func TestTinyResiduesDoNotLoop(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// Three jobs of 1ns, 2ns and 1s: shares of a third of a nanosecond leave
	// fractional remainders, which must still end in a bounded number of
	// timer rounds with every job done.
	var jobs []<-chan result
	for i, w := range []time.Duration{1, 2, time.Second} {
		jobs = append(jobs, r.join(t.Context(), i, w))
	}
	for rounds := 0; r.s.Active() > 0; rounds++ {
		if rounds > 10 {
			t.Fatalf("still %d active jobs after %d timer rounds", r.s.Active(), rounds)
		}
		r.advanceToDeadline()
	}
	for _, j := range jobs {
		if res := r.receive(j); res.err != nil {
			t.Fatalf("job %d: Do = %v", res.id, res.err)
		}
	}
}

// advanceToDeadline moves the fake clock to the scheduler's armed deadline
// and waits until the timer callback has settled: either a later deadline is
// armed or no job is left.
func (r *rig) advanceToDeadline() {
	r.t.Helper()
	d, ok := r.deadline()
	if !ok {
		r.t.Fatal("no deadline armed while jobs are active")
	}
	r.clk.Set(d)
	r.waitFor("the timer callback", func() bool {
		next, armed := r.deadline()
		return !armed || next.After(d)
	})
}

func (r *rig) deadline() (time.Time, bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.deadline, len(r.s.jobs) > 0
}

// TestRandomizedAgainstReference drives random jobs with random join times
// and checks them against an independent event-driven model of processor
// sharing, plus two properties that do not depend on the model: jobs finish
// in the order of their virtual finish tags, and a continuously busy period
// lasts exactly the sum of the works.
func TestRandomizedAgainstReference(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			n := 2 + rng.IntN(7)
			jobs := make([]refJob, n)
			jobs[0] = refJob{work: time.Duration(1+rng.IntN(500)) * time.Millisecond}
			for i := 1; i < n; i++ {
				// Every join falls inside the first job's solo work, and that
				// job is served at most at full speed, so some job is active
				// from the first join to the last completion.
				jobs[i] = refJob{
					join: time.Duration(rng.Int64N(int64(jobs[0].work))),
					work: time.Duration(1+rng.IntN(500)) * time.Millisecond,
				}
				if rng.IntN(4) == 0 { // also exercise simultaneous joins
					jobs[i].join = jobs[i-1].join
				}
			}
			slices.SortStableFunc(jobs[1:], func(a, b refJob) int { return cmp.Compare(a.join, b.join) })
			simulate(jobs)
			runRandom(t, jobs)
		})
	}
}

// refJob is one job of the randomized test: its inputs and what the
// reference model predicts for it.
type refJob struct {
	join, work time.Duration
	finish     float64 // predicted finish, ns since epoch
	tag        float64 // virtual finish tag: service per job at join plus work
}

// simulate is the reference: exact event-by-event processor sharing in
// float64 nanoseconds, kept independent of the scheduler's code.
func simulate(jobs []refJob) {
	rem := make([]float64, len(jobs))
	active := map[int]bool{}
	var now, virtual float64 // virtual: service each active job has received
	next := 0
	for next < len(jobs) || len(active) > 0 {
		nextJoin := math.Inf(1)
		if next < len(jobs) {
			nextJoin = float64(jobs[next].join)
		}
		nextFinish := math.Inf(1)
		for i := range active {
			nextFinish = min(nextFinish, now+rem[i]*float64(len(active)))
		}
		at := min(nextJoin, nextFinish)
		if k := len(active); k > 0 {
			share := (at - now) / float64(k)
			virtual += share
			for i := range active {
				rem[i] -= share
			}
		}
		now = at
		for i := range active {
			if rem[i] <= 1e-3 {
				jobs[i].finish = now
				delete(active, i)
			}
		}
		for next < len(jobs) && float64(jobs[next].join) == now {
			rem[next] = float64(jobs[next].work)
			jobs[next].tag = virtual + float64(jobs[next].work)
			active[next] = true
			next++
		}
	}
}

func runRandom(t *testing.T, jobs []refJob) {
	r := newRig(t)
	results := make(chan result, len(jobs))
	var wg sync.WaitGroup
	next := 0
	for next < len(jobs) || r.s.Active() > 0 {
		deadline, armed := r.deadline()
		if next < len(jobs) && (!armed || epoch.Add(jobs[next].join).Before(deadline)) {
			r.advanceTo(jobs[next].join)
			want := r.s.Active() + 1
			id, work := next, jobs[next].work
			wg.Go(func() {
				err := r.s.Do(t.Context(), work)
				results <- result{id: id, err: err, at: r.clk.Since(epoch)}
			})
			r.waitActive(want)
			next++
			continue
		}
		before := r.s.Active()
		r.advanceToDeadline()
		// Collect the finished jobs before moving the clock again, so each
		// records the instant it finished.
		for range before - r.s.Active() {
			res := r.receive(results)
			if res.err != nil {
				t.Fatalf("job %d: Do = %v", res.id, res.err)
			}
			got, want := float64(res.at), jobs[res.id].finish
			// Each timer deadline is rounded up to a whole nanosecond, so the
			// scheduler may run late by at most a nanosecond per event.
			if math.Abs(got-want) > float64(2*len(jobs)) {
				t.Errorf("job %d (join +%v, work %v) finished at +%v, reference +%v",
					res.id, jobs[res.id].join, jobs[res.id].work, res.at, time.Duration(want))
			}
			jobs[res.id].finish = got
		}
	}
	wg.Wait()

	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[a].finish, jobs[b].finish) })
	for k := 1; k < len(order); k++ {
		a, b := jobs[order[k-1]], jobs[order[k]]
		if a.tag > b.tag+1 {
			t.Errorf("job %d (tag %.0f) finished before job %d (tag %.0f)", order[k-1], a.tag, order[k], b.tag)
		}
	}

	var total time.Duration
	for _, j := range jobs {
		total += j.work
	}
	busy := time.Duration(jobs[order[len(order)-1]].finish) - jobs[0].join
	// Work is conserved: while any job is active the GPU serves exactly one
	// second of work per second. Rounding allows a nanosecond per event.
	if d := busy - total; d < -time.Duration(2*len(jobs)) || d > time.Duration(2*len(jobs)) {
		t.Errorf("busy period %v, want the sum of works %v (diff %v)", busy, total, d)
	}
}

// TestRealClockStress runs many short jobs on the real clock, some cancelled
// mid-flight, to give the race detector concurrent joins, leaves and timer
// callbacks. It asserts outcomes only, never durations.
func TestRealClockStress(t *testing.T) {
	t.Parallel()
	s := New(clock.Real{})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if i%4 == 0 {
				go cancel()
			}
			for range 20 {
				err := s.Do(ctx, time.Duration(1+i)*time.Microsecond)
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Do = %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := s.Active(); n != 0 {
		t.Fatalf("Active() = %d after all jobs, want 0", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.deadline.IsZero() {
		t.Fatal("timer still armed after all jobs ended")
	}
}

// BenchmarkDo measures the per-job overhead of Do on the real clock with work
// too small to matter, alone and with other jobs holding the scheduler (which
// makes every settlement walk them).
func BenchmarkDo(b *testing.B) {
	for _, others := range []int{0, 16, 256} {
		b.Run(fmt.Sprint("others=", others), func(b *testing.B) {
			s := New(clock.Real{})
			poke := make(chan struct{}, 1)
			s.onChange = func() {
				select {
				case poke <- struct{}{}:
				default:
				}
			}
			ctx, cancel := context.WithCancel(b.Context())
			var wg sync.WaitGroup
			for range others {
				wg.Go(func() { _ = s.Do(ctx, time.Hour) })
			}
			for s.Active() < others {
				<-poke
			}
			s.mu.Lock()
			s.onChange = nil // measure Do without the test hook
			s.mu.Unlock()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Do(b.Context(), time.Nanosecond); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}
