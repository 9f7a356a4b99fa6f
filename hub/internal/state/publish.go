package state

import (
	"sync/atomic"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Waking publications (docs/design/routing-state.md#publication-signal).
//
// A request that waits for a cluster with room sleeps until a change of
// its target's state could let it choose: a registration (new statistics,
// pending reservations dropped, a refusal's full mark cleared, a backend
// joining or leaving a cluster), a backend removed, or a reservation
// released. Those publications wake it. A reservation made (Reserve) or a
// refusal's mark (MarkFull) only adds load, so they do not: waking every
// waiter on every reservation would make each admission wake them all
// again, a pass per waiter per admitted request.

// Publications returns how many waking publications t has had, a number
// to hand to PublishedAfter. Take it before reading Snapshot(t): a
// publication between the two then still wakes the caller. It never
// blocks and never allocates.
func (s *Store) Publications(t routing.Target) uint64 {
	if sl := (*s.index.Load())[t]; sl != nil {
		return sl.wake.seq.Load()
	}
	return 0
}

// PublishedAfter returns a channel that is closed at t's first waking
// publication after the one numbered seen (from Publications): at once
// when there has been one since. For a target the store does not hold it
// is the Activated channel, closed when any target gains a backend.
func (s *Store) PublishedAfter(t routing.Target, seen uint64) <-chan struct{} {
	sl := (*s.index.Load())[t]
	if sl == nil {
		if seen != 0 {
			return closedChan // the target went away since
		}
		return s.Activated()
	}
	return sl.wake.after(seen)
}

// closedChan is the answer for a publication that has already happened.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// wakeSignal is one target's waking-publication signal: a count, and a
// channel closed and replaced at each one. The channel is made only when
// a waiter asks for it, so publications nobody waits for cost one atomic
// add and one swap.
type wakeSignal struct {
	seq atomic.Uint64
	ch  atomic.Pointer[chan struct{}]
}

// after returns the channel of the next publication, or a closed one when
// the count has moved past seen. The channel is armed before the count is
// read: a publication that the read does not see closes the armed
// channel, so none is missed.
func (w *wakeSignal) after(seen uint64) <-chan struct{} {
	ch := w.arm()
	if w.seq.Load() != seen {
		return closedChan
	}
	return ch
}

func (w *wakeSignal) arm() chan struct{} {
	for {
		if p := w.ch.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if w.ch.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// fire counts a waking publication as n and wakes its waiters. n comes
// from the store's one counter, so a target that goes away and comes back
// with a new slot never repeats a number a waiter holds.
func (w *wakeSignal) fire(n uint64) {
	w.seq.Store(n)
	if p := w.ch.Swap(nil); p != nil {
		close(*p)
	}
}

// signalPublished fires the waking-publication signal of every target c
// touched, unless c only added load. It runs at the end of commit, after
// the snapshots and the readers' index are stored, so a woken waiter reads
// what woke it; a target c retired fires too, so its waiters find it gone.
func (s *Store) signalPublished(c *change, touched []*target) {
	if c.addsLoadOnly {
		return
	}
	for _, t := range touched {
		s.wakes++
		t.slot.wake.fire(s.wakes)
	}
}
