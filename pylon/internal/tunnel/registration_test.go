package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// flushRecorder is a ResponseWriter that hands over every complete line
// when, and only when, the handler flushes.
type flushRecorder struct {
	header http.Header
	mu     sync.Mutex
	buf    bytes.Buffer
	lines  chan protocol.Registration
	bad    chan error
}

func newFlushRecorder() *flushRecorder {
	return &flushRecorder{header: http.Header{}, lines: make(chan protocol.Registration, 100), bad: make(chan error, 1)}
}

func (f *flushRecorder) Header() http.Header { return f.header }
func (f *flushRecorder) WriteHeader(int)     {}

func (f *flushRecorder) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *flushRecorder) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		line, err := f.buf.ReadBytes('\n')
		if err != nil {
			f.buf.Write(line) // an incomplete line waits for the next flush
			return
		}
		var reg protocol.Registration
		if err := json.Unmarshal(line, &reg); err != nil {
			f.bad <- err
			return
		}
		f.lines <- reg
	}
}

func serveRegistration(ctx context.Context, t *testing.T, h http.Handler) (*flushRecorder, chan struct{}) {
	t.Helper()
	w := newFlushRecorder()
	done := make(chan struct{})
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, protocol.RegistrationPath, nil)
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	return w, done
}

func TestRegistrationHandlerSendsOnConnectChangeAndInterval(t *testing.T) {
	clk := clock.NewFake(epoch)
	snap := newSnapshot("p1")
	const interval = time.Second
	h := RegistrationHandler(snap, interval, clk, nil)
	ctx, cancel := context.WithCancel(context.Background())
	w, done := serveRegistration(ctx, t, h)

	first := recv(t, w.lines, "the snapshot on connect")
	if first.Seq != 1 || first.V != protocol.Version || first.SentAtUnixMs != epoch.UnixMilli() || first.Models["m"].Status != protocol.StatusInactive {
		t.Fatalf("first line %+v", first)
	}
	if ct := w.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}

	// The heartbeat: nothing changed, one interval passed.
	clk.WaitForTimers(1)
	clk.Advance(interval - time.Millisecond)
	if len(w.lines) != 0 {
		t.Fatal("a snapshot before the interval elapsed")
	}
	clk.Advance(time.Millisecond)
	if reg := recv(t, w.lines, "the heartbeat snapshot"); reg.Seq != 2 || reg.SentAtUnixMs != epoch.Add(interval).UnixMilli() {
		t.Fatalf("heartbeat line %+v", reg)
	}

	// A change well after the last send goes out at once, with no clock
	// movement at all.
	clk.WaitForTimers(1)
	clk.Advance(100 * time.Millisecond)
	snap.setStatus(protocol.StatusActive)
	reg := recv(t, w.lines, "the snapshot after a change")
	if reg.Seq != 3 || reg.Models["m"].Status != protocol.StatusActive {
		t.Fatalf("change line %+v", reg)
	}
	sentAt := reg.SentAtUnixMs

	// A change right after a send waits out the 50 ms coalescing gap: the
	// handler arms the gap timer next to its interval timer.
	clk.WaitForTimers(1)
	snap.setStatus(protocol.StatusInactive)
	clk.WaitForTimers(2)
	clk.Advance(minSendGap - time.Millisecond)
	select {
	case reg := <-w.lines:
		t.Fatalf("a snapshot %+v inside the coalescing gap", reg)
	default:
	}
	clk.Advance(time.Millisecond)
	next := recv(t, w.lines, "the coalesced snapshot")
	if next.Seq != 4 || next.Models["m"].Status != protocol.StatusInactive {
		t.Fatalf("coalesced line %+v", next)
	}
	if gap := time.Duration(next.SentAtUnixMs-sentAt) * time.Millisecond; gap < minSendGap {
		t.Fatalf("two snapshots %v apart; want at least %v", gap, minSendGap)
	}

	cancel()
	recv(t, done, "the handler to return when the request ends")
	select {
	case err := <-w.bad:
		t.Fatalf("a line was not valid JSON: %v", err)
	default:
	}
}

func TestRegistrationHandlerEndsOnDrain(t *testing.T) {
	clk := clock.NewFake(epoch)
	drain := make(chan struct{})
	ctx := context.WithValue(context.Background(), drainKey{}, (<-chan struct{})(drain))
	w, done := serveRegistration(ctx, t, RegistrationHandler(newSnapshot("p1"), time.Second, clk, nil))
	recv(t, w.lines, "the first snapshot")
	close(drain)
	recv(t, done, "the handler to return on drain")
}

func TestRegistrationHandlerRejectsNonGET(t *testing.T) {
	rec := httptest.NewRecorder()
	RegistrationHandler(newSnapshot("p1"), time.Second, clock.NewFake(epoch), nil).
		ServeHTTP(rec, httptest.NewRequest(http.MethodPost, protocol.RegistrationPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST got %d", rec.Code)
	}
}
