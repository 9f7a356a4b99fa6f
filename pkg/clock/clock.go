package clock

import "time"

// Clock tells the time and schedules work. Real uses the time package; Fake
// advances only when a test says so.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t.
	Since(t time.Time) time.Duration
	// NewTimer returns a Timer whose channel receives the time once d has
	// elapsed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has elapsed. The
	// returned Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the subset of *time.Timer that both clocks provide.
type Timer interface {
	// C returns the channel on which the firing time is delivered; it is nil
	// for timers made by AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing and reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire after d and reports whether it was
	// active.
	Reset(d time.Duration) bool
}

// Real is the wall clock. Its zero value is ready to use.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Sleep waits for d on c and reports true, or reports false as soon as done is
// closed. Timing code uses it to wait without a busy loop and without
// ignoring cancellation.
func Sleep(c Clock, done <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}
