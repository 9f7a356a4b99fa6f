package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A burst of ticks yields one call, DefaultDebounce after its last tick;
// a tick after the call starts a new period. Time is synctest's.
func TestDebounce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		ticks := make(chan struct{})
		var calls atomic.Int64
		stopped := make(chan struct{})
		go func() {
			debounce(ctx, clock.Real{}, 500*time.Millisecond, ticks, func() { calls.Add(1) })
			close(stopped)
		}()
		expect := func(when string, want int64) {
			t.Helper()
			synctest.Wait()
			if got := calls.Load(); got != want {
				t.Fatalf("%s: %d calls, want %d", when, got, want)
			}
		}
		ticks <- struct{}{}
		time.Sleep(400 * time.Millisecond)
		expect("400 ms after the first tick", 0)
		ticks <- struct{}{} // restarts the quiet period
		time.Sleep(400 * time.Millisecond)
		expect("400 ms after the second tick", 0)
		time.Sleep(100 * time.Millisecond)
		expect("500 ms after the last tick", 1)
		time.Sleep(5 * time.Second)
		expect("long after, with no tick", 1)
		ticks <- struct{}{}
		time.Sleep(500 * time.Millisecond)
		expect("500 ms after a later tick", 2)
		ticks <- struct{}{}
		cancel() // a pending call is dropped with the context
		<-stopped
		time.Sleep(time.Second)
		expect("after cancel", 2)
	})
}

// Only the file's own name and the ConfigMap writer's ".." entries count,
// and a bare Chmod never does.
func TestRelevant(t *testing.T) {
	t.Parallel()
	w := &Watcher{base: "lb-config.json"}
	for _, c := range []struct {
		name string
		op   fsnotify.Op
		want bool
	}{
		{"/cfg/lb-config.json", fsnotify.Write, true},
		{"/cfg/lb-config.json", fsnotify.Create, true},
		{"/cfg/lb-config.json", fsnotify.Remove, true},
		{"/cfg/lb-config.json", fsnotify.Rename, true},
		{"/cfg/lb-config.json", fsnotify.Chmod, false},
		{"/cfg/lb-config.json", fsnotify.Write | fsnotify.Chmod, true},
		{"/cfg/..data", fsnotify.Create, true},
		{"/cfg/..2026_01_02_03_04_05.123", fsnotify.Remove, true},
		{"/cfg/.lb-config.json.swp", fsnotify.Write, false},
		{"/cfg/other.json", fsnotify.Create, false},
	} {
		if got := w.relevant(fsnotify.Event{Name: c.name, Op: c.op}); got != c.want {
			t.Errorf("%s %v: relevant = %v, want %v", c.name, c.op, got, c.want)
		}
	}
}

// watched runs a Watcher on path with a short debounce and returns a
// channel that receives one value per call.
func watched(t *testing.T, path string) <-chan struct{} {
	t.Helper()
	calls := make(chan struct{}, 16)
	w, err := New(Config{Path: path, Debounce: 20 * time.Millisecond, OnChange: func() { calls <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return calls
}

// called waits for a call; fsnotify's events are real, so this polls for
// an outcome under a failure deadline rather than timing anything.
func called(t *testing.T, calls <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatalf("no callback after %s", what)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// An in-place write and an editor's write-temp-then-rename both reach the
// callback, and the watch keeps working after the rename replaced the
// file's inode.
func TestWatchWriteAndRename(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lb-config.json")
	write(t, path, `{}`)
	calls := watched(t, path)

	write(t, path, `{"default":"random"}`)
	called(t, calls, "an in-place write")
	for i, content := range []string{`{"default":"round-robin"}`, `{"default":"pulsar"}`} {
		tmp := filepath.Join(dir, ".lb-config.json.tmp")
		write(t, tmp, content)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		called(t, calls, "rename over the file #"+string(rune('1'+i)))
	}
}

// The Kubernetes ConfigMap layout: the file is a symlink through ..data,
// and an update renames a new ..data symlink over the old one.
func TestWatchConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	publish := func(stamp, content string) {
		t.Helper()
		ts := filepath.Join(dir, "..2026_"+stamp)
		if err := os.Mkdir(ts, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(ts, "lb-config.json"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("01", `{}`)
	path := filepath.Join(dir, "lb-config.json")
	if err := os.Symlink(filepath.Join("..data", "lb-config.json"), path); err != nil {
		t.Fatal(err)
	}
	calls := watched(t, path)
	for i, stamp := range []string{"02", "03"} {
		publish(stamp, `{"default":"random"}`)
		if err := os.RemoveAll(filepath.Join(dir, "..2026_"+[]string{"01", "02"}[i])); err != nil {
			t.Fatal(err)
		}
		called(t, calls, "the ..data swap to "+stamp)
		b, err := os.ReadFile(path)
		if err != nil || string(b) != `{"default":"random"}` {
			t.Fatalf("through the symlink: %q, %v", b, err)
		}
	}
}

// A missing directory fails New instead of watching nothing.
func TestNewNeedsTheDirectory(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Path: filepath.Join(t.TempDir(), "missing", "lb-config.json"), OnChange: func() {}})
	if err == nil {
		t.Fatal("New watched a directory that does not exist")
	}
}
