package engineproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// streamSSE forwards an event stream and reports output events to the
// observation. Events are split at a blank line (LF LF or CRLF CRLF); an
// unfinished event may hold MaxEventBytes. Every event one read completes
// is written at once and flushed once: nothing waits for more bytes, so an
// event leaves as soon as the read that finished it returns, and events
// that arrived together leave together, in one HTTP/2 frame and one write
// on the tunnel instead of one per event. The accounting stays per event.
// For an aggregated answer (info.Aggregated) only the reads up to the one
// that completes the first event carrying text are flushed: the caller
// times its first token there, and sees nothing else until the end. Later
// events wait in the tunnel stream's buffer, which sends them when it
// fills, and are flushed when a second has passed since the last flush or
// the stream ends, so a long answer still moves and the hops relay a few
// frames instead of one per event.
// The first output must come within FirstOutputTimeout and each next one
// within InterEventTimeout, or the upstream request is cancelled and the
// request fails. abort is true when the proxy cut the stream short
// (timeout, oversized event, upstream read error), so the caller resets it
// instead of ending it cleanly.
func (px *Proxy) streamSSE(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, rc *http.ResponseController,
	body io.Reader, info RequestInfo, obs Observation, start time.Time, ok2xx bool) (out outcome, abort bool) {
	var timedOut atomic.Bool
	watchdog := px.cfg.Clock.AfterFunc(px.cfg.FirstOutputTimeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer watchdog.Stop()

	// pending holds an unfinished event across reads; a read that ends
	// on an event boundary, the usual case, is relayed from buf without
	// a copy.
	var pending []byte
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	outputs := 0
	// hold: flushes may wait (an aggregated answer past its first text);
	// lastFlush is read only then.
	hold := false
	var lastFlush time.Time
	for {
		n, err := body.Read(buf)
		data, from := buf[:n], 0
		if len(pending) > 0 {
			// The separator may straddle the reads: look again at the
			// last three bytes already searched.
			from = max(len(pending)-3, 0)
			pending = append(pending, data...)
			data = pending
		}
		done := completeEvents(data, from)
		if done > 0 {
			if _, werr := w.Write(data[:done]); werr != nil {
				return outcomeCancelled, false
			}
			if !hold || px.cfg.Clock.Since(lastFlush) >= aggregatedFlushInterval {
				if rc.Flush() != nil {
					return outcomeCancelled, false
				}
				if info.Aggregated {
					lastFlush = px.cfg.Clock.Now()
				}
			}
			for ev := data[:done]; len(ev) > 0; {
				end, sepLen := eventBoundary(ev, 0)
				// [DONE] is informational: a stream may end without it
				// (the Responses API does), so only output events matter.
				if classify(ev[:end]) == eventOutput {
					d := dataOf(ev[:end])
					obs.Output(d)
					hold = hold || info.Aggregated && carriesText(d)
					outputs++
					if outputs == 1 {
						px.metrics.firstOutput(info, px.cfg.Clock.Since(start))
					}
					watchdog.Reset(px.cfg.InterEventTimeout)
				}
				ev = ev[end+sepLen:]
			}
		}
		// append copies forward, so the rest may overlap pending.
		pending = append(pending[:0], data[done:]...)
		if len(pending) > px.cfg.MaxEventBytes {
			px.cfg.Log.Warn("upstream SSE event exceeds the buffer limit", "request_id", info.ID, "limit", px.cfg.MaxEventBytes)
			cancel()
			return outcomeFailed, true
		}
		if err != nil {
			if len(pending) > 0 {
				_, _ = w.Write(pending)
				_ = rc.Flush()
			}
			return px.streamEnded(ctx, err == io.EOF, timedOut.Load(), outputs, info, ok2xx)
		}
	}
}

// aggregatedFlushInterval bounds how long the events of an aggregated
// answer wait for the tunnel stream's buffer to fill: the caller does not
// read them before the end, but a hop between the tiers that closes idle
// connections should still see the answer move.
const aggregatedFlushInterval = time.Second

// carriesText reports whether an output event's data certainly carries
// text by the rule the gateway times its first token with: a chat or
// completions choice with non-empty delta content or text, or a Responses
// response.output_text.delta with a non-empty delta. Any doubt is false,
// which only keeps flushing, as for a streamed answer: another shape,
// reasoning or tool-call deltas, bytes that are not JSON, and, where it
// reads a member, a key encoding/json would read differently from its
// bytes (written with escapes or non-ASCII bytes, a case variant, or a
// repeat, which encoding/json resolves by folding, keeping the last, or
// merging). It runs for the output events of an aggregated answer up to
// the first that carries text, usually two, and reads them in place:
// decoding with encoding/json cost 2.6-3.0 us and 10 allocations an event
// (BenchmarkCarriesText), 5 % of the pylon's CPU under paced JSON load.
func carriesText(data []byte) bool {
	s := textScan{b: data}
	if !jsonscan.TopObject(data, s.member) {
		return false
	}
	return s.text || s.outputTextDelta && s.deltaText
}

// textScan is carriesText's walk over one event. The objects and arrays
// it reads into it walks itself, and every other value it checks with
// jsonscan.Value at its true nesting, so the document is checked once,
// exactly as encoding/json would; doubt ends the walk.
type textScan struct {
	b                                       []byte
	text, outputTextDelta, deltaText, doubt bool
	seenTop                                 uint8 // topNames met so far
}

// The member names each level reads.
var (
	topNames    = []string{"type", "delta", "choices"}
	choiceNames = []string{"text", "delta"}
	deltaNames  = []string{"content"}
)

// member reads a member of the event object (nesting 1); choices is an
// array at nesting 2.
func (s *textScan) member(key []byte, i int) int {
	n := s.name(key, topNames, &s.seenTop)
	if s.doubt {
		return -1
	}
	if n == 2 && s.b[i] == '[' {
		return jsonscan.Array(s.b, i, 2, s.choice)
	}
	end := jsonscan.Value(s.b, i, 1)
	if end < 0 {
		return -1
	}
	switch n {
	case 0:
		s.outputTextDelta = string(s.b[i:end]) == `"response.output_text.delta"`
	case 1:
		s.deltaText = nonEmptyString(s.b[i:end])
	}
	return end
}

// choice reads one element of choices; an object is at nesting 3, its
// delta object at 4.
func (s *textScan) choice(i int) int {
	if s.b[i] != '{' {
		return jsonscan.Value(s.b, i, 2)
	}
	var seen uint8
	return jsonscan.Object(s.b, i, 3, func(key []byte, i int) int {
		n := s.name(key, choiceNames, &seen)
		if s.doubt {
			return -1
		}
		if n == 1 && s.b[i] == '{' {
			return s.delta(i)
		}
		end := jsonscan.Value(s.b, i, 3)
		if n == 0 && end >= 0 && nonEmptyString(s.b[i:end]) {
			s.text = true
		}
		return end
	})
}

// delta reads a choice's delta object for its content.
func (s *textScan) delta(i int) int {
	var seen uint8
	return jsonscan.Object(s.b, i, 4, func(key []byte, i int) int {
		n := s.name(key, deltaNames, &seen)
		if s.doubt {
			return -1
		}
		end := jsonscan.Value(s.b, i, 4)
		if n == 0 && end >= 0 && nonEmptyString(s.b[i:end]) {
			s.text = true
		}
		return end
	})
}

// name returns the index in names of the member key, -1 for a key the
// level does not read. A key that encoding/json might match with a name
// though its bytes differ (escapes, non-ASCII bytes, another letter case),
// or a name seen before in the same object (seen has a bit per name),
// sets doubt.
func (s *textScan) name(key []byte, names []string, seen *uint8) int {
	if !jsonscan.ASCII(key) || bytes.IndexByte(key, '\\') >= 0 {
		s.doubt = true
		return -1
	}
	for n, want := range names {
		if !jsonscan.KeyIs(key, want) {
			continue
		}
		if string(key) != want || *seen&(1<<n) != 0 {
			s.doubt = true
			return -1
		}
		*seen |= 1 << n
		return n
	}
	return -1
}

// nonEmptyString reports whether a checked JSON value is a string other
// than "": any character, escaped or not, makes its token longer than its
// two quotes.
func nonEmptyString(v []byte) bool { return len(v) > 2 && v[0] == '"' }

// streamEnded is the outcome of an event stream whose read ended, at its
// end (eof) or with an error: a timeout or a broken stream fails and resets
// the hub's stream; a clean end completes only a 2xx answer that produced
// output.
func (px *Proxy) streamEnded(ctx context.Context, eof, timedOut bool, outputs int, info RequestInfo, ok2xx bool) (outcome, bool) {
	switch {
	case timedOut:
		px.cfg.Log.Warn("upstream SSE timed out waiting for output", "request_id", info.ID, "outputs", outputs)
		return outcomeFailed, true
	case deadlinePassed(ctx):
		// The hub's stream is reset, as for a timeout: a cut answer
		// must not end like a whole one.
		px.logDeadline(info, stageStreaming)
		return outcomeCancelled, true
	case ctx.Err() != nil:
		return outcomeCancelled, false
	case !eof:
		return outcomeFailed, true
	case !ok2xx || outputs == 0:
		return outcomeFailed, false
	}
	return outcomeComplete, false
}

// eventBoundary finds the end of the first complete event that ends at or
// after from: the index where the blank line starts and the separator's
// length, or -1. The first separator wins, LF LF or CRLF CRLF, found in
// one pass over the line feeds: at each LF, a CRLF CRLF starting one byte
// earlier, then an LF LF starting there.
func eventBoundary(b []byte, from int) (int, int) {
	for i := from; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1, 0
		}
		i += j
		if i+2 < len(b) && i > 0 && b[i-1] == '\r' && b[i+1] == '\r' && b[i+2] == '\n' {
			return i - 1, 4
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i, 2
		}
		i++
	}
	return -1, 0
}

// completeEvents returns the length of the complete events at the start
// of b, where no separator ends before from.
func completeEvents(b []byte, from int) int {
	done := 0
	for {
		end, sepLen := eventBoundary(b, max(from, done))
		if end < 0 {
			return done
		}
		done = end + sepLen
	}
}

type eventKind int

const (
	eventOther eventKind = iota
	eventOutput
	eventDone
)

// dataOf joins an event's data: lines with LF. An empty data line counts
// too (it adds a line break), as in the SSE specification. An event with
// one data line, the usual case, gives a slice of ev, so it is valid only
// as long as ev is.
func dataOf(ev []byte) []byte {
	var out []byte
	seen, joined := false, false
	for rest := ev; ; {
		line, tail, more := bytes.Cut(rest, []byte("\n"))
		rest = tail
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			d = bytes.TrimPrefix(d, []byte(" "))
			switch {
			case !seen:
				out = d
			case !joined:
				out = append(append(append(make([]byte, 0, len(out)+1+len(d)), out...), '\n'), d...)
				joined = true
			default:
				out = append(append(out, '\n'), d...)
			}
			seen = true
		}
		if !more {
			return out
		}
	}
}

// classify sorts an event: [DONE] ends the stream; response.created and
// empty data are bookkeeping; anything else is output, parsed or not.
func classify(ev []byte) eventKind {
	for rest := ev; len(rest) > 0; {
		line, tail, _ := bytes.Cut(rest, []byte("\n"))
		rest = tail
		line = bytes.TrimSpace(line)
		if name, ok := bytes.CutPrefix(line, []byte("event:")); ok && string(bytes.TrimSpace(name)) == "response.created" {
			return eventOther
		}
	}
	data := bytes.TrimSpace(dataOf(ev))
	switch {
	case len(data) == 0:
		return eventOther
	case string(data) == "[DONE]":
		return eventDone
	}
	if !mayBeCreated(data) {
		return eventOutput
	}
	var typed struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &typed) == nil && typed.Type == "response.created" {
		return eventOther
	}
	return eventOutput
}

// mayBeCreated reports whether data could be a JSON object whose type is
// response.created: a value that decodes to that string holds it
// literally or spells some of it as \u escapes (no shorter escape stands
// for its letters or its dot). Every other event skips the decoding.
func mayBeCreated(data []byte) bool {
	return data[0] == '{' && (bytes.Contains(data, []byte("response.created")) || bytes.Contains(data, []byte(`\u`)))
}

// serveHealth forwards GET /health (any query) to the engine's health path,
// without validation or observation; it is the hub's RTT probe. With
// several engines it answers from the first engine that is healthy,
// trying the engines that take requests first (in configuration order),
// then those marked down: the pylon is healthy while one engine is. An
// engine that answers 2xx is marked up; one that cannot be reached on any
// path is marked down.
func (px *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	var last *http.Response
	defer func() {
		if last != nil {
			_ = last.Body.Close()
		}
	}()
	for _, e := range px.pool.healthOrder() {
		resp, answered := px.probeEngine(r, e, &last)
		if resp != nil {
			px.pool.succeeded(e)
			defer func() { _ = resp.Body.Close() }()
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		if !answered && r.Context().Err() == nil {
			px.pool.failed(e)
		}
	}
	if last != nil {
		w.WriteHeader(last.StatusCode)
		_, _ = io.Copy(w, last.Body)
		return
	}
	problem(w, http.StatusServiceUnavailable, "engine health check failed", nil)
}

// probeEngine tries e's health paths in order. It returns the first 2xx
// answer, caching its path; a non-2xx answer replaces *last (the previous
// one is closed). answered reports whether the engine answered at all.
func (px *Proxy) probeEngine(r *http.Request, e *engine, last **http.Response) (ok *http.Response, answered bool) {
	for _, p := range px.healthCandidates() {
		u := e.base + p
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
		if err != nil {
			continue
		}
		resp, err := px.cfg.Client.Do(req)
		if err != nil {
			continue
		}
		answered = true
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			px.healthMu.Lock()
			px.healthPath = p
			px.healthMu.Unlock()
			return resp, true
		}
		if *last != nil {
			_ = (*last).Body.Close()
		}
		*last = resp
	}
	return nil, answered
}

// healthCandidates is the cached path first, then the configured ones,
// then the defaults.
func (px *Proxy) healthCandidates() []string {
	px.healthMu.Lock()
	cached := px.healthPath
	px.healthMu.Unlock()
	if cached != "" {
		return []string{cached}
	}
	return append(append([]string{}, px.cfg.HealthPaths...), "/health", "/v1/health/ready")
}
