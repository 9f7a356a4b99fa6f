package tunnel

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultHealthInterval   = time.Second
	DefaultHealthTimeout    = 2 * time.Second
	DefaultMinIdleTimeout   = 60 * time.Second
	DefaultMaxIdleTimeout   = 300 * time.Second
	// DefaultPingInterval and DefaultPingTimeout bound how long a
	// blackholed connection (no FIN, no RST) survives: with defaults the
	// HTTP/2 layer closes it about 10 s after the last frame arrived.
	// Without PINGs neither side ever notices such a connection.
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 5 * time.Second
)

// ErrSessionClosed is returned by a session's RoundTripper once the session
// has ended; the proxy should treat the backend as gone and pick another.
var ErrSessionClosed = errors.New("tunnel: session closed")

// Backend identifies the pylon behind one session, as fixed by its handshake.
type Backend struct {
	// ID is the pylon's inference_server_id, unique among live sessions.
	ID string
	// ClusterID is the capacity domain (the handshake's cluster_id, or ID
	// when that was empty).
	ClusterID string
	// URL is the engine URL the pylon reported, for x-inference-server-url.
	URL string
	// Region is the pylon's --region label ("" when unset).
	Region string
}

// Handler receives what sessions learn. It is declared here, by its caller;
// the hub's main wires routing state behind it.
//
// Calls for one session are serialized: Registered is called from the
// session's registration reader, and Disconnected is called once, after the
// session's last Registered call has returned. Calls for different sessions
// run concurrently. A later session with the same Backend.ID never sees its
// first Registered call before the previous session's Disconnected returned.
type Handler interface {
	// Registered is called for every registration snapshot line. rtt is the
	// latest /health round trip measured over the tunnel and is meaningful
	// only when rttKnown; a backend without a known RTT must not be routed
	// to (docs/design/routing-state.md#registration). reg is freshly decoded
	// and may be retained.
	Registered(b Backend, reg *protocol.Registration, rtt time.Duration, rttKnown bool)
	// Disconnected is called exactly once when a session ends, whatever the
	// reason: every route of b must go.
	Disconnected(b Backend)
}

// Config configures a Server. Zero durations take the Default* values.
type Config struct {
	// Listener accepts pylon connections. Run closes it when it returns.
	Listener net.Listener
	// Token is the shared registration token pylons must present. Empty
	// (with TokenSource nil) means no authentication.
	Token string
	// TokenSource, when set, is used instead of Token and is called for
	// every handshake, so a rotated token file takes effect without a
	// restart. An error refuses the handshake with CodeUnauthorized.
	TokenSource func() (string, error)
	// HubID names this hub replica in handshake acks.
	HubID string
	// Clock drives the health prober, probe timeouts and the registration
	// idle timeout. Nil means clock.Real.
	Clock clock.Clock
	// Log receives session lifecycle events. Nil discards them.
	Log *slog.Logger
	// TLS, when set, makes the listener speak TLS (the pylon is the TLS
	// client). Nil means plaintext, meant for loopback and trusted networks.
	TLS *tls.Config
	// HandshakeTimeout bounds the TLS handshake and the handshake frames.
	HandshakeTimeout time.Duration
	// HealthInterval is the period of the /health RTT probe.
	HealthInterval time.Duration
	// HealthTimeout bounds one /health probe.
	HealthTimeout time.Duration
	// MinIdleTimeout and MaxIdleTimeout clamp the registration idle timeout,
	// 3 × the pylon's heartbeat (docs/protocol.md#5-timeouts-and-backoff). A
	// negative value in either disables the idle timeout; the hub's flags
	// map their 0 to it, the value upstream Stargate uses for "disabled".
	MinIdleTimeout time.Duration
	MaxIdleTimeout time.Duration
	// PingInterval is how long the HTTP/2 connection may go without any
	// frame before the hub sends a PING; PingTimeout is how long it then
	// waits for the answer before closing the connection. They run on the
	// wall clock inside x/net. A negative PingInterval disables pings.
	PingInterval time.Duration
	PingTimeout  time.Duration
}

// SessionInfo describes one live session, for /debug/state.
type SessionInfo struct {
	ID             string        `json:"inference_server_id"`
	ClusterID      string        `json:"cluster_id"`
	URL            string        `json:"inference_server_url,omitempty"`
	RemoteAddr     string        `json:"remote_addr"`
	ConnectedSince time.Time     `json:"connected_since"`
	LastRTT        time.Duration `json:"last_rtt_ns"`
	RTTKnown       bool          `json:"rtt_known"`
	// StreamsActive counts open HTTP/2 streams, the registration stream
	// included.
	StreamsActive int `json:"streams_active"`
}

// Server accepts pylon connections and keeps one session per connected
// inference server. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	h        Handler
	log      *slog.Logger
	clk      clock.Clock
	h2       h2Client
	draining atomic.Bool

	mu       sync.Mutex
	sessions map[string]*session // by inference_server_id, from accepted handshake to end
}

// New returns a Server that reports to h. Call Run to start accepting.
func New(cfg Config, h Handler) *Server {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setDefault(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	setDefault(&cfg.HealthInterval, DefaultHealthInterval)
	setDefault(&cfg.HealthTimeout, DefaultHealthTimeout)
	setDefault(&cfg.MinIdleTimeout, DefaultMinIdleTimeout)
	setDefault(&cfg.MaxIdleTimeout, DefaultMaxIdleTimeout)
	setDefault(&cfg.PingInterval, DefaultPingInterval)
	setDefault(&cfg.PingTimeout, DefaultPingTimeout)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		cfg:      cfg,
		h:        h,
		log:      cfg.Log,
		clk:      cfg.Clock,
		h2:       newH2Client(cfg.PingInterval, cfg.PingTimeout),
		sessions: make(map[string]*session),
	}
}

// Run accepts pylon connections until ctx is done, then closes the
// listener and every session, waits for all of their goroutines, and
// returns nil. Closing a session fails its in-flight streams, so drain the
// proxy before cancelling ctx. Run returns an error at once if the
// configuration is unusable, and after closing every session if the
// listener fails for good.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Listener == nil {
		return errors.New("tunnel: Config.Listener is nil")
	}
	if s.h == nil {
		return errors.New("tunnel: Handler is nil")
	}
	ctx, cancel := context.WithCancel(ctx)
	ln := s.cfg.Listener
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	var wg sync.WaitGroup
	defer func() {
		// Cancel first: sessions end on ctx, and a listener failure must
		// not leave them running while Run waits for them.
		stop()
		cancel()
		_ = ln.Close()
		wg.Wait()
	}()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("tunnel: accepting pylon connections: %w", err)
			}
			// Transient accept failures (EMFILE and the like) must not
			// spin; back off as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("tunnel: accept failed; retrying", "err", err, "retry_in", backoff)
			if !clock.Sleep(s.clk, ctx.Done(), backoff) {
				return nil
			}
			continue
		}
		backoff = 0
		wg.Go(func() { s.serveConn(ctx, conn) })
	}
}

// Drain makes every later handshake answer CodeDraining, so pylons go to
// the other hubs while this one finishes what it has. Live sessions stay.
func (s *Server) Drain() { s.draining.Store(true) }

// RoundTripper returns the HTTP/2 connection of the live session for
// backendID, for the proxy. The request's URL host becomes :authority and
// the pylon's r.Host; any host works. Ask again for each request: after the
// session ends the returned value fails with ErrSessionClosed, and a
// reconnected pylon is a new session.
func (s *Server) RoundTripper(backendID string) (http.RoundTripper, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[backendID]
	if !ok || sess.cc == nil || sess.ctx.Err() != nil {
		return nil, false
	}
	return sessionRoundTripper{sess}, true
}

// Sessions returns the live sessions sorted by ID, for /debug/state.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	list := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		if sess.cc != nil {
			list = append(list, sess)
		}
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(list))
	for _, sess := range list {
		out = append(out, sess.info())
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// serveConn runs one accepted connection: handshake, then the session.
func (s *Server) serveConn(ctx context.Context, raw net.Conn) {
	remote := raw.RemoteAddr().String()
	conn := raw
	if s.cfg.TLS != nil {
		conn = tls.Server(raw, s.cfg.TLS)
	}
	sess := s.handshake(ctx, conn, remote)
	if sess == nil {
		_ = conn.Close()
		return
	}
	cc, err := s.h2.newClientConn(conn)
	if err != nil {
		s.log.Warn("tunnel: starting HTTP/2 on an accepted connection failed",
			"inference_server_id", sess.b.ID, "remote_addr", remote, "err", err)
		s.remove(sess)
		_ = conn.Close()
		return
	}
	s.mu.Lock()
	sess.cc = cc
	s.mu.Unlock()
	s.log.Info("tunnel: session connected", "inference_server_id", sess.b.ID,
		"cluster_id", sess.b.ClusterID, "inference_server_url", sess.b.URL,
		"remote_addr", remote, "idle_timeout", sess.idle)
	sess.run(ctx)
}

// aLongTimeAgo is a deadline in the past, to abort blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// handshake reads the pylon's Handshake, admits or refuses it, and writes
// the ack. It returns the reserved session when accepted, else nil.
func (s *Server) handshake(ctx context.Context, conn net.Conn, remote string) *session {
	// Net deadlines are absolute wall-clock times enforced by the runtime
	// poller, so they come from the time package, not the injected clock.
	_ = conn.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	if tc, ok := conn.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			s.log.Warn("tunnel: TLS handshake failed", "remote_addr", remote, "err", err)
			return nil
		}
	}
	// Read straight from the conn: a bufio.Reader here could swallow the
	// HTTP/2 bytes that follow the frame.
	var hs protocol.Handshake
	if err := protocol.ReadFrame(conn, &hs); err != nil {
		s.log.Warn("tunnel: reading handshake failed", "remote_addr", remote, "err", err)
		return nil
	}
	token := hs.AuthToken
	hs.AuthToken = "" // never keep or log the secret
	sess, code, reason := s.admit(ctx, &hs, token, remote)
	ack := protocol.HandshakeAck{V: protocol.Version, Accepted: code == protocol.CodeOK, Code: code, Reason: reason, HubID: s.cfg.HubID}
	if err := protocol.WriteFrame(conn, ack); err != nil {
		s.log.Warn("tunnel: writing handshake ack failed", "inference_server_id", hs.InferenceServerID, "remote_addr", remote, "err", err)
		if sess != nil {
			s.remove(sess)
		}
		return nil
	}
	if sess == nil {
		return nil
	}
	if !stop() || conn.SetDeadline(time.Time{}) != nil {
		s.remove(sess) // ctx ended during the handshake
		return nil
	}
	return sess
}

// admit decides a handshake. On acceptance it reserves the id in the
// session map before the ack goes out, so two concurrent handshakes with
// one id cannot both be accepted.
func (s *Server) admit(ctx context.Context, hs *protocol.Handshake, token, remote string) (*session, string, string) {
	refuse := func(level slog.Level, msg, code, reason string) (*session, string, string) {
		s.log.Log(ctx, level, msg, "code", code, "reason", reason,
			"inference_server_id", hs.InferenceServerID, "remote_addr", remote)
		return nil, code, reason
	}
	if s.draining.Load() {
		return refuse(slog.LevelInfo, "tunnel: handshake refused: hub is draining", protocol.CodeDraining, "hub is draining")
	}
	if code, err := hs.Validate(); code != protocol.CodeOK {
		return refuse(slog.LevelWarn, "tunnel: handshake refused: invalid handshake", code, err.Error())
	}
	if ok, err := s.checkToken(token); !ok {
		reason := "invalid auth token"
		if err != nil {
			// The hub's own token could not be read: say so on the hub, but
			// tell the pylon no more than for a wrong token.
			s.log.Error("tunnel: reading the hub's registration token failed", "err", err)
		}
		return refuse(slog.LevelWarn, "tunnel: handshake refused: invalid auth token; check the pylon's --auth-token",
			protocol.CodeUnauthorized, reason)
	}
	sess := newSession(ctx, s, hs, remote)
	s.mu.Lock()
	_, dup := s.sessions[hs.InferenceServerID]
	if !dup {
		s.sessions[hs.InferenceServerID] = sess
	}
	s.mu.Unlock()
	if dup {
		sess.cancel(errDuplicate)
		return refuse(slog.LevelWarn, "tunnel: handshake refused: inference_server_id already has a live session",
			protocol.CodeDuplicate, "inference_server_id already connected to this hub")
	}
	return sess, protocol.CodeOK, ""
}

// checkToken reports whether token is acceptable. Both sides are hashed
// first so the comparison is constant-time in the length too.
func (s *Server) checkToken(token string) (bool, error) {
	want := s.cfg.Token
	if s.cfg.TokenSource != nil {
		var err error
		if want, err = s.cfg.TokenSource(); err != nil {
			return false, err
		}
	}
	if want == "" {
		return true, nil
	}
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1, nil
}

// remove drops sess from the session map if it is still the entry for its
// id.
func (s *Server) remove(sess *session) {
	sess.cancel(errRemoved)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.b.ID] == sess {
		delete(s.sessions, sess.b.ID)
	}
}

// sessionRoundTripper is what RoundTripper hands out: the session's
// ClientConn, refusing with a typed error once the session has ended.
type sessionRoundTripper struct{ s *session }

func (rt sessionRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.s.ctx.Err() != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTrip must close the body, even on error
		}
		return nil, fmt.Errorf("tunnel to %q: %w", rt.s.b.ID, ErrSessionClosed)
	}
	return rt.s.cc.RoundTrip(req)
}
