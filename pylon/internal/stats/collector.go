package stats

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Request-id prefixes of pylon's own traffic. Engine events for
// calibration ids are dropped (calibration is measured from the pylon's own
// observations); canary ids of this process resolve to their generation.
const (
	CalibrationPrefix = "calibration-"
	CanaryPrefix      = "canary-"
)

// throughputSource is where a request's counter updates come from; its
// value is the source label on the engine-stats metrics.
type throughputSource string

// Throughput sources.
const (
	sourceEngine   throughputSource = "engine_stats_stream"
	sourceFallback throughputSource = "openai_fallback"
)

// ErrRunning is returned by a second concurrent call to Run.
var ErrRunning = errors.New("stats: collector is already running")

// Collector aggregates every statistics source into one protocol.ModelStats
// per model generation. Its methods are safe for concurrent use.
type Collector struct {
	cfg        Config
	clk        clock.Clock
	log        *slog.Logger
	streamURLs []string // per engine
	// kvURL is engine 0's KV stats URL, empty when polling is off; kvURLs
	// holds the others' (engine i at kvURLs[i-1]).
	kvURL   string
	kvURLs  []string
	scope   string
	m       *metrics
	changed chan struct{}
	running atomic.Bool
	ids     atomic.Uint64
	// streamSeen is per engine: its stats stream has sent a valid event,
	// so the OpenAI fallback can no longer take over its requests
	// (runEngineStream enables it only before one); until a fallback
	// does, their output chunks feed no statistic and are not parsed.
	streamSeen []atomic.Bool

	mu       sync.Mutex
	seq      uint64
	gens     map[string]*generation
	bySeq    map[uint64]*generation
	reqs     map[string]*reqTrack
	counting map[throughputSource]int // entries of reqs with live counters, by source
	due      dueHeap                  // when each entry of reqs is next looked at by the sweep
	fallback []bool                   // per engine: the OpenAI fallback feeds the throughput stats of its requests
	kvFailed []bool                   // per engine: the last KV poll failed (logged once per failure run)

	// Test hooks, set before Run.
	onBackoff func(reason string, d time.Duration) // after the backoff timer is armed
	onLine    func()                               // after a stream line is handled
}

// generation is the state of one (model, sequence) pair. Keying state by
// generation means a model removed and added again never mixes old and new
// statistics, and a late update for a retired generation changes nothing.
// Everything is guarded by Collector.mu.
type generation struct {
	model   string
	seq     uint64
	retired bool
	live    map[*Observer]struct{}

	dist          welford
	seed          float64 // --initial-input-tps, 0 when not seeded
	lastMean      float64 // published last_mean_input_tps
	maxIn         float64 // published max_input_tps: the peak of lastMean
	out           window
	maxOut        float64
	authoritative bool      // counter-derived output samples exist
	lastEvent     time.Time // last stats event; zero after a stale clear
	observedAt    time.Time // stats_observed_at

	kvCap, kvUsed, kvFree            uint64  // summed over engines
	kv                               []kvVal // per engine: the last successful poll
	chunkUsage, engineStream, kvSeen bool
	warnedTPS                        bool // a sample above MaxTPS was logged
}

// kvVal is one engine's last KV values for a generation.
type kvVal struct{ capacity, used, free uint64 }

// reqTrack is the aggregator's memory of one request id: who owns it and,
// once counter updates arrive, its counters. A finalized track is a
// tombstone that rejects late events until RequestTTL has passed.
type reqTrack struct {
	gen       *generation
	engine    int  // the engine whose stats events count for the id
	owned     bool // a tunnel observer owns the id; false for a canary
	obsDone   bool
	obsDoneAt time.Time

	counting bool
	source   throughputSource
	in, out  counterState
	lastSeen time.Time

	finalized   bool
	finalizedAt time.Time
}

// finalizeLocked makes t a tombstone: later events for its id are
// rejected until the sweep forgets it.
func (c *Collector) finalizeLocked(t *reqTrack, now time.Time) {
	c.setCountingLocked(t, false)
	t.finalized = true
	t.finalizedAt = now
}

// setCountingLocked sets whether t's counters are live, keeping the
// per-source count the scrape reports (pylon_engine_stats_live_requests)
// in step, so that a scrape need not walk the whole request memory.
func (c *Collector) setCountingLocked(t *reqTrack, on bool) {
	if t.counting == on {
		return
	}
	t.counting = on
	if on {
		c.counting[t.source]++
	} else {
		c.counting[t.source]--
	}
}

// New validates cfg and returns a Collector with no models. Register its
// models with AddModel and start its background work with Run.
func New(cfg Config) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	engines := cfg.engineURLs()
	c := &Collector{
		cfg:      cfg,
		clk:      cfg.Clock,
		log:      cfg.Log,
		scope:    newScope(),
		changed:  make(chan struct{}, 1),
		gens:     make(map[string]*generation),
		bySeq:    make(map[uint64]*generation),
		reqs:     make(map[string]*reqTrack),
		counting: map[throughputSource]int{sourceEngine: 0, sourceFallback: 0},
		fallback: make([]bool, len(engines)),
		kvFailed: make([]bool, len(engines)),

		streamSeen: make([]atomic.Bool, len(engines)),
	}
	for i, base := range engines {
		c.streamURLs = append(c.streamURLs, base+cfg.StreamPath)
		c.fallback[i] = cfg.StreamMode == ModeOff
		if cfg.KVCachePath != "" {
			if i == 0 {
				c.kvURL = base + cfg.KVCachePath
			} else {
				c.kvURLs = append(c.kvURLs, base+cfg.KVCachePath)
			}
		}
	}
	m, err := newMetrics(cfg.Registerer, c)
	if err != nil {
		return nil, err
	}
	c.m = m
	return c, nil
}

// newScope returns a random UUIDv4 naming this process in generated ids.
func newScope() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Run consumes the engine stats stream of every engine (unless the mode is
// off), polls every engine's KV stats each second when a path is
// configured and sweeps stale state every second, until ctx is done. In
// auto mode an engine's stream consumer ends early when it enables the
// OpenAI fallback for that engine; that exit is expected and the rest
// keeps running. Run returns nil once every goroutine it started has
// stopped, or ErrRunning if the Collector is already running.
func (c *Collector) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	var wg sync.WaitGroup
	for i := range c.streamURLs {
		if c.cfg.StreamMode != ModeOff {
			wg.Go(func() { c.runEngineStream(ctx, i) })
		}
		if c.kvURLOf(i) != "" {
			wg.Go(func() { c.runKVPoll(ctx, i) })
		}
	}
	wg.Go(func() { c.every(ctx, SweepInterval, func() { c.sweep(c.clk.Now()) }) })
	wg.Wait()
	return nil
}

// every calls f each period until ctx is done; the next period starts when
// f returns, so a slow f never queues calls.
func (c *Collector) every(ctx context.Context, period time.Duration, f func()) {
	t := c.clk.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
			t.Reset(period)
		}
	}
}

// AddModel begins a new generation of model; its stats start empty (apart
// from the --initial-input-tps seed). A model that already has a generation
// is retired first, so the two never share state.
func (c *Collector) AddModel(model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.gens[model]; old != nil {
		c.retireLocked(old)
	}
	c.seq++
	g := &generation{model: model, seq: c.seq, live: make(map[*Observer]struct{}), kv: make([]kvVal, len(c.streamURLs))}
	if x := c.cfg.InitialInputTPS; x > 0 {
		g.dist, g.seed, g.lastMean, g.maxIn = seeded(x), x, x, x
	}
	c.gens[model] = g
	c.bySeq[g.seq] = g
	c.signal()
}

// RemoveModel retires model's generation: its stats, live requests and
// request memory are dropped, and its outstanding observers become inert.
func (c *Collector) RemoveModel(model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.gens[model]; g != nil {
		c.retireLocked(g)
		c.signal()
	}
}

func (c *Collector) retireLocked(g *generation) {
	g.retired = true
	delete(c.gens, g.model)
	delete(c.bySeq, g.seq)
	for id, t := range c.reqs {
		if t.gen == g {
			c.forgetLocked(id, t)
		}
	}
	clear(g.live)
}

// Models returns the models that have a generation, sorted.
func (c *Collector) Models() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.gens))
	for m := range c.gens {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Changed returns a channel that receives a value (coalesced: one pending
// value at most, and the sender never blocks) after any change that can
// alter a model's published stats, so the registration stream can send at
// once: a model added or removed, every observer call that records
// something, an engine event that yields a sample or a first label, a KV
// change and a stale clear. A change of stats_observed_at_unix_ms alone
// does not signal.
func (c *Collector) Changed() <-chan struct{} { return c.changed }

func (c *Collector) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// NewCalibrationID returns a fresh calibration request id for model's
// current generation, "calibration-<scope>-g<seq>-<n>": the process scope
// and generation let engine events for it be recognised as the pylon's own.
func (c *Collector) NewCalibrationID(model string) (string, bool) {
	return c.newID(CalibrationPrefix, model)
}

// NewCanaryID returns a fresh canary request id for model's current
// generation. Engine events carrying it are attributed to that generation.
func (c *Collector) NewCanaryID(model string) (string, bool) {
	return c.newID(CanaryPrefix, model)
}

func (c *Collector) newID(prefix, model string) (string, bool) {
	c.mu.Lock()
	g := c.gens[model]
	c.mu.Unlock()
	if g == nil {
		return "", false
	}
	return fmt.Sprintf("%s%s-g%d-%d", prefix, c.scope, g.seq, c.ids.Add(1)), true
}

// resolveCanaryLocked maps a canary id of this process to its live
// generation.
func (c *Collector) resolveCanaryLocked(id string) *generation {
	rest, ok := strings.CutPrefix(id, CanaryPrefix+c.scope+"-g")
	if !ok {
		return nil
	}
	digits, _, _ := strings.Cut(rest, "-")
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return nil
	}
	return c.bySeq[seq]
}

// Stats returns model's current statistics (every field of
// docs/design/statistics.md#fields), or false when the model has no
// generation.
func (c *Collector) Stats(model string) (protocol.ModelStats, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gens[model]
	if g == nil {
		return protocol.ModelStats{}, false
	}
	return c.statsLocked(g), true
}

func (c *Collector) statsLocked(g *generation) protocol.ModelStats {
	// Every sample was checked on the way in; boundTPS is the last guard,
	// so whatever path a value took the hub never receives NaN, an
	// infinity, a negative or more than MaxTPS.
	s := protocol.ModelStats{
		// The engine does not report its concurrency; the operator may
		// (--max-engine-concurrency), else it stays 0.
		MaxEngineConcurrency:  c.cfg.MaxEngineConcurrency,
		LastMeanInputTPS:      boundTPS(g.lastMean),
		MaxInputTPS:           boundTPS(g.maxIn),
		MaxOutputTPS:          boundTPS(g.maxOut),
		KVCacheCapacityTokens: g.kvCap,
		KVCacheUsedTokens:     g.kvUsed,
		KVCacheFreeTokens:     g.kvFree,
		NumRunningQueries:     uint64(len(g.live)),
	}
	if !g.observedAt.IsZero() {
		s.StatsObservedAtUnixMs = uint64(max(g.observedAt.UnixMilli(), 0))
	}
	work := make(map[uint32]uint64)
	var liveSum float64
	var liveN int
	for o := range g.live {
		s.TotalQueryInputSize = addSat(s.TotalQueryInputSize, o.info.InputTokens)
		if prio, tokens, ok := o.promptWork(); ok {
			work[prio] = addSat(work[prio], tokens)
			s.QueuedInputSize = addSat(s.QueuedInputSize, tokens)
		}
		switch o.state {
		case Pending:
			s.QueueSize++
		case InputProcessing:
			s.QueueSize++
			s.InputProcessingQueries++
		case OutputGeneration:
			s.OutputGenerationQueries++
			if o.liveTPS > 0 {
				liveSum += o.liveTPS
				liveN++
			}
		}
	}
	if validTPS(g.lastMean) {
		s.QueueTimeEstimateMsByPriority = make(map[uint32]uint64, len(work))
		prios := make([]uint32, 0, len(work))
		for p := range work {
			prios = append(prios, p)
		}
		slices.Sort(prios)
		var cum uint64
		for _, p := range prios {
			cum = addSat(cum, work[p])
			s.QueueTimeEstimateMsByPriority[p] = queueMs(cum, g.lastMean)
		}
	}
	s.OutputTPS = g.out.mean()
	if !g.authoritative && liveN > 0 { // live estimates exist only for fallback requests
		s.OutputTPS = max(s.OutputTPS, liveSum/float64(liveN))
	}
	s.OutputTPS = boundTPS(s.OutputTPS)
	if g.chunkUsage {
		s.StatsCapabilities = append(s.StatsCapabilities, protocol.CapabilityChunkUsage)
		s.StatsSources = append(s.StatsSources, protocol.SourceChunkUsage)
	}
	if g.engineStream {
		s.StatsCapabilities = append(s.StatsCapabilities, protocol.CapabilityEngineStream)
		s.StatsSources = append(s.StatsSources, protocol.SourceEngineStatsStream)
	}
	if g.kvSeen {
		s.StatsCapabilities = append(s.StatsCapabilities, protocol.CapabilityKVCacheHTTP)
		s.StatsSources = append(s.StatsSources, protocol.SourceKVCacheStats)
	}
	return s
}

// LocalQueueMs is queue admission's local estimate
// (docs/design/statistics.md#queue-admission): ceil(prompt work at
// priorities ≤ prio of Pending and InputProcessing requests, leaving out
// self's own contribution, / last_mean_input_tps × 1000). ok is false when
// model has no generation or no valid TPS. self may be nil.
func (c *Collector) LocalQueueMs(model string, prio uint32, self *Observer) (ms uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gens[model]
	if g == nil || !validTPS(g.lastMean) {
		return 0, false
	}
	// The hub's free-slot rule (docs/design/algorithms.md#free-slot-rule):
	// with a known engine concurrency and a slot free for this request,
	// the hub expects no queue, so neither may the admission check, or
	// every request that arrives while another prefills is refused and
	// sent away from its cache.
	if mec := c.cfg.MaxEngineConcurrency; mec > 0 {
		others := uint64(len(g.live))
		if _, in := g.live[self]; in {
			others--
		}
		if others < mec {
			return 0, true
		}
	}
	var work uint64
	for o := range g.live {
		if o == self {
			continue
		}
		if p, tokens, ok := o.promptWork(); ok && p <= prio {
			work = addSat(work, tokens)
		}
	}
	return queueMs(work, g.lastMean), true
}

// addInputSample folds one input-TPS sample into g's distribution and moves
// last_mean_input_tps once the distribution holds MinInputSamples samples
// (or stays at the seed when pinned).
func (c *Collector) addInputSample(g *generation, tps float64) {
	if c.implausibleLocked(g, "input", tps) || !g.dist.add(tps) || g.dist.count < MinInputSamples || !validTPS(g.dist.mean) {
		return
	}
	if c.cfg.PinInputTPS && g.seed > 0 {
		g.lastMean = g.seed
		return
	}
	g.lastMean = g.dist.mean
	g.maxIn = max(g.maxIn, g.lastMean)
}

// implausibleLocked reports whether a throughput sample must be dropped
// (not validTPS). One above MaxTPS is logged once per generation: it means
// the engine reports counters no engine can produce, which an operator
// should know, but a broken engine must not flood the log.
func (c *Collector) implausibleLocked(g *generation, kind string, tps float64) bool {
	if validTPS(tps) {
		return false
	}
	if tps > MaxTPS && !g.warnedTPS {
		g.warnedTPS = true
		c.log.Warn("dropping an implausible throughput sample from the engine; later ones are dropped without a log",
			"model", g.model, "kind", kind, "tokens_per_second", tps, "limit", float64(MaxTPS))
	}
	return true
}

// addOutputSample records one output-TPS sample: it raises max_output_tps
// and enters the window; a counter-derived sample makes the window
// authoritative over the fallback's live estimates.
func (c *Collector) addOutputSample(g *generation, tps float64, counter bool) {
	if c.implausibleLocked(g, "output", tps) {
		return
	}
	g.maxOut = max(g.maxOut, tps)
	g.out.push(tps)
	if counter {
		g.authoritative = true
	}
}

// applyCountersLocked applies one cumulative counter update to t
// (docs/design/statistics.md#aggregation) and reports the invalid reason
// when it is dropped.
func (c *Collector) applyCountersLocked(t *reqTrack, source throughputSource, in, out *uint64, finished bool, now time.Time) string {
	if t.finalized {
		return ReasonPostFinalize
	}
	if t.counting && ((in != nil && *in < t.in.observed) || (out != nil && *out < t.out.observed)) {
		return ReasonRegressing
	}
	if !t.counting {
		var baseIn, baseOut uint64
		if source == sourceFallback {
			if in != nil {
				baseIn = *in
			}
			if out != nil {
				baseOut = *out
			}
		}
		t.in, t.out = newCounter(baseIn, now), newCounter(baseOut, now)
		t.source = source
		c.setCountingLocked(t, true)
	}
	t.lastSeen = now
	g := t.gen
	g.lastEvent, g.observedAt = now, now
	if source == sourceEngine && !g.engineStream {
		g.engineStream = true
		c.signal()
	}
	if units, d, ok := t.in.observe(in, now); ok {
		if tps, ok := rate(units, d); ok {
			c.addInputSample(g, tps)
			c.signal()
		}
	}
	if units, d, ok := t.out.observe(out, now); ok {
		if tps, ok := rate(units, d); ok {
			c.addOutputSample(g, tps, true)
			c.signal()
		}
	}
	if finished {
		c.finalizeLocked(t, now)
	}
	return ""
}

// handleEvent applies one validated stats event of engine. An id counts
// only for the engine its request was dispatched to, so two engines that
// saw the same id (a retried or reused id) cannot mix their counters.
func (c *Collector) handleEvent(engine int, ev engineEvent) {
	if bytes.HasPrefix(ev.requestID, []byte(CalibrationPrefix)) {
		c.m.invalidEvent(ReasonCalibration)
		return
	}
	now := c.clk.Now()
	c.mu.Lock()
	t := c.reqs[string(ev.requestID)]
	if t == nil {
		id := string(ev.requestID)
		if g := c.resolveCanaryLocked(id); g != nil {
			t = &reqTrack{gen: g, engine: engine, lastSeen: now}
			c.rememberLocked(id, t, now)
		}
	}
	reason := ReasonUnknownRequest
	if t != nil && !t.gen.retired && t.engine == engine {
		reason = c.applyCountersLocked(t, sourceEngine, ev.processed.ptr(), ev.generated.ptr(), ev.finished, now)
	}
	c.mu.Unlock()
	if reason != "" {
		c.log.Debug("dropping engine stats event", "request_id", string(ev.requestID), "model", string(ev.model), "reason", reason)
		c.m.invalidEvent(reason)
	}
}

// enableFallback switches engine's throughput source to the OpenAI
// fallback (auto mode, after an unsupported status before any valid
// event): the requests dispatched to it are measured from their responses.
func (c *Collector) enableFallback(engine int) {
	c.mu.Lock()
	was := c.fallback[engine]
	c.fallback[engine] = true
	c.streamSeen[engine].Store(false)
	c.mu.Unlock()
	if !was {
		c.log.Warn("engine stats stream unsupported; using OpenAI fallback observation", "url", c.streamURLs[engine])
		c.m.sourceTransition(sourceEngine, sourceFallback, "unsupported")
	}
}

// FallbackActive reports whether the OpenAI fallback currently feeds the
// throughput statistics of at least one engine (mode off, or auto after an
// engine's stream was unsupported).
func (c *Collector) FallbackActive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.fallback, true)
}

// EngineFallbackActive reports whether the OpenAI fallback feeds the
// throughput statistics of the requests sent to engine.
func (c *Collector) EngineFallbackActive(engine int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return engine >= 0 && engine < len(c.fallback) && c.fallback[engine]
}

// noteStreamEvent records that engine's stats stream sent a valid event.
func (c *Collector) noteStreamEvent(engine int) {
	if engine >= 0 && engine < len(c.streamSeen) && !c.streamSeen[engine].Load() {
		c.streamSeen[engine].Store(true)
	}
}

// streamMeasured reports whether engine's requests are measured from its
// stats stream for good, so their output chunks need no token count.
func (c *Collector) streamMeasured(engine int) bool {
	return engine >= 0 && engine < len(c.streamSeen) && c.streamSeen[engine].Load()
}

// fallbackLocked reports whether engine is in fallback mode.
func (c *Collector) fallbackLocked(engine int) bool {
	return engine >= 0 && engine < len(c.fallback) && c.fallback[engine]
}

func (c *Collector) sourceLocked() throughputSource {
	if slices.Contains(c.fallback, true) {
		return sourceFallback
	}
	return sourceEngine
}

// kvURLOf is engine's KV stats URL, empty when polling is off.
func (c *Collector) kvURLOf(engine int) string {
	if engine == 0 {
		return c.kvURL
	}
	if engine-1 < len(c.kvURLs) {
		return c.kvURLs[engine-1]
	}
	return ""
}

// rememberLocked makes t the request memory of id, replacing an older
// owner or tombstone, and has the sweep look at it a RequestTTL from now,
// the soonest any of its states can expire.
func (c *Collector) rememberLocked(id string, t *reqTrack, now time.Time) {
	if old := c.reqs[id]; old != nil {
		c.setCountingLocked(old, false)
	}
	c.reqs[id] = t
	c.due.push(dueCheck{at: now.Add(RequestTTL), id: id, t: t})
}

// forgetLocked drops id's request memory t.
func (c *Collector) forgetLocked(id string, t *reqTrack) {
	c.setCountingLocked(t, false)
	delete(c.reqs, id)
}

// sweep finalizes requests whose counters saw no event for RequestTTL,
// forgets tombstones and finished owners after RequestTTL, and clears the
// output-TPS window of models without a stats event for ModelTTL. It never
// touches last_mean_input_tps, max_output_tps or the KV values.
//
// It looks only at the request memory that is due: the memory holds every
// id of the last RequestTTL (300,000 at 1,000 requests a second), and a
// walk of all of it every second held Collector.mu against every request
// for tens of milliseconds. A check that is not due yet is pushed back to
// when the entry's state can next expire; an entry's deadlines only move
// later, so no check comes after the deadline it guards.
func (c *Collector) sweep(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.due) > 0 && !c.due[0].at.After(now) {
		d := c.due.pop()
		t := d.t
		if c.reqs[d.id] != t {
			continue // forgotten, or the id belongs to a newer request
		}
		switch {
		case t.finalized:
			if d.at = t.finalizedAt.Add(RequestTTL); !d.at.After(now) {
				c.forgetLocked(d.id, t)
				continue
			}
		case t.counting:
			if d.at = t.lastSeen.Add(RequestTTL); !d.at.After(now) {
				c.finalizeLocked(t, now)
				c.log.Warn("removing stale engine stats request entry", "request_id", d.id, "model", t.gen.model)
				c.m.staleCleanup("request", t.source)
				d.at = now.Add(RequestTTL)
			}
		case !t.owned || t.obsDone:
			if d.at = t.obsDoneAt.Add(RequestTTL); !d.at.After(now) {
				c.forgetLocked(d.id, t)
				continue
			}
		default:
			d.at = now.Add(RequestTTL) // a live owner: look again later
		}
		c.due.push(d)
	}
	for _, g := range c.gens {
		if g.lastEvent.IsZero() || now.Sub(g.lastEvent) < ModelTTL {
			continue
		}
		g.lastEvent = time.Time{}
		if g.out.n == 0 {
			continue
		}
		g.out.clear()
		g.authoritative = false
		g.observedAt = now
		c.log.Warn("clearing stale output TPS", "model", g.model)
		c.m.staleCleanup("stats", c.sourceLocked())
		c.signal()
	}
}
