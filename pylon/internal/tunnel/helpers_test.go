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

// syncBuffer is a goroutine-safe log sink that tests can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wait blocks until the log holds every one of subs: the code under test
// logs the event the test waits for, so the write itself is the signal.
func (b *syncBuffer) wait(t *testing.T, what string, subs ...string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		b.mu.Lock()
		ok, ch := contains(b.buf.String(), subs...), b.changed
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; log:\n%s", what, b.String())
		}
	}
}

// tapConn is the test hub's end of an accepted tunnel. It follows the
// HTTP/2 frames the pylon sends (9-byte headers, payloads skipped) to
// signal a GOAWAY, and signals when the pylon's side is closed, so tests
// wait for those events instead of polling.
type tapConn struct {
	net.Conn
	goaway, closed chan struct{}
	goawayOnce     sync.Once
	closeOnce      sync.Once

	hdr  [9]byte
	have int // bytes of hdr read
	skip int // payload bytes of the current frame still to pass
}

func newTapConn(c net.Conn) *tapConn {
	return &tapConn{Conn: c, goaway: make(chan struct{}), closed: make(chan struct{})}
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.follow(p[:n])
	if err != nil {
		c.closeOnce.Do(func() { close(c.closed) })
	}
	return n, err
}

// follow advances the frame parser over b.
func (c *tapConn) follow(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.have:], b)
		c.have += k
		b = b[k:]
		if c.have < len(c.hdr) {
			return
		}
		c.have = 0
		c.skip = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
		if http2.FrameType(c.hdr[3]) == http2.FrameGoAway {
			c.goawayOnce.Do(func() { close(c.goaway) })
		}
	}
}

// hubConn is one handshake a test hub received.
type hubConn struct {
	hs   protocol.Handshake
	ack  protocol.HandshakeAck
	conn *tapConn
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
	listed chan struct{} // signalled (coalesced) when an accepted connection is listed

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
	h := &testHub{t: t, ln: ln, addr: ln.Addr().String(), decide: decide, conns: make(chan *hubConn, 100), listed: make(chan struct{}, 1)}
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
	hc := &hubConn{hs: hs, ack: ack, conn: newTapConn(conn)}
	if !ack.Accepted {
		_ = conn.Close()
		h.conns <- hc
		return
	}
	_ = conn.SetDeadline(time.Time{})
	//nolint:staticcheck // SA1019: the test hub uses the same x/net client as the real one.
	cc, err := (&http2.Transport{StrictMaxConcurrentStreams: true}).NewClientConn(hc.conn)
	if err != nil {
		_ = conn.Close()
		return
	}
	hc.cc = cc
	h.mu.Lock()
	h.open = append(h.open, hc)
	h.mu.Unlock()
	select {
	case h.listed <- struct{}{}:
	default:
	}
	h.conns <- hc
}

// openConns is how many accepted connections the hub holds.
func (h *testHub) openConns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open)
}

// dropAll closes every accepted connection at once, as a hub restart does,
// and keeps accepting.
func (h *testHub) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hc := range h.open {
		_ = hc.cc.Close()
	}
	h.open = nil
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
	rc := &runningClient{states: make(chan stateEvent, 100), logs: newSyncBuffer(), done: make(chan error, 1)}
	onState := cfg.OnState
	cfg.OnState = func(addr string, connected bool) {
		if onState != nil {
			onState(addr, connected)
		}
		rc.states <- stateEvent{addr, connected}
	}
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
