package stackgrow

import (
	"runtime"
	"sync"
	"testing"
)

// TestFramesStayOnTheStack: were a frame to escape, every call would
// allocate it on the heap instead of growing the stack once.
func TestFramesStayOnTheStack(t *testing.T) {
	for name, grow := range map[string]func(){"To8KiB": To8KiB, "To16KiB": To16KiB} {
		if n := testing.AllocsPerRun(100, grow); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

// TestGrowsToTheSize: a new goroutine that calls the function ends with a
// stack of the size it names, not smaller (the frame would not grow it)
// and not the next size up (the frame would be too large for the frames
// above it).
func TestGrowsToTheSize(t *testing.T) {
	for _, c := range []struct {
		name string
		grow func()
		size float64
	}{{"To8KiB", To8KiB, 8 << 10}, {"To16KiB", To16KiB, 16 << 10}} {
		per := stackPerGoroutine(c.grow)
		if per < c.size*0.75 || per >= c.size*1.5 {
			t.Errorf("%s: %.0f bytes of stack per goroutine, want %.0f", c.name, per, c.size)
		}
	}
}

// stackPerGoroutine is the stack memory each of many new goroutines holds
// after calling grow. A goroutine's first, smaller stack goes back to the
// runtime's pools when it grows, and a later goroutine may start on it,
// so the figure is near the final size, a little under or over.
func stackPerGoroutine(grow func()) float64 {
	const n = 512
	var ready sync.WaitGroup
	release := make(chan struct{})
	var before, after runtime.MemStats
	// Two collections return the stacks of earlier goroutines to the heap,
	// so new ones are not carved out of spans counted before.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		ready.Add(1)
		go func() {
			grow()
			ready.Done()
			<-release
		}()
	}
	ready.Wait()
	runtime.ReadMemStats(&after)
	close(release)
	return (float64(after.StackInuse) - float64(before.StackInuse)) / n
}

// BenchmarkGrown is what a call costs when the stack is already that
// large (the benchmark's goroutine grows it on the first call): clearing
// the frame.
func BenchmarkGrown(b *testing.B) {
	b.Run("To8KiB", func(b *testing.B) {
		for b.Loop() {
			To8KiB()
		}
	})
	b.Run("To16KiB", func(b *testing.B) {
		for b.Loop() {
			To16KiB()
		}
	})
}
