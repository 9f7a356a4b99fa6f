package stats

import (
	"strings"
	"sync/atomic"
	"time"
)

// Endpoint is the class of a request's path, which decides how its
// throughput is sampled.
type Endpoint string

// Endpoint values of RequestInfo.Endpoint.
const (
	EndpointChat       Endpoint = "chat"       // POST /v1/chat/completions
	EndpointResponses  Endpoint = "responses"  // POST /v1/responses
	EndpointEmbeddings Endpoint = "embeddings" // POST /v1/embeddings
	EndpointOther      Endpoint = "other"      // any other forwarded path: projected, never sampled
)

// RequestInfo describes a request the engine proxy accepted.
type RequestInfo struct {
	ID          string   // x-request-id
	Model       string   // x-model
	Endpoint    Endpoint // one of the Endpoint constants; anything else counts as other
	InputTokens uint64   // x-input-tokens
	Priority    uint32   // x-priority, lower is more urgent; absent = 0
	RoutingKey  string   // x-routing-key
}

// State is an observer's state
// (docs/design/statistics.md#request-observation). The first three are the
// live phases of the projection; the rest are terminal.
type State uint8

// Observer states, in the order a request moves through them.
const (
	// Pending: accepted, upstream headers not yet received
	// (upstream Stargate calls it UpstreamConnecting).
	Pending State = iota
	// InputProcessing: upstream headers received, no output yet.
	InputProcessing
	// OutputGeneration: first output chunk seen (the Chat role-only chunk
	// counts) or a successful non-SSE body.
	OutputGeneration
	// Complete: a 2xx with output (embeddings: a 2xx, output or not).
	Complete
	// Failed: a non-2xx, no output, or finished before upstream headers.
	Failed
	// Cancelled: the stream was reset or the client went away.
	Cancelled
)

// String returns the state label of pylon_requests_state.
func (s State) String() string {
	switch s {
	case Pending:
		return "upstream_connecting"
	case InputProcessing:
		return "input_processing"
	case OutputGeneration:
		return "output_generation"
	case Complete:
		return "complete"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return "unknown"
}

// Terminal reports whether s ends a request.
func (s State) Terminal() bool { return s >= Complete }

// Observer follows one request from acceptance to its terminal state and
// feeds the projection and the throughput statistics. Create it with Begin
// and call Headers, Output and Finish as the response progresses; every
// method is nil-safe and does nothing after Finish. An Observer for a model
// without a generation, or whose generation was retired, is inert: it keeps
// its own state but touches no statistics.
//
// Calibration and other non-streamed calls follow the same sequence:
// Headers(status) when the response head arrives, Output(body) when the
// full body has been received, then Finish.
type Observer struct {
	c           *Collector
	info        RequestInfo
	calibration bool

	// dispatched mirrors engine for Output, which decides outside the
	// lock whether a chunk's tokens are counted.
	dispatched atomic.Int32

	// Guarded by c.mu.
	gen           *generation // nil: inert
	track         *reqTrack
	engine        int // the engine the request was dispatched to (0 until told)
	state         State
	status        int
	acceptedAt    time.Time
	headersAt     time.Time
	firstOutputAt time.Time
	firstTokenAt  time.Time
	tokens        uint64
	explicit      bool    // an explicit usage counter was seen
	liveTPS       float64 // fallback live output estimate, 0 if none
}

// Begin starts observing a request: it enters the projection as Pending at
// once, at its priority. Counting it from acceptance matters: every
// registration heartbeat drops the hub's reservations for this pylon, so a
// request missing from the snapshot would briefly look like no load at
// all. It never returns nil.
func (c *Collector) Begin(r RequestInfo) *Observer {
	now := c.clk.Now()
	o := &Observer{c: c, info: r, calibration: strings.HasPrefix(r.ID, CalibrationPrefix), acceptedAt: now}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gens[r.Model]
	if g == nil {
		return o
	}
	o.gen = g
	g.live[o] = struct{}{}
	if r.ID != "" {
		// A reused id replaces an older owner or tombstone, as upstream
		// Stargate does: the newest request is the one the engine's
		// events now describe.
		o.track = &reqTrack{gen: g, owned: true, lastSeen: now}
		c.rememberLocked(r.ID, o.track, now)
	}
	g.lastEvent, g.observedAt = now, now
	c.signal()
	return o
}

// Dispatched records that the request is being sent to engine (its index
// in Config.UpstreamBaseURLs; 0 when there is one engine), before it is
// sent and again when it is retried on another engine. From then on only
// that engine's stats events count for the request id, and the engine's
// stream mode (stream or OpenAI fallback) decides how the request is
// measured.
func (o *Observer) Dispatched(engine int) {
	if o == nil {
		return
	}
	o.dispatched.Store(int32(engine))
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	o.engine = engine
	if t := o.track; t != nil && o.c.reqs[o.info.ID] == t && t.engine != engine {
		// A retry: counters the first engine reported start over on the
		// new one.
		t.engine = engine
		o.c.setCountingLocked(t, false)
		t.finalized = false
	}
}

// Info returns the request description the observer was begun with.
func (o *Observer) Info() RequestInfo {
	if o == nil {
		return RequestInfo{}
	}
	return o.info
}

// State returns the observer's current state; a nil Observer reports
// Cancelled.
func (o *Observer) State() State {
	if o == nil {
		return Cancelled
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	return o.state
}

// Headers records the upstream response head: Pending → InputProcessing.
// Only the first call counts.
func (o *Observer) Headers(status int) {
	if o == nil {
		return
	}
	now := o.c.clk.Now()
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.state.Terminal() || !o.headersAt.IsZero() {
		return
	}
	o.status = status
	o.headersAt = now
	if o.state == Pending {
		o.state = InputProcessing
	}
	o.c.observeLocked(o, now)
}

// Output records one SSE data payload, or the whole body of a non-SSE
// response; chunk is not kept after the call. The first output moves the
// request to OutputGeneration.
// "[DONE]", empty payloads and response.created events are not output and
// are ignored. Tokens come from the first explicit counter found
// (usage.completion_tokens, output_tokens_so_far,
// response.usage.output_tokens; cumulative, never decreasing) or, until one
// has been seen, from the whitespace-separated words of
// choices[].delta.content and of a top-level string delta
// (docs/design/statistics.md#openai-fallback). Tokens feed statistics
// only in fallback mode and for calibration, so a chunk is not parsed when
// the request's engine is measured by its stats stream for good.
func (o *Observer) Output(chunk []byte) {
	if o == nil || !isOutputPayload(chunk) {
		return
	}
	var ct chunkTokens
	if o.calibration || !o.c.streamMeasured(int(o.dispatched.Load())) {
		ct = parseChunk(chunk)
	}
	now := o.c.clk.Now()
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.state.Terminal() {
		return
	}
	if o.state < OutputGeneration {
		o.state = OutputGeneration
		o.firstOutputAt = now
	}
	switch {
	case ct.hasExplicit && !o.explicit:
		o.explicit = true
		o.tokens = ct.explicit
	case ct.hasExplicit:
		o.tokens = max(o.tokens, ct.explicit)
	case !o.explicit:
		o.tokens = addSat(o.tokens, ct.words)
	}
	if o.firstTokenAt.IsZero() && o.tokens > 0 {
		o.firstTokenAt = now
	}
	o.c.observeLocked(o, now)
}

// Finish ends the observation exactly once and returns the terminal state
// recorded; later calls return that state and change nothing, so
// `defer obs.Finish(Cancelled)` is safe after an explicit Finish. A
// non-terminal argument counts as Cancelled. Complete is recorded as Failed
// when the request never got upstream headers, got a non-2xx status, or
// (except embeddings) produced no output.
func (o *Observer) Finish(s State) State {
	if o == nil {
		return s
	}
	now := o.c.clk.Now()
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.state.Terminal() {
		return o.state
	}
	if !s.Terminal() {
		s = Cancelled
	}
	if s == Complete {
		switch {
		case o.state == Pending:
			s = Failed
		case o.status != 0 && (o.status < 200 || o.status > 299):
			s = Failed
		case o.state < OutputGeneration && o.info.Endpoint != EndpointEmbeddings:
			s = Failed
		}
	}
	o.state = s
	if o.gen != nil {
		delete(o.gen.live, o)
	}
	o.c.observeLocked(o, now)
	return s
}

// promptWork is the observer's contribution to the priority map: its input
// tokens at its own priority while Pending, at priority 0 while
// InputProcessing (the engine is already prefilling it, so it is ahead of
// queued work of every priority), none otherwise.
func (o *Observer) promptWork() (prio uint32, tokens uint64, ok bool) {
	if o.info.InputTokens == 0 {
		return 0, 0, false
	}
	switch o.state {
	case Pending:
		return o.info.Priority, o.info.InputTokens, true
	case InputProcessing:
		return 0, o.info.InputTokens, true
	}
	return 0, 0, false
}

// sampledEndpoint reports whether the endpoint yields output-TPS samples.
func (o *Observer) sampledEndpoint() bool {
	return o.info.Endpoint == EndpointChat || o.info.Endpoint == EndpointResponses
}

// outputTPS is the observed decode rate at now: output tokens over the time
// since the first token, or since the first output when that is under the
// floor; none below one token or under the floor.
func (o *Observer) outputTPS(now time.Time) (float64, bool) {
	if !o.sampledEndpoint() || o.tokens < 1 {
		return 0, false
	}
	var d time.Duration
	switch {
	case !o.firstTokenAt.IsZero() && now.Sub(o.firstTokenAt) >= DurationFloor:
		d = now.Sub(o.firstTokenAt)
	case !o.firstOutputAt.IsZero():
		d = now.Sub(o.firstOutputAt)
	default:
		return 0, false
	}
	return rate(o.tokens, d)
}

// inputTPS is the fallback input-TPS sample of a completed request: Chat
// and Responses divide the input tokens by the time from acceptance to
// first output (no sample under the floor); embeddings by the time to the
// response headers, else the total duration, raised to the floor.
func (o *Observer) inputTPS(now time.Time) (float64, bool) {
	switch o.info.Endpoint {
	case EndpointChat, EndpointResponses:
		if o.firstOutputAt.IsZero() {
			return 0, false
		}
		return rate(o.info.InputTokens, o.firstOutputAt.Sub(o.acceptedAt))
	case EndpointEmbeddings:
		d := now.Sub(o.acceptedAt)
		if !o.headersAt.IsZero() {
			d = o.headersAt.Sub(o.acceptedAt)
		}
		return rate(o.info.InputTokens, max(d, DurationFloor))
	}
	return 0, false
}

// observeLocked applies one observation (a transition or an output chunk)
// of o to its generation. In engine-stream mode observations only move the
// projection; throughput comes from the stream. In fallback mode, and for
// calibration requests in every mode, they feed the input and output
// samples and, when explicit usage is present, the per-request counters.
func (c *Collector) observeLocked(o *Observer, now time.Time) {
	g := o.gen
	if g == nil || g.retired {
		return
	}
	g.lastEvent, g.observedAt = now, now
	o.liveTPS = 0
	fallback := c.fallbackLocked(o.engine)
	if fallback && o.state == OutputGeneration {
		if tps, ok := o.outputTPS(now); ok && validTPS(tps) {
			o.liveTPS = tps
		}
	}
	t := o.track
	if t != nil && c.reqs[o.info.ID] != t {
		t = nil // the id now belongs to a newer request
	}
	if t != nil && o.state.Terminal() {
		t.obsDone, t.obsDoneAt = true, now
	}
	defer c.signal()
	if !fallback && !o.calibration {
		return
	}
	if o.explicit {
		g.chunkUsage = true
	}
	counterSeen := o.explicit && t != nil && t.counting
	if o.state == Complete {
		if tps, ok := o.inputTPS(now); ok {
			c.addInputSample(g, tps)
		}
		if !counterSeen {
			if tps, ok := o.outputTPS(now); ok {
				c.addOutputSample(g, tps, false)
			}
		}
	}
	if t == nil {
		return
	}
	switch {
	case o.explicit:
		tokens := o.tokens
		if reason := c.applyCountersLocked(t, sourceFallback, nil, &tokens, o.state.Terminal(), now); reason != "" {
			c.m.invalidEvent(reason)
		}
	case o.state.Terminal() && !t.finalized:
		c.finalizeLocked(t, now)
	}
}
