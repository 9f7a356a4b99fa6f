package filewatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/stargate-router/stargate/pkg/clock"
)

// DefaultDebounce is the quiet period after the last event before the
// callback runs: long enough to cover an editor's write-rename-chmod burst
// and a ConfigMap writer's several renames, short enough that an operator
// sees the change at once.
const DefaultDebounce = 500 * time.Millisecond

// Config configures a Watcher.
type Config struct {
	// Path is the watched file; its directory must exist.
	Path string
	// Debounce is the quiet period after the last relevant event before
	// OnChange runs; 0 means DefaultDebounce.
	Debounce time.Duration
	// OnChange is called from Run's goroutine once per settled burst of
	// events; Run waits for it, so calls never overlap.
	OnChange func()
	// Clock times the debounce; nil is the wall clock.
	Clock clock.Clock
	// Log reports watch errors; nil discards.
	Log *slog.Logger
}

// Watcher watches one file's directory. Build it with New, then Run it.
type Watcher struct {
	cfg  Config
	dir  string
	base string
	fs   *fsnotify.Watcher
}

// New starts watching cfg.Path's directory; an error (no such directory,
// no inotify instances left) is returned at once, so a hub that was asked
// to watch fails its start rather than silently not watching.
func New(cfg Config) (*Watcher, error) {
	if cfg.Path == "" || cfg.OnChange == nil {
		return nil, errors.New("filewatch: Path and OnChange are required")
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", cfg.Path, err)
	}
	dir := filepath.Dir(cfg.Path)
	if err := fw.Add(dir); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("watching directory %s of %s: %w", dir, cfg.Path, err)
	}
	return &Watcher{cfg: cfg, dir: dir, base: filepath.Base(cfg.Path), fs: fw}, nil
}

// Run delivers settled changes to OnChange until ctx ends or the watch
// breaks, then releases the watch. It returns nil when ctx ended.
func (w *Watcher) Run(ctx context.Context) error {
	defer func() { _ = w.fs.Close() }()
	relevant := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- w.forward(ctx, relevant) }()
	debounce(ctx, w.cfg.Clock, w.cfg.Debounce, relevant, w.cfg.OnChange)
	// debounce returns only when ctx ended or relevant was closed, and
	// forward closes relevant when the watch broke.
	_ = w.fs.Close()
	return <-done
}

// forward turns fsnotify's events into ticks on relevant (coalesced: one
// pending tick is enough) and closes it when it stops.
func (w *Watcher) forward(ctx context.Context, relevant chan<- struct{}) error {
	defer close(relevant)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fs.Events:
			if !ok {
				return errors.New("filewatch: the event stream closed")
			}
			if !w.relevant(ev) {
				continue
			}
			select {
			case relevant <- struct{}{}:
			default:
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return errors.New("filewatch: the event stream closed")
			}
			// An overflow loses events, not the watch: treat it as a
			// change so the callback looks at the file again.
			w.cfg.Log.Warn("file watch error", "dir", w.dir, "err", err)
			select {
			case relevant <- struct{}{}:
			default:
			}
		}
	}
}

// relevant reports whether ev may have changed the watched file: an event
// on its own name or on a ".."-prefixed entry (a ConfigMap writer's ..data
// and timestamped directories). Chmod alone changes no content.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Base(ev.Name)
	return name == w.base || strings.HasPrefix(name, "..")
}

// debounce calls fire once ticks have stopped for d: each tick restarts the
// quiet period, so a burst of events yields one call after its last event.
// It returns when ctx ends or ticks is closed; a pending call is dropped
// then, since nothing is left to act on it.
func debounce(ctx context.Context, clk clock.Clock, d time.Duration, ticks <-chan struct{}, fire func()) {
	var timer clock.Timer
	var fired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ticks:
			if !ok {
				return
			}
			// A fresh timer rather than Reset: a timer that fired while
			// this tick was being taken may hold a stale value in its
			// channel, which must not end the new quiet period early.
			if timer != nil {
				timer.Stop()
			}
			timer = clk.NewTimer(d)
			fired = timer.C()
		case <-fired:
			fired = nil
			fire()
		}
	}
}
