package tunnel

import "time"

// backoff is the reconnect schedule of one hub address, "decorrelated
// jitter": each wait is drawn uniformly between InitialBackoff and three
// times the previous wait (the first between InitialBackoff and three
// times it), capped at MaxBackoff.
//
// Why jitter: a hub restart drops every pylon's tunnel in the same
// instant, and a fixed schedule (1, 2, 4 … s) then makes every pylon
// attempt in the same instant, again and again, until the hub is back and
// takes them all at once. Why this kind: compared with "full jitter"
// (uniform between 0 and the doubling window) it never retries sooner
// than InitialBackoff, so a hub that keeps refusing is not hit by
// near-immediate retries, and it makes fewer attempts for the same spread
// (docs/pylon.md#hubs-and-the-tunnel has the measurements). The wait
// under way when a hub returns is at most MaxBackoff, which bounds how
// long a pylon stays away from a hub that is back.
type backoff struct {
	prev time.Duration // the last wait; 0 after reset
}

// next returns the wait before the next attempt. u is uniform in [0, 1).
func (b *backoff) next(u float64) time.Duration {
	hi := 3 * max(b.prev, InitialBackoff)
	d := min(InitialBackoff+time.Duration(u*float64(hi-InitialBackoff)), MaxBackoff)
	b.prev = d
	return d
}

// reset starts the schedule over, after a connection that proved stable.
func (b *backoff) reset() { b.prev = 0 }
