package stats

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
)

// Reconnect reasons of pylon_engine_stats_stream_reconnects_total.
const (
	reconnectConnectError = "connect_error"
	reconnectHTTPStatus   = "http_status"
	reconnectEOF          = "eof"
	reconnectReadError    = "read_error"
	reconnectEmptyChunk   = "empty_chunk" // a body read returned no bytes and no error
	reconnectUnsupported  = "unsupported" // 404/405/501 that did not trigger the fallback
)

var reconnectReasons = []string{
	reconnectConnectError, reconnectHTTPStatus, reconnectEOF,
	reconnectReadError, reconnectEmptyChunk, reconnectUnsupported,
}

// streamOutcome is how one stream connection ended.
type streamOutcome struct {
	reason      string // reconnect reason
	unsupported bool   // the status was 404, 405 or 501
	stopped     bool   // ctx is done
}

// runStream consumes the first (or only) engine's stats stream.
func (c *Collector) runStream(ctx context.Context) { c.runEngineStream(ctx, 0) }

// runEngineStream consumes engine's stats stream until ctx is done, or, in
// auto mode, until an unsupported status before any valid event enables the
// OpenAI fallback for that engine. Every other ending reconnects after a
// backoff that starts at InitialBackoff, doubles up to MaxBackoff and is
// never reset, as upstream Stargate does: a stream that keeps breaking
// right after it connects is retried every 5 s at most, not every 100 ms.
// Each engine has its own stream, backoff and fallback decision.
func (c *Collector) runEngineStream(ctx context.Context, engine int) {
	backoff := InitialBackoff
	validSeen := false
	for {
		out := c.readStream(ctx, engine, &validSeen)
		if out.stopped || ctx.Err() != nil {
			return
		}
		if out.unsupported && c.cfg.StreamMode == ModeAuto && !validSeen {
			c.enableFallback(engine)
			return
		}
		c.m.reconnect(out.reason)
		t := c.clk.NewTimer(backoff)
		if c.onBackoff != nil {
			c.onBackoff(out.reason, backoff)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backoff = min(backoff*2, MaxBackoff)
	}
}

// readStream opens engine's stream once and handles its lines until it
// ends.
func (c *Collector) readStream(ctx context.Context, engine int, validSeen *bool) streamOutcome {
	streamURL := c.streamURLs[engine]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, streamURL, nil)
	if err != nil { // the URL was validated in New; keep going anyway
		return streamOutcome{reason: reconnectConnectError}
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return streamOutcome{stopped: true}
		}
		c.log.Warn("engine stats stream connect failed", "url", streamURL, "err", err)
		return streamOutcome{reason: reconnectConnectError}
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		c.log.Warn("engine stats stream endpoint is unsupported", "url", streamURL, "status", resp.StatusCode)
		return streamOutcome{reason: reconnectUnsupported, unsupported: true}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c.log.Warn("engine stats stream returned non-success status", "url", streamURL, "status", resp.StatusCode)
		return streamOutcome{reason: reconnectHTTPStatus}
	}
	c.m.connected(c.cfg.StreamMode, true)
	defer c.m.connected(c.cfg.StreamMode, false)
	sp := splitter{handle: func(line []byte) { c.handleEngineLine(engine, line, validSeen) }, tooLarge: func() {
		c.m.invalidEvent(ReasonLineTooLarge)
		if c.onLine != nil {
			c.onLine()
		}
	}}
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sp.write(buf[:n])
		switch {
		case ctx.Err() != nil:
			return streamOutcome{stopped: true}
		case errors.Is(err, io.EOF):
			return streamOutcome{reason: reconnectEOF}
		case err != nil:
			c.log.Warn("engine stats stream read failed", "url", streamURL, "err", err)
			return streamOutcome{reason: reconnectReadError}
		case n == 0:
			return streamOutcome{reason: reconnectEmptyChunk}
		}
	}
}

// handleLine handles one line of the first (or only) engine's stream.
func (c *Collector) handleLine(line []byte, validSeen *bool) { c.handleEngineLine(0, line, validSeen) }

// handleEngineLine validates and applies one line of engine's stream (LF
// and CR already removed).
func (c *Collector) handleEngineLine(engine int, line []byte, validSeen *bool) {
	if c.onLine != nil {
		defer c.onLine()
	}
	kind, ev, reason := parseLine(line)
	switch kind {
	case lineBlank:
	case lineInvalid:
		c.log.Debug("invalid engine stats event", "reason", reason)
		c.m.invalidEvent(reason)
	case linePing:
		*validSeen = true
		c.noteStreamEvent(engine)
		c.m.event("ping")
	case lineStats:
		*validSeen = true
		c.noteStreamEvent(engine)
		c.m.event("stats")
		c.handleEvent(engine, ev)
	}
}

// splitter cuts a byte stream into lines at LF, dropping a CR before it.
// A line over MaxLineBytes is reported once through tooLarge (as soon as
// it cannot fit) and skipped up to its LF, without being buffered. A
// trailing partial line is dropped with the connection, as upstream
// Stargate does: it cannot be completed by the next connection.
type splitter struct {
	handle   func(line []byte)
	tooLarge func()
	limit    int // the longest line; 0 means MaxLineBytes (tests set less)
	pending  []byte
	skipping bool // inside an oversized line
}

func (s *splitter) maxLine() int {
	if s.limit > 0 {
		return s.limit
	}
	return MaxLineBytes
}

func (s *splitter) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.buffer(p)
			return
		}
		s.buffer(p[:i])
		if s.skipping {
			s.skipping = false
		} else {
			line := bytes.TrimSuffix(s.pending, []byte("\r"))
			if len(line) > s.maxLine() {
				s.tooLarge()
			} else {
				s.handle(line)
			}
		}
		s.pending = s.pending[:0]
		p = p[i+1:]
	}
}

// buffer appends part of a line, switching to skipping once the line cannot
// fit (one extra byte is allowed for a CR before the LF).
func (s *splitter) buffer(p []byte) {
	if s.skipping {
		return
	}
	if len(s.pending)+len(p) > s.maxLine()+1 {
		s.pending = s.pending[:0]
		s.skipping = true
		s.tooLarge()
		return
	}
	s.pending = append(s.pending, p...)
}
