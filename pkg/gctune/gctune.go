package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultHeadroom is the garbage a tier may accumulate above its live heap
// before a collection: 64 MiB. Measured under `make bench-path` (1 KiB, 32
// clients), it cut the gateway's, hub's and pylon's CPU per request by 8 to
// 15 %; it is small beside the charts' memory limits (512 MiB and up).
const DefaultHeadroom = 64 << 20

// maxPercent bounds the GOGC the tuner sets, so that an almost empty heap
// (at start, before any traffic) does not get an absurd target; the
// runtime's own minimum heap (4 MiB at GOGC=100) scales with it.
const maxPercent = 1600

// Percent returns the GOGC that starts the next collection at live +
// headroom: never below 100 (the runtime's default, which a large live
// heap keeps) and never above 1600.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, 100), maxPercent))
}

// Tuner re-targets the collector after every collection. Its zero value is
// not usable; see Start.
type Tuner struct {
	headroom uint64
	stopped  atomic.Bool
	percent  atomic.Int64
	// adjusted, when set (tests), is called after each adjustment.
	adjusted func(percent int)
}

// Start sets the collector's target for a headroom of headroom bytes above
// the live heap and keeps it so after every collection. It returns nil,
// and changes nothing, when GOGC is set in the environment (getenv is
// os.Getenv in a binary) or headroom is 0.
func Start(getenv func(string) string, headroom uint64) *Tuner {
	if getenv("GOGC") != "" || headroom == 0 {
		return nil
	}
	t := &Tuner{headroom: headroom}
	t.adjust()
	t.arm()
	return t
}

// Percent is the GOGC the tuner set last.
func (t *Tuner) Percent() int { return int(t.percent.Load()) }

// Stop ends the adjustments and restores GOGC=100; the target set last
// stays until then. Stop of a nil Tuner does nothing.
func (t *Tuner) Stop() {
	if t == nil || t.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(100)
}

// sentinel is allocated for each collection cycle; its cleanup runs once a
// collection found it unreachable, that is after every cycle. It is not
// tiny (the runtime batches objects under 16 bytes without pointers, and
// their cleanups may never run).
type sentinel struct{ _ [32]byte }

func (t *Tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *Tuner) {
		if t.stopped.Load() {
			return
		}
		// Armed before adjusting, so that whoever sees the adjustment
		// (the tests' hook) and then collects finds the next sentinel
		// in that collection, not allocated after it.
		t.arm()
		t.adjust()
	}, t)
}

// liveHeap reads the heap that the last collection marked live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (t *Tuner) adjust() {
	p := Percent(liveHeap(), t.headroom)
	if int64(p) != t.percent.Load() {
		t.percent.Store(int64(p))
		if !t.stopped.Load() {
			debug.SetGCPercent(p)
		}
	}
	if t.adjusted != nil {
		t.adjusted(p)
	}
}
