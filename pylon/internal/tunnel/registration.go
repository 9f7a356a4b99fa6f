package tunnel

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Snapshotter is what RegistrationHandler publishes: the pylon's current
// registration and a signal that it changed.
type Snapshotter interface {
	// Registration returns a full snapshot. V and Seq are overwritten by
	// the handler; SentAtUnixMs is filled in when zero.
	Registration() protocol.Registration
	// Changed returns a channel that receives, or is closed, when the
	// snapshot changes in a way the hub should learn before the next
	// heartbeat (a model's status, say). It is called again before every
	// snapshot is read, so both a buffered notification channel and a
	// close-and-replace broadcast channel work.
	Changed() <-chan struct{}
}

// minSendGap coalesces bursts of changes: at most one snapshot per 50 ms
// per stream, so a flapping status cannot flood the hub.
const minSendGap = 50 * time.Millisecond

// RegistrationHandler returns the pylon side of the registration stream
// (protocol.RegistrationPath): one JSON line per snapshot, flushed at once,
// first on connect, then whenever src changes (at most once per 50 ms) and
// at least every interval (the heartbeat, --min-update-interval-ms; 0
// means 1 s). Seq counts from 1 on each stream. It returns when the request
// ends or, on a tunnel connection, when that connection starts draining.
func RegistrationHandler(src Snapshotter, interval time.Duration, clk clock.Clock, log *slog.Logger) http.Handler {
	if interval <= 0 {
		interval = time.Second
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &registrationHandler{src: src, interval: interval, clk: clk, log: log}
}

type registrationHandler struct {
	src      Snapshotter
	interval time.Duration
	clk      clock.Clock
	log      *slog.Logger
}

func (h *registrationHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	// A nil channel (outside a tunnel connection) never fires.
	drain, _ := ctx.Value(drainKey{}).(<-chan struct{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	rc := http.NewResponseController(w)

	var seq uint64
	for {
		// Take the change signal before the snapshot, so a change between
		// the two is never missed.
		changed := h.src.Changed()
		reg := h.src.Registration()
		seq++
		reg.V, reg.Seq = protocol.Version, seq
		last := h.clk.Now()
		if reg.SentAtUnixMs == 0 {
			reg.SentAtUnixMs = last.UnixMilli()
		}
		line, err := json.Marshal(reg)
		if err != nil {
			h.log.Error("tunnel: encoding registration failed", "err", err)
			return
		}
		if len(line) >= protocol.MaxRegistrationLineBytes {
			h.log.Error("tunnel: registration exceeds the hub's line limit; ending the stream",
				"bytes", len(line), "limit", protocol.MaxRegistrationLineBytes)
			return
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return
		}
		// Without a flush the HTTP/2 server holds about 4 KiB per stream:
		// the hub would see snapshots late (half a second and more).
		if err := rc.Flush(); err != nil {
			return
		}

		if !h.waitNext(r, changed, drain, last) {
			return
		}
	}
}

// waitNext blocks until the next snapshot is due: on a change (but no
// sooner than minSendGap after last) or after interval. It reports false
// when the stream must end.
func (h *registrationHandler) waitNext(r *http.Request, changed, drain <-chan struct{}, last time.Time) bool {
	ctx := r.Context()
	tick := h.clk.NewTimer(h.interval)
	defer tick.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-drain:
		return false
	case <-tick.C():
		return true
	case <-changed:
	}
	gap := minSendGap - h.clk.Since(last)
	if gap <= 0 {
		return true
	}
	t := h.clk.NewTimer(gap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-drain:
		return false
	case <-t.C():
		return true
	}
}
