package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// refusedError is a handshake the hub answered with Accepted false.
type refusedError struct {
	ack protocol.HandshakeAck
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("hub %s refused the handshake: %s (%s)", e.ack.HubID, e.ack.Code, e.ack.Reason)
}

// errConnClosed means an established tunnel ended: the hub closed it, the
// network dropped it, or a ping timed out.
var errConnClosed = errors.New("tunnel connection closed")

// drainKey is the context key under which a connection's request contexts
// carry a channel that is closed when the connection starts draining, so
// RegistrationHandler can end the registration stream (which would
// otherwise hold the drain open until DrainTimeout).
type drainKey struct{}

// aLongTimeAgo is a deadline in the past, to abort blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// worker keeps one hub address connected.
type worker struct {
	c      *Client
	addr   string // dial address, host:port
	target target
	cancel context.CancelFunc

	connected bool // guarded by c.mu
}

// run connects, serves, and reconnects until ctx is done, waiting between
// attempts as backoff says and starting its schedule over after a
// connection that lived longer than StableAfter
// (docs/pylon.md#hubs-and-the-tunnel).
func (w *worker) run(ctx context.Context) {
	var b backoff
	for {
		lived, err := w.connectAndServe(ctx)
		if ctx.Err() != nil {
			return
		}
		if lived > StableAfter {
			b.reset()
		}
		wait := b.next(w.c.jitter())
		var refused *refusedError
		if !errors.As(err, &refused) { // refusals were logged with their code already
			w.c.log.Warn("tunnel: connection to hub ended; reconnecting", "hub", w.addr, "err", err,
				"connected_for", lived, "retry_in", wait)
		}
		if !clock.Sleep(w.c.clk, ctx.Done(), wait) {
			return
		}
	}
}

// connectAndServe makes one connection and serves it until it ends. lived
// is how long it was up after the hub accepted it, 0 if it never was.
func (w *worker) connectAndServe(ctx context.Context) (lived time.Duration, err error) {
	conn, ack, err := w.dial(ctx)
	if err != nil {
		return 0, err
	}
	if !ack.Accepted {
		_ = conn.Close()
		w.logRefusal(ctx, ack)
		return 0, &refusedError{ack: ack}
	}
	since := w.c.clk.Now()
	drain := make(chan struct{})
	baseCtx := context.WithValue(context.WithoutCancel(ctx), drainKey{}, (<-chan struct{})(drain))
	h2, err := serveH2(baseCtx, conn, w.c.cfg.Handler, w.c.log.With("hub", w.addr), w.c.cfg.PingInterval, w.c.cfg.PingTimeout)
	if err != nil {
		_ = conn.Close()
		return 0, fmt.Errorf("starting HTTP/2: %w", err)
	}
	w.c.log.Info("tunnel: connected to hub", "hub", w.addr, "hub_id", ack.HubID)
	w.c.setState(w, true)
	defer w.c.setState(w, false)

	select {
	case <-h2.done:
		return w.c.clk.Since(since), errConnClosed
	case <-ctx.Done():
	}
	// Drain: end the registration stream so the hub drops our routes now,
	// send GOAWAY so it opens no new streams, and let in-flight ones finish.
	close(drain)
	h2.shutdown(context.WithoutCancel(ctx))
	t := w.c.clk.NewTimer(w.c.cfg.DrainTimeout)
	defer t.Stop()
	w.c.log.Info("tunnel: draining the connection to hub", "hub", w.addr, "drain_timeout", w.c.cfg.DrainTimeout)
	select {
	case <-h2.done:
	case <-t.C():
		w.c.log.Warn("tunnel: drain timeout; closing the connection with streams still open",
			"hub", w.addr, "drain_timeout", w.c.cfg.DrainTimeout)
		_ = conn.Close()
		<-h2.done
	}
	return w.c.clk.Since(since), nil
}

// dial connects and runs the TLS and tunnel handshakes, all within
// DialTimeout.
func (w *worker) dial(ctx context.Context) (net.Conn, protocol.HandshakeAck, error) {
	var ack protocol.HandshakeAck
	hs := w.c.cfg.Handshake
	hs.AuthToken = ""
	if w.c.cfg.Token != nil {
		tok, err := w.c.cfg.Token()
		if err != nil {
			return nil, ack, fmt.Errorf("reading auth token: %w", err)
		}
		hs.AuthToken = tok
	}
	d := net.Dialer{Timeout: w.c.cfg.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", w.addr)
	if err != nil {
		return nil, ack, fmt.Errorf("dialing hub: %w", err)
	}
	// Net deadlines are absolute wall-clock times enforced by the runtime
	// poller, so they come from the time package, not the injected clock.
	_ = conn.SetDeadline(time.Now().Add(w.c.cfg.DialTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	fail := func(what string, err error) (net.Conn, protocol.HandshakeAck, error) {
		_ = conn.Close()
		return nil, ack, fmt.Errorf("%s: %w", what, err)
	}
	if w.c.cfg.TLS != nil {
		cfg := w.c.cfg.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = w.target.serverName
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail("TLS handshake with hub", err)
		}
		conn = tc
	}
	if err := protocol.WriteFrame(conn, hs); err != nil {
		return fail("writing handshake", err)
	}
	// Read straight from the conn: a bufio.Reader could swallow the HTTP/2
	// preface the hub sends right after the ack.
	if err := protocol.ReadFrame(conn, &ack); err != nil {
		return fail("reading handshake ack", err)
	}
	if !stop() {
		return fail("handshake", ctx.Err())
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fail("clearing handshake deadline", err)
	}
	return conn, ack, nil
}

// logRefusal says why a hub refused us. Codes that a retry cannot fix
// (a wrong token, version or handshake) are errors an operator must act on.
func (w *worker) logRefusal(ctx context.Context, ack protocol.HandshakeAck) {
	level, hint := slog.LevelWarn, ""
	switch ack.Code {
	case protocol.CodeUnauthorized:
		level, hint = slog.LevelError, "check --auth-token / --auth-token-file against the hub's token"
	case protocol.CodeVersion:
		level, hint = slog.LevelError, "pylon and hub speak different protocol versions; upgrade one of them"
	case protocol.CodeInvalid:
		level, hint = slog.LevelError, "the handshake is invalid; check --inference-server-id and --cluster-id"
	case protocol.CodeDuplicate:
		hint = "another connection with this inference_server_id is live on that hub; retrying"
	case protocol.CodeDraining:
		hint = "the hub is draining; retrying"
	}
	w.c.log.Log(ctx, level, "tunnel: hub refused the handshake", "hub", w.addr, "hub_id", ack.HubID,
		"code", ack.Code, "reason", ack.Reason, "hint", hint)
}
