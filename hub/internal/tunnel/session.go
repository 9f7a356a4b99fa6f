package tunnel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Why a session ended, as the cause of its context.
var (
	errIdleTimeout = errors.New("registration stream idle timeout")
	// errRegistrationEnded means the pylon finished the registration stream
	// cleanly, which it does when it drains: the hub then lets in-flight
	// streams finish instead of cutting them.
	errRegistrationEnded = errors.New("registration stream ended by the pylon")
	errProtocol          = errors.New("protocol violation")
	errDuplicate         = errors.New("duplicate inference_server_id")
	errRemoved           = errors.New("session removed")
)

// minRTT is reported for a probe that completed within the clock's
// resolution, so a known RTT is always positive (0 would read as "none"
// downstream).
const minRTT = time.Microsecond

// probeHost is the :authority of the hub's own requests on the tunnel; the
// pylon does not route on it.
const probeHost = "http://pylon"

// maxHealthBody bounds how much of a /health answer is read before the
// stream is reset, so a chatty engine cannot hold a probe.
const maxHealthBody = 64 << 10

// session is one accepted pylon connection.
type session struct {
	srv    *Server
	b      Backend
	remote string
	since  time.Time
	idle   time.Duration // 0: no idle timeout

	ctx    context.Context
	cancel context.CancelCauseFunc

	cc clientConn // set once, under srv.mu, before the session is visible

	probeMu sync.Mutex // serializes probes, so a result is never older than the one it replaces

	mu             sync.Mutex
	rtt            time.Duration
	rttKnown       bool
	lastProbeStart time.Time
	lastLine       time.Time // last valid registration line, or the session start
}

func newSession(parent context.Context, srv *Server, hs *protocol.Handshake, remote string) *session {
	ctx, cancel := context.WithCancelCause(parent)
	now := srv.clk.Now()
	return &session{
		srv:      srv,
		b:        Backend{ID: hs.InferenceServerID, ClusterID: hs.EffectiveClusterID(), URL: hs.InferenceServerURL, Region: hs.Region},
		remote:   remote,
		since:    now,
		idle:     idleTimeout(hs.HeartbeatMs, srv.cfg.MinIdleTimeout, srv.cfg.MaxIdleTimeout),
		ctx:      ctx,
		cancel:   cancel,
		lastLine: now,
	}
}

// idleTimeout is clamp(3 × heartbeat, lo, hi), hi for an unknown (0)
// heartbeat, and 0 (disabled) when either bound is negative
// (docs/protocol.md#5-timeouts-and-backoff).
func idleTimeout(heartbeatMs uint64, lo, hi time.Duration) time.Duration {
	if lo < 0 || hi < 0 {
		return 0
	}
	if heartbeatMs == 0 || heartbeatMs > uint64(hi/time.Millisecond) {
		return hi
	}
	return min(max(3*time.Duration(heartbeatMs)*time.Millisecond, lo), hi)
}

// run serves the session until it ends, then reports Disconnected and
// releases the connection.
func (s *session) run(parent context.Context) {
	var wg sync.WaitGroup
	wg.Go(s.readRegistrations)
	wg.Go(s.probeLoop)
	if s.idle > 0 {
		wg.Go(s.watchIdle)
	}
	<-s.ctx.Done()
	cause := context.Cause(s.ctx)
	graceful := errors.Is(cause, errRegistrationEnded)
	if !graceful {
		// Closing the conn unblocks the registration reader and any probe
		// at once, and fails the proxy's in-flight streams so it can react.
		_ = s.cc.Close()
	}
	wg.Wait()
	s.srv.h.Disconnected(s.b)
	s.srv.remove(s)
	if graceful {
		// The pylon is draining: it sent GOAWAY and will finish its
		// in-flight streams. Wait for them (or for the hub to stop) before
		// closing.
		_ = s.cc.Shutdown(parent)
		_ = s.cc.Close()
	}
	level := s.srv.log.Info
	if !graceful && parent.Err() == nil {
		level = s.srv.log.Warn
	}
	level("tunnel: session closed", "inference_server_id", s.b.ID, "remote_addr", s.remote,
		"reason", cause.Error(), "connected_for", s.srv.clk.Since(s.since))
}

// readRegistrations opens the registration stream and hands each snapshot
// to the Handler. Any failure ends the session: without a registration
// stream the hub has no authority to route to the pylon.
func (s *session) readRegistrations() {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, probeHost+protocol.RegistrationPath, nil)
	if err != nil {
		s.cancel(fmt.Errorf("building registration request: %w", err))
		return
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := s.cc.RoundTrip(req)
	if err != nil {
		s.cancel(fmt.Errorf("opening registration stream: %w", err))
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		s.cancel(fmt.Errorf("%w: registration stream answered %s", errProtocol, resp.Status))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), protocol.MaxRegistrationLineBytes)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		reg := new(protocol.Registration)
		if err := json.Unmarshal(line, reg); err != nil {
			s.cancel(fmt.Errorf("%w: decoding registration: %w", errProtocol, err))
			return
		}
		if err := s.checkRegistration(reg); err != nil {
			s.cancel(err)
			return
		}
		s.mu.Lock()
		s.lastLine = s.srv.clk.Now()
		s.mu.Unlock()
		rtt, known := s.rttForRegistration()
		if s.ctx.Err() != nil {
			return
		}
		s.srv.h.Registered(s.b, reg, rtt, known)
	}
	if err := sc.Err(); err != nil {
		s.cancel(fmt.Errorf("reading registration stream: %w", err))
		return
	}
	s.cancel(errRegistrationEnded)
}

// checkRegistration enforces that the handshake fixed the identity: a
// snapshot may not speak for another server or cluster
// (docs/protocol.md#3-the-registration-stream).
func (s *session) checkRegistration(reg *protocol.Registration) error {
	switch {
	case reg.V != protocol.Version:
		return fmt.Errorf("%w: registration version %d, want %d", errProtocol, reg.V, protocol.Version)
	case reg.InferenceServerID != s.b.ID:
		return fmt.Errorf("%w: registration for inference_server_id %q on the session of %q", errProtocol, reg.InferenceServerID, s.b.ID)
	case reg.ClusterID != "" && reg.ClusterID != s.b.ClusterID:
		return fmt.Errorf("%w: registration for cluster_id %q, handshake said %q", errProtocol, reg.ClusterID, s.b.ClusterID)
	}
	return nil
}

// rttForRegistration returns the latest RTT. A registration that arrives
// before any probe has run triggers one at once (bounded by HealthTimeout),
// so the first snapshot normally carries a real RTT instead of waiting a
// whole HealthInterval for the prober.
func (s *session) rttForRegistration() (time.Duration, bool) {
	if rtt, known, _ := s.health(); known {
		return rtt, true
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	rtt, known, last := s.health()
	if !known && (last.IsZero() || s.srv.clk.Since(last) >= s.srv.cfg.HealthInterval) {
		s.probeLocked()
		rtt, known, _ = s.health()
	}
	return rtt, known
}

func (s *session) health() (rtt time.Duration, known bool, lastProbeStart time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rtt, s.rttKnown, s.lastProbeStart
}

// probeLoop measures the /health RTT over the tunnel every HealthInterval
// (docs/protocol.md#4-health-probe-and-rtt). The probe takes the same path
// as requests, so its RTT is what a request pays and a broken tunnel fails
// it.
func (s *session) probeLoop() {
	for clock.Sleep(s.srv.clk, s.ctx.Done(), s.srv.cfg.HealthInterval) {
		s.probeMu.Lock()
		s.probeLocked()
		s.probeMu.Unlock()
	}
}

// probeLocked runs one /health probe and records Ready(rtt) or Pending.
// The RTT is the time to the response head. Callers hold probeMu.
func (s *session) probeLocked() {
	ctx, cancel := context.WithCancel(s.ctx)
	timer := s.srv.clk.AfterFunc(s.srv.cfg.HealthTimeout, cancel)
	defer func() {
		timer.Stop()
		cancel()
	}()
	start := s.srv.clk.Now()
	s.mu.Lock()
	s.lastProbeStart = start
	s.mu.Unlock()

	ok, err := s.roundTripHealth(ctx)
	rtt := max(s.srv.clk.Since(start), minRTT)
	if s.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	wasKnown := s.rttKnown
	s.rttKnown = ok
	if ok {
		s.rtt = rtt
	}
	s.mu.Unlock()
	switch {
	case !ok && wasKnown:
		s.srv.log.Warn("tunnel: /health probe failed; backend pending until it succeeds",
			"inference_server_id", s.b.ID, "err", err)
	case !ok:
		s.srv.log.Debug("tunnel: /health probe failed", "inference_server_id", s.b.ID, "err", err)
	case !wasKnown:
		s.srv.log.Info("tunnel: /health probe succeeded", "inference_server_id", s.b.ID, "rtt", rtt)
	}
}

func (s *session) roundTripHealth(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeHost+protocol.HealthPath, nil)
	if err != nil {
		return false, err
	}
	resp, err := s.cc.RoundTrip(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHealthBody))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false, fmt.Errorf("/health answered %s", resp.Status)
	}
	return true, nil
}

// watchIdle ends the session when no registration line has arrived for
// the idle timeout, the hub's only staleness mechanism
// (docs/design/routing-state.md#registration).
func (s *session) watchIdle() {
	for {
		s.mu.Lock()
		last := s.lastLine
		s.mu.Unlock()
		wait := s.idle - s.srv.clk.Since(last)
		if wait <= 0 {
			s.srv.log.Warn("registration stream idle timeout; closing registration",
				"inference_server_id", s.b.ID, "remote_addr", s.remote, "idle_timeout", s.idle)
			s.cancel(errIdleTimeout)
			return
		}
		if !clock.Sleep(s.srv.clk, s.ctx.Done(), wait) {
			return
		}
	}
}

func (s *session) info() SessionInfo {
	rtt, known, _ := s.health()
	return SessionInfo{
		ID:             s.b.ID,
		ClusterID:      s.b.ClusterID,
		URL:            s.b.URL,
		RemoteAddr:     s.remote,
		ConnectedSince: s.since,
		LastRTT:        rtt,
		RTTKnown:       known,
		StreamsActive:  s.cc.StreamsActive(),
	}
}
