package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
)

// Limits bound what a slow or silent client can hold on a listener. None of
// them bounds the length of a request or a response: a long upload that keeps
// moving and an SSE stream that lasts an hour are both fine. What they bound
// is a lack of progress, because that is what ties up a connection and its
// goroutine for nothing.
type Limits struct {
	// ReadHeader bounds the request line and headers.
	ReadHeader time.Duration
	// ReadStall bounds the wait for each read of a request body: a body
	// that stops arriving for this long fails the read with ErrReadStalled.
	ReadStall time.Duration
	// WriteStall bounds each write and flush of a response: a client that
	// stops reading for this long has its connection (or HTTP/2 stream)
	// closed.
	WriteStall time.Duration
	// Idle bounds a keep-alive connection waiting for its next request.
	Idle time.Duration
}

// DefaultLimits are generous to real clients and still free a stuck
// connection within about a minute: 10 s for headers (they are small and
// sent at once), 30 s without a single body byte, 60 s without the client
// reading (a stream's events are seconds apart at worst), and 120 s idle,
// longer than the 60 s idle timeout common to cloud load balancers, so the
// balancer, not the server, closes an idle connection and never sends on a
// connection the server is closing.
func DefaultLimits() Limits {
	return Limits{ReadHeader: 10 * time.Second, ReadStall: 30 * time.Second, WriteStall: 60 * time.Second, Idle: 120 * time.Second}
}

// Flags registers the limits on fs with their defaults; the variables are
// envPrefix + _READ_HEADER_TIMEOUT and so on.
func (l *Limits) Flags(fs *cli.FlagSet, envPrefix string) {
	d := DefaultLimits()
	fs.Duration(&l.ReadHeader, "read-header-timeout", envPrefix+"_READ_HEADER_TIMEOUT", d.ReadHeader,
		"every listener: bound on reading a request's line and headers")
	fs.Duration(&l.ReadStall, "read-stall-timeout", envPrefix+"_READ_STALL_TIMEOUT", d.ReadStall,
		"every listener: bound on each wait for request body bytes (a long body that keeps arriving is fine)")
	fs.Duration(&l.WriteStall, "write-stall-timeout", envPrefix+"_WRITE_STALL_TIMEOUT", d.WriteStall,
		"every listener: bound on each response write while the client does not read (long streams are fine)")
	fs.Duration(&l.Idle, "idle-timeout", envPrefix+"_IDLE_TIMEOUT", d.Idle,
		"every listener: how long a keep-alive connection may wait for its next request")
}

// Validate requires every bound to be positive, naming the flag: a zero
// would mean no bound at all, which is what these flags exist to prevent.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"read-header-timeout", l.ReadHeader}, {"read-stall-timeout", l.ReadStall},
		{"write-stall-timeout", l.WriteStall}, {"idle-timeout", l.Idle}} {
		if f.d <= 0 {
			return fmt.Errorf("--%s must be > 0, got %s", f.name, f.d)
		}
	}
	return nil
}

// ErrReadStalled is the error a handler's body read returns when the client
// sent nothing for Limits.ReadStall. Handlers may answer it with 408.
var ErrReadStalled = errors.New("request body stalled: no bytes within the read-stall timeout")

// bound applies the per-read and per-write limits to every request of h.
// Deadlines are set just before each read or write and cleared after it,
// because an HTTP/2 stream whose write deadline passes is reset even when
// no write is waiting, and an HTTP/1 connection whose read deadline passes
// after the body ends looks to the server like a client that left.
func bound(h http.Handler, l Limits) http.Handler {
	if l.ReadStall <= 0 && l.WriteStall <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		var body *stallReader
		if l.ReadStall > 0 && r.Body != nil && r.Body != http.NoBody {
			body = &stallReader{ReadCloser: r.Body, rc: rc, d: l.ReadStall}
			r.Body = body
		}
		if l.WriteStall > 0 {
			w = &stallWriter{ResponseWriter: w, rc: rc, d: l.WriteStall}
		}
		h.ServeHTTP(w, r)
		if body != nil && !body.done {
			// The server reads what the handler left of the body before it
			// answers; without a deadline a trickling client would hold the
			// connection there.
			_ = rc.SetReadDeadline(time.Now().Add(l.ReadStall))
		}
	})
}

// stallReader bounds each Read of a request body.
type stallReader struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
	// done is set at the body's end and when it stalled: then the
	// connection needs no further deadline from us.
	done bool
}

func (s *stallReader) Read(p []byte) (int, error) {
	// A server that cannot set deadlines (a test recorder) reads unbounded.
	armed := s.rc.SetReadDeadline(time.Now().Add(s.d)) == nil
	n, err := s.ReadCloser.Read(p)
	if err != nil && isTimeout(err) {
		// The deadline stays expired: the server's own read of the rest
		// of the body fails at once and the connection closes after the
		// handler's answer.
		s.done = true
		return n, ErrReadStalled
	}
	if armed {
		_ = s.rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		s.done = true
	}
	return n, err
}

// stallWriter bounds each Write and Flush of a response. It keeps the
// optional interfaces the handlers use: Flush and FlushError, and Unwrap for
// http.ResponseController.
type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *stallWriter) arm() bool { return s.rc.SetWriteDeadline(time.Now().Add(s.d)) == nil }

func (s *stallWriter) disarm(armed bool) {
	if armed {
		_ = s.rc.SetWriteDeadline(time.Time{})
	}
}

func (s *stallWriter) Write(p []byte) (int, error) {
	armed := s.arm()
	defer s.disarm(armed)
	return s.ResponseWriter.Write(p)
}

// FlushError flushes within the write bound and reports a failed flush.
func (s *stallWriter) FlushError() error {
	armed := s.arm()
	defer s.disarm(armed)
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush is FlushError for callers of http.Flusher.
func (s *stallWriter) Flush() { _ = s.FlushError() }

// Unwrap lets http.ResponseController reach the server's writer.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
