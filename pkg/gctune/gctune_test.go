package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{4 * mib, 64 * mib, 1600},  // 16x live: at the cap
		{8 * mib, 64 * mib, 800},   // next collection at 72 MiB
		{32 * mib, 64 * mib, 200},  // at 96 MiB
		{64 * mib, 64 * mib, 100},  // headroom = live: the default
		{500 * mib, 64 * mib, 100}, // a large heap keeps the default
		{0, 64 * mib, 1600},        // nothing live yet
		{1 * mib, 64 * mib, 1600},  // capped
		{48 * mib, 64 * mib, 133},  // rounds down
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

func TestStartLeavesAnOperatorsGOGC(t *testing.T) {
	env := map[string]string{"GOGC": "150"}
	if tu := Start(func(k string) string { return env[k] }, DefaultHeadroom); tu != nil {
		tu.Stop()
		t.Fatal("Start tuned the collector although GOGC is set")
	}
	if tu := Start(func(string) string { return "" }, 0); tu != nil {
		tu.Stop()
		t.Fatal("Start tuned the collector with no headroom")
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestTunerFollowsTheLiveHeap checks the whole loop: after a collection
// the cleanup re-targets the collector for the heap that is live now.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	done := make(chan int, 16)
	tu := &Tuner{headroom: 16 << 20, adjusted: func(p int) {
		select {
		case done <- p:
		default:
		}
	}}
	tu.adjust()
	<-done
	tu.arm()
	defer tu.Stop()

	// 40 MiB live: the target must fall from the cap to 16/40 -> 100.
	keep := make([][]byte, 40)
	for i := range keep {
		keep[i] = make([]byte, 1<<20)
	}
	if want := Percent(liveAfterGC(), tu.headroom); want != 100 {
		t.Fatalf("with 40 MiB live, Percent = %d, want 100", want)
	}
	waitFor(t, done, "100", func(p int) bool { return p == 100 })
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after the cleanup = %d, want 100", got)
	}

	runtime.KeepAlive(keep)

	// Drop it: the next collection must raise the target again. Not to
	// an exact value: the live heap left is the test binary's own, about
	// the 1 MiB at which the target reaches its cap, and moves a little
	// from one collection to the next.
	runtime.GC()
	if want := Percent(liveHeap(), tu.headroom); want <= 100 {
		t.Fatalf("with the 40 MiB gone, Percent = %d, want > 100", want)
	}
	waitFor(t, done, "above 100", func(p int) bool { return p > 100 })
	if got := gogc(); got <= 100 {
		t.Fatalf("GOGC after the cleanup = %d, want above 100", got)
	}
}

func liveAfterGC() uint64 {
	runtime.GC()
	return liveHeap()
}

// waitFor reads adjustments until one is wanted. The cleanup runs on the
// runtime's cleanup goroutine some time after the collection; the bound
// only keeps a broken loop from hanging the test.
func waitFor(t *testing.T, done <-chan int, want string, ok func(int) bool) {
	t.Helper()
	limit := time.After(10 * time.Second)
	for {
		select {
		case p := <-done:
			if ok(p) {
				return
			}
			runtime.GC() // the cleanup may have run for an earlier cycle
		case <-limit:
			t.Fatalf("no adjustment to %s after a collection", want)
		}
	}
}

func TestStopRestoresTheDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu := Start(func(string) string { return "" }, DefaultHeadroom)
	if tu == nil {
		t.Fatal("Start returned nil with GOGC unset")
	}
	if tu.Percent() < 100 {
		t.Fatalf("Percent() = %d, want >= 100", tu.Percent())
	}
	tu.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after Stop = %d, want 100", got)
	}
	runtime.GC() // a cleanup after Stop must not re-tune
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after Stop and two collections = %d, want 100", got)
	}
}
