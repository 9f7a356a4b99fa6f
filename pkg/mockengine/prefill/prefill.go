package prefill

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// tolerance is the remaining work, in nanoseconds, at or below which a job
// counts as finished. Remaining work is float64 nanoseconds divided by N at
// every settlement, so residues far below a nanosecond are expected; treating
// them as done keeps jobs that should end at the same instant ending together
// and spares a timer round for a sub-nanosecond leftover.
const tolerance = 1.0

// Scheduler shares one instance's prefill capacity among concurrent jobs by
// processor sharing. The zero value is not usable; call New. A Scheduler is
// safe for concurrent use and must not be copied.
type Scheduler struct {
	clk clock.Clock
	// pool recycles jobs so that a steady stream of prefills does not
	// allocate; a pooled job has index -1 and an empty done channel.
	pool sync.Pool

	mu sync.Mutex
	// jobs are the active jobs in no particular order; each knows its index
	// so a cancelled job leaves in O(1).
	jobs []*job
	// finished collects the jobs a settlement completed until rearmLocked
	// signals them, which happens only after the next timer is armed so that
	// a caller returning from Do already sees the new deadline.
	finished []*job
	// settled is the instant up to which every active job's remaining work
	// has been charged.
	settled time.Time
	// timer is created on first use and kept armed only while jobs is not
	// empty, so an idle Scheduler holds no timer and needs no Close.
	timer clock.Timer
	// deadline is when timer fires; zero while it is stopped. Tests read it
	// to advance a fake clock to exactly the next completion.
	deadline time.Time
	// onChange, if set, is called with mu held at the end of every join,
	// leave and timer callback. Tests use it to wait without sleeping; it is
	// nil in production.
	onChange func()
}

// job is one prefill in progress.
type job struct {
	remaining float64       // solo work left, in nanoseconds
	index     int           // position in Scheduler.jobs, or -1 once it left
	done      chan struct{} // capacity 1; receives one value when served
}

// New returns an idle Scheduler that reads time and arms its timer on c.
func New(c clock.Clock) *Scheduler {
	s := &Scheduler{clk: c}
	s.pool.New = func() any {
		return &job{index: -1, done: make(chan struct{}, 1)}
	}
	return s
}

// Do blocks until work, the job's solo GPU time, has been served under
// processor sharing with the other active jobs, and returns nil. If ctx is
// done first, the job stops consuming capacity at that instant, so the
// remaining jobs speed up from then on, and Do returns ctx.Err(); a job whose
// work was already served by then still returns nil, because the prefill it
// models did complete. Work <= 0 returns nil at once without joining, and an
// already cancelled ctx returns its error without joining.
func (s *Scheduler) Do(ctx context.Context, work time.Duration) error {
	if work <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	j := s.pool.Get().(*job)

	s.mu.Lock()
	s.settleLocked()
	j.remaining = float64(work)
	j.index = len(s.jobs)
	s.jobs = append(s.jobs, j)
	s.rearmLocked()
	s.mu.Unlock()

	select {
	case <-j.done:
		s.pool.Put(j)
		return nil
	case <-ctx.Done():
	}

	s.mu.Lock()
	// Settle first: the job may have been served in full between the timer
	// firing and its callback taking the lock, and then it finished.
	s.settleLocked()
	left := j.index >= 0
	if left {
		s.removeLocked(j)
	}
	s.rearmLocked()
	s.mu.Unlock()

	if !left {
		<-j.done // sent under mu when the job finished; drain before reuse
		s.pool.Put(j)
		return nil
	}
	s.pool.Put(j)
	return ctx.Err()
}

// Active returns the number of jobs currently prefilling, for a gauge and for
// tests that must wait until their jobs have joined.
func (s *Scheduler) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

// fire is the timer callback. It may run late or even after the timer was
// re-armed (a stale firing), so it decides nothing from the fact that it ran:
// it settles to the current time, finishes whatever is actually served and
// re-arms.
func (s *Scheduler) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	s.rearmLocked()
}

// settleLocked charges every active job its share of the time since the last
// settlement and moves the jobs that are served to s.finished.
func (s *Scheduler) settleLocked() {
	now := s.clk.Now()
	if !now.After(s.settled) {
		return
	}
	if n := len(s.jobs); n > 0 {
		share := float64(now.Sub(s.settled)) / float64(n)
		kept := s.jobs[:0]
		for _, j := range s.jobs {
			j.remaining -= share
			if j.remaining <= tolerance {
				j.index = -1
				s.finished = append(s.finished, j)
				continue
			}
			j.index = len(kept)
			kept = append(kept, j)
		}
		clear(s.jobs[len(kept):]) // drop references to finished jobs
		s.jobs = kept
	}
	s.settled = now
}

// removeLocked takes the active job j out of s.jobs.
func (s *Scheduler) removeLocked(j *job) {
	last := len(s.jobs) - 1
	moved := s.jobs[last]
	s.jobs[j.index] = moved
	moved.index = j.index
	s.jobs[last] = nil
	s.jobs = s.jobs[:last]
	j.index = -1
}

// rearmLocked points the timer at the earliest completion, or stops it when
// no job is left, then signals the jobs the last settlement finished. It must
// follow settleLocked in the same critical section, because the wait it
// computes is measured from s.settled.
func (s *Scheduler) rearmLocked() {
	if n := len(s.jobs); n == 0 {
		if s.timer != nil {
			s.timer.Stop()
		}
		s.deadline = time.Time{}
	} else {
		least := s.jobs[0].remaining
		for _, j := range s.jobs[1:] {
			least = min(least, j.remaining)
		}
		// Round up: a timer a fraction of a nanosecond early would find the
		// job unfinished and re-arm for that fraction, over and over.
		wait := time.Duration(math.MaxInt64)
		if ns := math.Ceil(least * float64(n)); ns < float64(math.MaxInt64) {
			wait = time.Duration(ns)
		}
		if s.timer == nil {
			s.timer = s.clk.AfterFunc(wait, s.fire)
		} else {
			s.timer.Reset(wait)
		}
		s.deadline = s.settled.Add(wait)
	}
	for i, j := range s.finished {
		j.done <- struct{}{} // never blocks: one send per job into capacity 1
		s.finished[i] = nil
	}
	s.finished = s.finished[:0]
	if s.onChange != nil {
		s.onChange()
	}
}
