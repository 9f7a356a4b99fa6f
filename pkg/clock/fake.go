package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only through Advance or Set. Timers fire
// in deadline order, synchronously inside Advance for channel timers and in a
// new goroutine for AfterFunc callbacks, as with the time package.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the timer set changes
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a channel timer that fires when the fake time reaches
// now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, ch: make(chan time.Time, 1)}
	f.arm(t, d)
	return t
}

// AfterFunc returns a timer that runs fn in its own goroutine when the fake
// time reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{clock: f, fn: fn}
	f.arm(t, d)
	return t
}

// Advance moves the fake time forward by d, firing every timer whose deadline
// is reached, in deadline order; each timer sees Now equal to its own
// deadline while it fires.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.advanceTo(target)
}

// Set moves the fake time to t if t is later than the current time.
func (f *Fake) Set(t time.Time) { f.advanceTo(t) }

// Timers returns the number of timers that are armed and not yet fired.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Changed returns a channel that is closed the next time a timer is armed,
// stopped or fired. Tests use it to wait for code under test to arm its
// timer without sleeping.
func (f *Fake) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// WaitForTimers blocks until at least n timers are armed.
func (f *Fake) WaitForTimers(n int) {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return
		}
		ch := f.changed
		f.mu.Unlock()
		<-ch
	}
}

func (f *Fake) advanceTo(target time.Time) {
	for {
		f.mu.Lock()
		if len(f.timers) == 0 || f.timers[0].when.After(target) {
			if target.After(f.now) {
				f.now = target
			}
			f.mu.Unlock()
			return
		}
		t := f.timers[0]
		f.timers = f.timers[1:]
		if t.when.After(f.now) {
			f.now = t.when
		}
		t.active = false
		now := f.now
		f.notifyLocked()
		f.mu.Unlock()
		if t.fn != nil {
			go t.fn()
		} else {
			select {
			case t.ch <- now:
			default:
			}
		}
	}
}

func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(t)
	f.seq++
	t.seq = f.seq
	t.when = f.now.Add(max(d, 0))
	t.active = true
	f.timers = append(f.timers, t)
	sort.SliceStable(f.timers, func(i, j int) bool {
		a, b := f.timers[i], f.timers[j]
		if a.when.Equal(b.when) {
			return a.seq < b.seq
		}
		return a.when.Before(b.when)
	})
	f.notifyLocked()
}

// removeLocked drops t from the armed set and reports whether it was armed.
func (f *Fake) removeLocked(t *fakeTimer) bool {
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			t.active = false
			return true
		}
	}
	return false
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	clock  *Fake
	ch     chan time.Time
	fn     func()
	when   time.Time
	seq    uint64
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.clock.removeLocked(t)
	if was {
		t.clock.notifyLocked()
	}
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	was := t.active
	t.clock.mu.Unlock()
	t.clock.arm(t, d)
	return was
}
