package waitroom

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Class is a waiting request's class under the policy.
type Class uint8

const (
	// Other is a new, stale or unclassified request: no warm cache of its
	// own to lose.
	Other Class = iota
	// Returning is a request of a session whose last cluster is a current
	// candidate (routing.SessionReturning).
	Returning
)

var classNames = [...]string{Other: "other", Returning: "returning"}

// String returns the class's label value.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// ClassOf is the class of a request classified as s.
func ClassOf(s routing.SessionState) Class {
	if s == routing.SessionReturning {
		return Returning
	}
	return Other
}

// Config is the rooms' policy.
type Config struct {
	// Limit bounds each target's waiting requests; 0 means no bound.
	Limit int
	// ReturningFirst turns the returning-first policy on. Off, every
	// request is Other: the room only bounds the wait.
	ReturningFirst bool
	// Metrics records the rooms; nil records nothing.
	Metrics *Metrics
}

// Rooms are the waiting rooms of every target. The zero value is not
// usable: build it with New. Its methods are safe for concurrent use.
type Rooms struct {
	cfg   Config
	mu    sync.Mutex
	rooms map[routing.Target]*room
	// returning counts the returning waiters of every room, so that Yield,
	// asked on every routing choice, answers the common case (nobody
	// returning waits) without the lock.
	returning atomic.Int64
}

// room is one target's waiters. Every field is guarded by Rooms.mu.
type room struct {
	total     int
	returning int
	// others holds the Other waiters in arrival order; the newest (the
	// back) is shed first, since it has waited least.
	others *list.List
	// gen counts wake rounds. A round starts when a yielding request wakes
	// the returning waiters; pending of them have not passed since, and
	// settled is closed when the last one has (or left).
	gen     uint64
	wake    chan struct{}
	woken   chan struct{} // the round's closed wake, for waiters still due to pass
	pending int
	settled chan struct{}
}

// Ticket is one request's place in its target's room, from Enter to
// Leave.
type Ticket struct {
	target routing.Target
	class  Class
	room   *room
	elem   *list.Element // in room.others, for Other
	// seen is the room's round when the ticket's latest pass began;
	// counted the latest round it has been counted as passed in.
	seen, counted uint64
	shed          chan struct{}
	out           bool // left or shed: no longer in the room
}

// New returns empty rooms under cfg.
func New(cfg Config) *Rooms {
	return &Rooms{cfg: cfg, rooms: map[routing.Target]*room{}}
}

// Enter puts a request of class c into t's room. When the room is full,
// a Returning request displaces the newest Other waiter (whose Shed
// channel closes) and an Other request is refused: ok is false and the
// caller answers at once.
func (rs *Rooms) Enter(t routing.Target, c Class) (tk *Ticket, ok bool) {
	if !rs.cfg.ReturningFirst {
		c = Other
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.rooms[t]
	if r == nil {
		r = &room{others: list.New(), wake: make(chan struct{})}
		rs.rooms[t] = r
		rs.cfg.Metrics.Prime(t)
	}
	if rs.cfg.Limit > 0 && r.total >= rs.cfg.Limit {
		back := r.others.Back()
		if c != Returning || back == nil {
			rs.cfg.Metrics.refused(t, c)
			rs.dropIfEmpty(t, r)
			return nil, false
		}
		victim := back.Value.(*Ticket) //nolint:forcetypeassert // others holds only tickets
		rs.removeLocked(victim)
		close(victim.shed)
		rs.cfg.Metrics.displaced(t)
	}
	tk = &Ticket{target: t, class: c, room: r, seen: r.gen, counted: r.gen, shed: make(chan struct{})}
	r.total++
	if c == Returning {
		r.returning++
		rs.returning.Add(1)
	} else {
		tk.elem = r.others.PushBack(tk)
	}
	rs.cfg.Metrics.waiting(t, c, 1)
	return tk, true
}

// Leave takes tk out of its room; it is a no-op for a nil, shed or
// already-left ticket.
func (rs *Rooms) Leave(tk *Ticket) {
	if tk == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if tk.out {
		return
	}
	rs.removeLocked(tk)
	rs.dropIfEmpty(tk.target, tk.room)
}

// removeLocked takes tk out of its room, counting it as passed in the
// current round so a yielding request does not wait for it.
func (rs *Rooms) removeLocked(tk *Ticket) {
	r := tk.room
	tk.out = true
	r.total--
	if tk.class == Returning {
		r.returning--
		rs.returning.Add(-1)
		if tk.counted < r.gen {
			tk.counted = r.gen
			r.passed()
		}
	} else {
		r.others.Remove(tk.elem)
	}
	rs.cfg.Metrics.waiting(tk.target, tk.class, -1)
}

// dropIfEmpty forgets an empty room, so rooms of targets nobody waits
// for cost nothing.
func (rs *Rooms) dropIfEmpty(t routing.Target, r *room) {
	if r.total == 0 && rs.rooms[t] == r {
		delete(rs.rooms, t)
	}
}

// passed counts one returning waiter of the current round as passed.
func (r *room) passed() {
	if r.pending > 0 {
		r.pending--
		if r.pending == 0 {
			close(r.settled)
		}
	}
}

// Pass marks the start of a routing pass of tk's request: a pass that
// begins after a wake sees the capacity the wake was for.
func (rs *Rooms) Pass(tk *Ticket) {
	if tk == nil || tk.class != Returning {
		return
	}
	rs.mu.Lock()
	tk.seen = tk.room.gen
	rs.mu.Unlock()
}

// Sleep is called after a pass of tk's request found nothing and before
// it sleeps. It counts a Returning waiter as passed in the round its pass
// saw, and returns the channel that wakes it for the next round (nil for
// Other, which nothing wakes early).
func (rs *Rooms) Sleep(tk *Ticket) <-chan struct{} {
	if tk == nil || tk.class != Returning {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := tk.room
	if !tk.out && tk.counted < r.gen {
		if tk.seen < r.gen {
			// Its pass began before the wake: it has not seen the
			// capacity yet, so it passes again at once.
			return r.woken
		}
		tk.counted = r.gen
		r.passed()
	}
	return r.wake
}

// Shed returns a channel closed when a returning arrival displaced tk
// from its full room.
func (tk *Ticket) Shed() <-chan struct{} { return tk.shed }

// Class returns the class tk waits in.
func (tk *Ticket) Class() Class { return tk.class }

// Yield is asked by an Other request that a pass has just given a
// cluster. When returning sessions wait for the same target, it wakes
// them (unless a round is already running) and returns a channel closed
// once each has passed: the request waits for it, then takes what its
// next pass gives. ok is false when nobody returning waits.
func (rs *Rooms) Yield(t routing.Target) (settled <-chan struct{}, ok bool) {
	if !rs.cfg.ReturningFirst || rs.returning.Load() == 0 {
		return nil, false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.rooms[t]
	if r == nil || r.returning == 0 {
		return nil, false
	}
	rs.cfg.Metrics.yielded(t)
	if r.pending > 0 {
		return r.settled, true
	}
	r.gen++
	close(r.wake)
	r.woken, r.wake = r.wake, make(chan struct{})
	r.pending = r.returning
	r.settled = make(chan struct{})
	return r.settled, true
}

// Waiting returns t's waiting requests of each class, for tests and
// /debug/state.
func (rs *Rooms) Waiting(t routing.Target) (returning, other int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r := rs.rooms[t]; r != nil {
		return r.returning, r.total - r.returning
	}
	return 0, 0
}
