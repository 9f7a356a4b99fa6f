package tunnel

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBackoffScheduleAtScale plays the backoff schedule of many pylons
// that lose a hub in the same instant, on simulated time (no network):
// each pylon draws from its own seeded source, attempts until the hub is
// back, and the test measures what docs/pylon.md#hubs-and-the-tunnel
// reports: how long after the hub's return the last pylon is back, and the
// most attempts that fall in any 100 ms. Run with -v for the numbers.
func TestBackoffScheduleAtScale(t *testing.T) {
	const bucket = 100 * time.Millisecond
	for _, tc := range []struct {
		pylons int
		down   time.Duration
	}{{20, 40 * time.Second}, {1000, 2 * time.Second}, {1000, 40 * time.Second}, {1000, 300 * time.Second}} {
		perBucket := map[time.Duration]int{}
		var back []time.Duration
		attempts, worst := 0, 0
		for p := range tc.pylons {
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			var b backoff
			at := time.Duration(0)
			for {
				d := b.next(rng.Float64())
				if d < InitialBackoff || d > MaxBackoff {
					t.Fatalf("wait %v outside [%v, %v]", d, InitialBackoff, MaxBackoff)
				}
				at += d
				attempts++
				perBucket[at/bucket]++
				worst = max(worst, perBucket[at/bucket])
				if at >= tc.down {
					back = append(back, at-tc.down)
					break
				}
			}
		}
		slices.Sort(back)
		last := back[len(back)-1]
		t.Logf("%4d pylons, hub down %v: back after %.1fs median, %.1fs last; %.1f attempts per pylon; at most %d attempts in %v",
			tc.pylons, tc.down, back[len(back)/2].Seconds(), last.Seconds(), float64(attempts)/float64(tc.pylons), worst, bucket)
		if last > MaxBackoff {
			t.Errorf("%d pylons, down %v: the last came back %v after the hub; the bound is %v", tc.pylons, tc.down, last, MaxBackoff)
		}
		if worst > max(tc.pylons/10, 5) {
			t.Errorf("%d pylons, down %v: %d attempts in one %v", tc.pylons, tc.down, worst, bucket)
		}
	}
}
