package tunnel

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
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

// eventually polls cond, an observable condition, every millisecond until
// it holds; waitTimeout is only the failure deadline. The conditions it
// serves (a lock free, a timer armed, a session gone) have no event to wait
// on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-poll.C:
		}
	}
}

// registeredCall is one Handler.Registered call.
type registeredCall struct {
	b        Backend
	reg      *protocol.Registration
	rtt      time.Duration
	rttKnown bool
}

// recorder is a Handler that records every call.
type recorder struct {
	registered   chan registeredCall
	disconnected chan Backend

	mu    sync.Mutex
	nDisc map[string]int
}

var _ Handler = (*recorder)(nil)

func newRecorder() *recorder {
	return &recorder{
		registered:   make(chan registeredCall, 1000),
		disconnected: make(chan Backend, 100),
		nDisc:        map[string]int{},
	}
}

func (r *recorder) Registered(b Backend, reg *protocol.Registration, rtt time.Duration, known bool) {
	r.registered <- registeredCall{b, reg, rtt, known}
}

func (r *recorder) Disconnected(b Backend) {
	r.mu.Lock()
	r.nDisc[b.ID]++
	r.mu.Unlock()
	r.disconnected <- b
}

func (r *recorder) disconnects(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nDisc[id]
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

// hub is a running Server under test.
type hub struct {
	srv  *Server
	addr string
	rec  *recorder
	logs *syncBuffer
	stop func() error // cancels Run and returns its result

	runMayFail bool // the test checks Run's error itself
}

func startHub(t *testing.T, cfg Config) *hub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.Listener = ln
	cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.HubID == "" {
		cfg.HubID = "hub-test"
	}
	rec := newRecorder()
	srv := New(cfg, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	h := &hub{srv: srv, addr: ln.Addr().String(), rec: rec, logs: logs, stop: stop}
	t.Cleanup(func() {
		if err := stop(); err != nil && !h.runMayFail {
			t.Errorf("Run returned %v", err)
		}
	})
	return h
}

// testPylon is a minimal pylon built from pkg/protocol and x/net/http2 only
// (the hub must not import the pylon's internal package).
type testPylon struct {
	t    *testing.T
	conn net.Conn
	ack  protocol.HandshakeAck
	done chan struct{} // closed when ServeConn returns

	regs      chan protocol.Registration // lines for the registration stream
	rawRegs   chan string                // raw lines for the registration stream, written as given
	regEnd    chan struct{}              // close to finish the registration stream
	regClosed chan struct{}              // closed when the registration handler returns
	health    chan struct{}              // receives on every /health
}

func handshake(id string) protocol.Handshake {
	return protocol.Handshake{V: protocol.Version, InferenceServerID: id, InferenceServerURL: "http://engine-" + id + ":8000", HeartbeatMs: 1000}
}

func registration(id string, seq uint64) protocol.Registration {
	return protocol.Registration{
		V: protocol.Version, Seq: seq, InferenceServerID: id,
		Models: map[string]protocol.ModelEntry{"m": {Status: protocol.StatusActive, Stats: &protocol.ModelStats{}}},
	}
}

// dialPylon connects, sends hs and reads the ack. When accepted it serves
// HTTP/2 with the pylon's standard routes plus extra.
func dialPylon(t *testing.T, addr string, hs protocol.Handshake, tlsCfg *tls.Config, extra map[string]http.HandlerFunc) *testPylon {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		conn = tls.Client(conn, tlsCfg)
	}
	p := &testPylon{
		t: t, conn: conn, done: make(chan struct{}),
		regs: make(chan protocol.Registration, 100), rawRegs: make(chan string, 100), regEnd: make(chan struct{}),
		regClosed: make(chan struct{}), health: make(chan struct{}, 1000),
	}
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	if err := protocol.WriteFrame(conn, hs); err != nil {
		t.Fatalf("writing handshake: %v", err)
	}
	if err := protocol.ReadFrame(conn, &p.ack); err != nil {
		t.Fatalf("reading ack: %v", err)
	}
	_ = conn.SetDeadline(time.Time{})
	if !p.ack.Accepted {
		close(p.done)
		close(p.regClosed)
		_ = conn.Close()
		return p
	}
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.RegistrationPath, p.serveRegistration)
	if _, ok := extra[protocol.HealthPath]; !ok {
		mux.HandleFunc(protocol.HealthPath, func(w http.ResponseWriter, r *http.Request) {
			p.health <- struct{}{}
			_, _ = io.WriteString(w, "ok")
		})
	}
	for path, h := range extra {
		mux.HandleFunc(path, h)
	}
	go func() {
		defer close(p.done)
		//nolint:staticcheck // SA1019: the test pylon uses the same x/net server as the real one.
		(&http2.Server{MaxConcurrentStreams: 1000}).ServeConn(conn, &http2.ServeConnOpts{Handler: mux})
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *testPylon) serveRegistration(w http.ResponseWriter, r *http.Request) {
	defer close(p.regClosed)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case reg := <-p.regs:
			if err := enc.Encode(reg); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case line := <-p.rawRegs:
			if _, err := io.WriteString(w, line+"\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case <-p.regEnd:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// kill closes the pylon's TCP connection, as a crashed pylon would, and
// waits for its HTTP/2 server to stop.
func (p *testPylon) kill() {
	_ = p.conn.Close()
	<-p.done
}

// selfSigned returns a server TLS config for 127.0.0.1 and a client config
// that trusts it.
func selfSigned(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hub"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"hub.test"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}
	client = &tls.Config{RootCAs: pool, ServerName: "hub.test", MinVersion: tls.VersionTLS13}
	return server, client
}

// roundTrip sends req over the tunnel to id.
func (h *hub) roundTrip(t *testing.T, id string, req *http.Request) (*http.Response, error) {
	t.Helper()
	rt, ok := h.srv.RoundTripper(id)
	if !ok {
		t.Fatalf("RoundTripper(%q): no live session", id)
	}
	return rt.RoundTrip(req)
}

func newRequest(ctx context.Context, t *testing.T, method, path, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://pylon"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// waitProberAsleep waits until id's prober is between probes, blocked on
// its HealthInterval sleep, so the next Advance is measured from a known
// point. It assumes the idle timeout is disabled, leaving the prober's
// sleep as the only armed timer.
func (h *hub) waitProberAsleep(t *testing.T, clk *clock.Fake, id string) {
	t.Helper()
	eventually(t, "the prober to sleep", func() bool {
		h.srv.mu.Lock()
		sess := h.srv.sessions[id]
		h.srv.mu.Unlock()
		if sess == nil || !sess.probeMu.TryLock() {
			return false
		}
		sess.probeMu.Unlock()
		return clk.Timers() == 1
	})
}
