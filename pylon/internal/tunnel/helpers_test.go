package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waitTimeout bounds every wait for a condition; it is a failure deadline,
// never a timing assertion.
const waitTimeout = 10 * time.Second

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// hubConn is one handshake a test hub received.
type hubConn struct {
	hs   protocol.Handshake
	ack  protocol.HandshakeAck
	conn net.Conn
	cc   *http2.ClientConn //nolint:staticcheck // SA1019: the test hub uses the same x/net client as the real one.
}

// get performs a GET over an accepted connection.
func (hc *hubConn) get(t *testing.T, path string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://pylon"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hc.cc.RoundTrip(req)
}

// testHub is a minimal hub built from pkg/protocol and x/net/http2 only
// (the pylon must not import the hub's internal package). decide answers
// the n-th handshake (from 1).
type testHub struct {
	t      *testing.T
	ln     net.Listener
	addr   string
	decide func(n int, hs protocol.Handshake) protocol.HandshakeAck
	conns  chan *hubConn

	mu    sync.Mutex
	n     int
	open  []*hubConn
	wg    sync.WaitGroup
	close sync.Once
}

func accept(protocol.Handshake) protocol.HandshakeAck {
	return protocol.HandshakeAck{V: protocol.Version, Accepted: true, HubID: "hub-test"}
}

func refuse(code string) protocol.HandshakeAck {
	return protocol.HandshakeAck{V: protocol.Version, Code: code, Reason: "test says no", HubID: "hub-test"}
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func startTestHub(t *testing.T, ln net.Listener, decide func(n int, hs protocol.Handshake) protocol.HandshakeAck) *testHub {
	t.Helper()
	h := &testHub{t: t, ln: ln, addr: ln.Addr().String(), decide: decide, conns: make(chan *hubConn, 100)}
	h.wg.Go(h.acceptLoop)
	t.Cleanup(h.stop)
	return h
}

func (h *testHub) acceptLoop() {
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.wg.Go(func() { h.handle(conn) })
	}
}

func (h *testHub) handle(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	var hs protocol.Handshake
	if err := protocol.ReadFrame(conn, &hs); err != nil {
		_ = conn.Close()
		return
	}
	h.mu.Lock()
	h.n++
	n := h.n
	h.mu.Unlock()
	ack := h.decide(n, hs)
	if err := protocol.WriteFrame(conn, ack); err != nil {
		_ = conn.Close()
		return
	}
	hc := &hubConn{hs: hs, ack: ack, conn: conn}
	if !ack.Accepted {
		_ = conn.Close()
		h.conns <- hc
		return
	}
	_ = conn.SetDeadline(time.Time{})
	//nolint:staticcheck // SA1019: the test hub uses the same x/net client as the real one.
	cc, err := (&http2.Transport{StrictMaxConcurrentStreams: true}).NewClientConn(conn)
	if err != nil {
		_ = conn.Close()
		return
	}
	hc.cc = cc
	h.mu.Lock()
	h.open = append(h.open, hc)
	h.mu.Unlock()
	h.conns <- hc
}

func (h *testHub) stop() {
	h.close.Do(func() {
		_ = h.ln.Close()
		h.wg.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, hc := range h.open {
			_ = hc.cc.Close()
		}
	})
}

// stateEvent is one OnState call.
type stateEvent struct {
	addr      string
	connected bool
}

// runningClient is a Client under test.
type runningClient struct {
	c      *Client
	states chan stateEvent
	logs   *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

// startClient runs a Client until the test ends. The hubs are stopped
// first at cleanup: a pylon draining towards a hub that never closes waits
// out x/net's 1 s GOAWAY linger, which only slows the tests down.
func startClient(t *testing.T, cfg Config, hubs ...*testHub) *runningClient {
	t.Helper()
	rc := &runningClient{states: make(chan stateEvent, 100), logs: &syncBuffer{}, done: make(chan error, 1)}
	cfg.OnState = func(addr string, connected bool) { rc.states <- stateEvent{addr, connected} }
	cfg.Log = slog.New(slog.NewTextHandler(rc.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Handshake.InferenceServerID == "" {
		cfg.Handshake = protocol.Handshake{InferenceServerID: "p1", HeartbeatMs: 1000}
	}
	rc.c = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	go func() { rc.done <- rc.c.Run(ctx) }()
	t.Cleanup(func() {
		for _, h := range hubs {
			h.stop()
		}
		cancel()
		if err := recv(t, rc.done, "Run to return"); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return rc
}

// staticResolver returns the current address list for any host.
type staticResolver struct {
	mu    sync.Mutex
	ips   []string
	calls int
}

func (r *staticResolver) set(ips ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ips = ips
}

func (r *staticResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	return append([]string(nil), r.ips...), nil
}

// snapshot is a Snapshotter with a close-and-replace change channel.
type snapshot struct {
	mu      sync.Mutex
	reg     protocol.Registration
	changed chan struct{}
}

func newSnapshot(id string) *snapshot {
	return &snapshot{
		reg: protocol.Registration{
			InferenceServerID: id, ClusterID: id,
			Models: map[string]protocol.ModelEntry{"m": {Status: protocol.StatusInactive}},
		},
		changed: make(chan struct{}),
	}
}

func (s *snapshot) Registration() protocol.Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

func (s *snapshot) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *snapshot) setStatus(st protocol.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg.Models = map[string]protocol.ModelEntry{"m": {Status: st}}
	close(s.changed)
	s.changed = make(chan struct{})
}

// pylonHandler is the pylon's tunnel handler for tests: the registration
// stream, /health and /echo.
func pylonHandler(snap Snapshotter, clk clock.Clock, extra map[string]http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(protocol.RegistrationPath, RegistrationHandler(snap, time.Hour, clk, nil))
	mux.HandleFunc(protocol.HealthPath, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "echo "+r.URL.Path)
	})
	for p, h := range extra {
		mux.HandleFunc(p, h)
	}
	return mux
}

// lineReader decodes NDJSON registrations from a stream.
type lineReader struct {
	dec *json.Decoder
}

func (lr lineReader) next(t *testing.T) protocol.Registration {
	t.Helper()
	var reg protocol.Registration
	if err := lr.dec.Decode(&reg); err != nil {
		t.Fatalf("reading registration line: %v", err)
	}
	return reg
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
