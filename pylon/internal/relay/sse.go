package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// relaySSE forwards an event stream one event at a time, flushing each, and
// reports output events to the observation. Events are split at a blank
// line (LF LF or CRLF CRLF); an unfinished event may hold MaxEventBytes. The
// first output must come within FirstOutputTimeout and each next one within
// InterEventTimeout, or the upstream request is cancelled and the request
// fails (pylon.md §5.1 step 10). abort is true when the relay cut the
// stream short (timeout, oversized event, upstream read error), so the
// caller resets it instead of ending it cleanly.
func (rl *Relay) relaySSE(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, rc *http.ResponseController,
	body io.Reader, info RequestInfo, obs Observation, start time.Time, ok2xx bool) (outcome string, abort bool) {
	var timedOut atomic.Bool
	watchdog := rl.cfg.Clock.AfterFunc(rl.cfg.FirstOutputTimeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer watchdog.Stop()

	var pending []byte
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	outputs := 0
	done := false
	for {
		n, err := body.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			end, sepLen := eventBoundary(pending)
			if end < 0 {
				break
			}
			ev := pending[:end+sepLen]
			if _, werr := w.Write(ev); werr != nil {
				return "cancelled", false
			}
			if rc.Flush() != nil {
				return "cancelled", false
			}
			switch classify(pending[:end]) {
			case eventDone:
				done = true
			case eventOutput:
				obs.Output(dataOf(pending[:end]))
				outputs++
				if outputs == 1 {
					rl.metrics.firstOutput(info, rl.cfg.Clock.Since(start))
				}
				watchdog.Reset(rl.cfg.InterEventTimeout)
			}
			pending = pending[end+sepLen:]
		}
		if len(pending) > rl.cfg.MaxEventBytes {
			rl.cfg.Log.Warn("upstream SSE event exceeds the buffer limit", "request_id", info.ID, "limit", rl.cfg.MaxEventBytes)
			cancel()
			return "failed", true
		}
		if err != nil {
			if len(pending) > 0 {
				_, _ = w.Write(pending)
				_ = rc.Flush()
			}
			switch {
			case timedOut.Load():
				rl.cfg.Log.Warn("upstream SSE timed out waiting for output", "request_id", info.ID, "outputs", outputs)
				return "failed", true
			case ctx.Err() != nil:
				return "cancelled", false
			case err != io.EOF:
				return "failed", true
			case !ok2xx || outputs == 0:
				return "failed", false
			default:
				_ = done // [DONE] is informational: a stream may end without it (Responses API)
				return "complete", false
			}
		}
	}
}

// eventBoundary finds the end of the first complete event: the index where
// the blank line starts and the separator's length.
func eventBoundary(b []byte) (int, int) {
	lf := bytes.Index(b, []byte("\n\n"))
	crlf := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case lf < 0 && crlf < 0:
		return -1, 0
	case crlf >= 0 && (lf < 0 || crlf < lf):
		return crlf, 4
	default:
		return lf, 2
	}
}

type eventKind int

const (
	eventOther eventKind = iota
	eventOutput
	eventDone
)

// dataOf joins an event's data: lines.
func dataOf(ev []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			d = bytes.TrimPrefix(d, []byte(" "))
			if out != nil {
				out = append(out, '\n')
			}
			out = append(out, d...)
		}
	}
	return out
}

// classify sorts an event: [DONE] ends the stream; response.created and
// empty data are bookkeeping; anything else is output, parsed or not.
func classify(ev []byte) eventKind {
	for _, line := range bytes.Split(ev, []byte("\n")) {
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
	var typed struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &typed) == nil && typed.Type == "response.created" {
		return eventOther
	}
	return eventOutput
}

// serveHealth forwards GET /health (any query) to the engine's health path,
// without validation or observation; it is the hub's RTT probe. With
// several engines it answers from the first engine that is healthy,
// trying the engines that take requests first (in configuration order),
// then those marked down: the pylon is healthy while one engine is. An
// engine that answers 2xx is marked up; one that cannot be reached on any
// path is marked down.
func (rl *Relay) serveHealth(w http.ResponseWriter, r *http.Request) {
	var last *http.Response
	defer func() {
		if last != nil {
			_ = last.Body.Close()
		}
	}()
	for _, e := range rl.pool.healthOrder() {
		resp, answered := rl.probeEngine(r, e, &last)
		if resp != nil {
			rl.pool.succeeded(e)
			defer func() { _ = resp.Body.Close() }()
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		if !answered && r.Context().Err() == nil {
			rl.pool.failed(e)
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
func (rl *Relay) probeEngine(r *http.Request, e *engine, last **http.Response) (ok *http.Response, answered bool) {
	for _, p := range rl.healthCandidates() {
		u := e.base + p
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
		if err != nil {
			continue
		}
		resp, err := rl.cfg.Client.Do(req)
		if err != nil {
			continue
		}
		answered = true
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			rl.healthMu.Lock()
			rl.healthPath = p
			rl.healthMu.Unlock()
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
func (rl *Relay) healthCandidates() []string {
	rl.healthMu.Lock()
	cached := rl.healthPath
	rl.healthMu.Unlock()
	if cached != "" {
		return []string{cached}
	}
	return append(append([]string{}, rl.cfg.HealthPaths...), "/health", "/v1/health/ready")
}
