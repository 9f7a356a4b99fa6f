package sim

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/workload"
)

// Epoch is the virtual wall time of a run's start; nothing reads the real
// clock.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options tune the hub side of a run; the zero value means the hub's
// defaults (dispatch.DefaultLimits).
type Options struct {
	// Seed seeds the load balancers' random source (the same stream for
	// every arm: common random numbers).
	Seed uint64
	// MaxRoutingWait is the routing deadline after a request starts (the
	// hub's 60 s for a request without x-max-wait-ms).
	MaxRoutingWait time.Duration
	// MaxWaitPoll caps one sleep of a timed routing wait (25 ms).
	MaxWaitPoll time.Duration
}

func (o Options) withDefaults() Options {
	d := dispatch.DefaultLimits()
	if o.MaxRoutingWait <= 0 {
		o.MaxRoutingWait = d.MaxRoutingWait
	}
	if o.MaxWaitPoll <= 0 {
		o.MaxWaitPoll = d.MaxWaitPoll
	}
	return o
}

// Request phases on an engine.
const (
	phTransit    = iota // between the hub and the engine
	phPending           // in the engine's FIFO, waiting for a slot
	phPrefill           // holding a slot, in the shared prefill
	phFirstToken        // prefilled, waiting out the TTFT base
	phDecode            // streaming output
	phDone
)

// flight is one request's stay on one engine.
type flight struct {
	r        *reqState
	e        *engine
	phase    int
	arriveAt int64
	lease    *kvcache.Lease
	cached   int
	// estWork is the oracle's estimate of the solo prefill work (ns) from
	// the cache contents at routing time; only the oracle arm sets it.
	estWork     int64
	psRemaining float64
	finish      int64
}

// reqState is one workload request during a run.
type reqState struct {
	idx   int
	pr    *preq
	wr    *workload.Request
	start int64
	// pass is the request's routing state across its passes (the
	// load balancer's request with its set-once session class, and the
	// wait deadline).
	pass  dispatch.Pass
	waits int

	dispatched bool
	cluster    string
	rankDepth  int
	sessState  routing.SessionState
	sessSel    string
	routed     int64 // when the decision was made
	ttft       int64
	e2e        int64
	cached     int
	rejected   bool
	// rejectReason is why: an admission reason (dispatch.Reason*), or
	// the kind of a pass that found no cluster.
	rejectReason string
	done         bool
}

// engine is one mock engine with its pylon.
type engine struct {
	id    string
	c     *simCluster
	spec  *EngineSpec
	kv    *kvcache.Cache
	ps    procShare
	psVer uint64

	running int       // slots held
	fifo    []*flight // waiting for a slot
	active  []*flight // holding a slot
	transit []*flight // oracle arm: on their way here

	// pylon view: live requests by phase and their x-input-tokens.
	pending, prefilling, firstToken, decoding int
	queuedInput, liveInput                    uint64

	reportSeq     uint64
	lastReport    int64
	nextPeriodic  int64
	changePending bool
}

type simCluster struct {
	id      string
	rtt     time.Duration
	engines []*engine
}

type evKind uint8

const (
	evArrive evKind = iota
	evDecide
	evEngineArrive
	evPrefill
	evHeaders
	evFirstToken
	evFinish
	evReport
	evApply
)

type event struct {
	at   int64
	seq  uint64
	kind evKind
	n    uint64
	r    *reqState
	f    *flight
	e    *engine
	reg  *protocol.Registration
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// runner is the state of one arm's run. It is single-threaded.
type runner struct {
	p     *Prepared
	fleet *Fleet
	opts  Options
	arm   Arm

	now int64
	q   eventQueue
	seq uint64

	clusters []*simCluster
	engines  []*engine
	byID     map[string]*engine

	// hub is nil for the oracle; rng is the load balancers' stream.
	hub *hub
	rng *rand.Rand

	// gateway: session → last serving cluster
	lastCluster map[string]string

	reqs      []reqState
	doneCount int
	workerPos []int
	interval  int64
	gap       int64
}

// Run replays p through one arm on a fresh fleet and returns its result.
func Run(p *Prepared, fleet Fleet, arm Arm, opts Options) (*ArmResult, error) {
	r, err := newRunner(p, fleet, arm, opts)
	if err != nil {
		return nil, err
	}
	for r.step() {
	}
	return r.result(), nil
}

// step handles the next event; false when the run is over. Pylons report
// forever, so the run ends when every request has.
func (r *runner) step() bool {
	if len(r.q) == 0 || r.doneCount == len(r.reqs) {
		return false
	}
	ev := heap.Pop(&r.q).(event)
	r.now = ev.at
	if r.hub != nil {
		r.hub.clk.Set(r.wall(r.now))
	}
	r.handle(&ev)
	return true
}

func newRunner(p *Prepared, fleet Fleet, arm Arm, opts Options) (*runner, error) {
	fleet = fleet.withDefaults()
	if err := fleet.Validate(); err != nil {
		return nil, err
	}
	if fleet.BlockTokens != p.BlockTokens {
		return nil, fmt.Errorf("workload prepared for %d-token blocks, fleet has %d", p.BlockTokens, fleet.BlockTokens)
	}
	r := &runner{p: p, fleet: &fleet, opts: opts.withDefaults(), arm: arm,
		byID:        map[string]*engine{},
		lastCluster: map[string]string{},
		interval:    int64(msDuration(fleet.Pylon.IntervalMs)),
		gap:         int64(msDuration(fleet.Pylon.ChangeGapMs)),
	}
	if err := r.build(); err != nil {
		return nil, err
	}
	r.start()
	return r, nil
}

func (r *runner) wall(ns int64) time.Time { return Epoch.Add(time.Duration(ns)) }

func (r *runner) build() error {
	cs := slices.Clone(r.fleet.Clusters)
	slices.SortFunc(cs, func(a, b Cluster) int { return strings.Compare(a.ID, b.ID) })
	for i := range cs {
		c := &cs[i]
		sc := &simCluster{id: c.ID, rtt: r.fleet.rtt(c)}
		for k := range c.Engines {
			kv, err := kvcache.New(kvcache.Config{BlockTokens: r.fleet.BlockTokens, CharsPerToken: workload.CharsPerToken,
				CapacityTokens: c.Engine.KVCapacityTokens})
			if err != nil {
				return err
			}
			e := &engine{id: c.ID + "/" + strconv.Itoa(k), c: sc, spec: &c.Engine, kv: kv}
			sc.engines = append(sc.engines, e)
			r.engines = append(r.engines, e)
			r.byID[e.id] = e
		}
		r.clusters = append(r.clusters, sc)
	}
	if r.arm.Oracle {
		return nil
	}
	h, err := newHub([]byte(replaceModel(string(r.arm.Config), r.p.Model)), r.p.Model, r.opts)
	if err != nil {
		return armError(r.arm.Name, err)
	}
	r.hub = h
	r.rng = rand.New(rand.NewPCG(r.opts.Seed, 0x73696d)) //nolint:gosec // G404: a seeded simulation stream
	return nil
}

// replaceModel puts the workload's model id (as a JSON string) where the
// arm's config says "$MODEL".
func replaceModel(s, model string) string {
	b, err := json.Marshal(model)
	if err != nil {
		return s
	}
	return strings.ReplaceAll(s, `"$MODEL"`, string(b))
}

func (r *runner) schedule(at int64, ev event) {
	ev.at = at
	r.seq++
	ev.seq = r.seq
	heap.Push(&r.q, ev)
}

// start registers every pylon at time 0 (the hub sees all backends before
// traffic), staggers their periodic reports, and schedules the arrivals.
func (r *runner) start() {
	if r.hub != nil {
		for k, e := range r.engines {
			r.hub.store.Apply(state.Backend{ID: e.id, ClusterID: e.c.id, URL: "quic://127.0.0.1:1"}, r.registration(e), e.c.rtt, true)
			e.nextPeriodic = r.interval * int64(k+1) / int64(len(r.engines))
			r.schedule(e.nextPeriodic, event{kind: evReport, e: e, n: e.reportSeq})
		}
	}
	w := r.p.W
	r.reqs = make([]reqState, len(w.Requests))
	for i := range r.reqs {
		r.reqs[i] = reqState{idx: i, pr: &r.p.reqs[i], wr: &w.Requests[i]}
	}
	if w.Header.Mode == workload.ModeClosed {
		r.workerPos = make([]int, len(r.p.workers))
		for wk, list := range r.p.workers {
			if len(list) > 0 {
				r.schedule(0, event{kind: evArrive, r: &r.reqs[list[0]]})
				r.workerPos[wk] = 1
			}
		}
		return
	}
	for i := range r.reqs {
		r.schedule(int64(time.Duration(w.Requests[i].AtMs)*time.Millisecond), event{kind: evArrive, r: &r.reqs[i]})
	}
}

func (r *runner) handle(ev *event) {
	switch ev.kind {
	case evArrive:
		r.arrive(ev.r)
	case evDecide:
		r.decide(ev.r)
	case evEngineArrive:
		r.engineArrive(ev.f)
	case evPrefill:
		if ev.n == ev.e.psVer {
			ev.e.ps.settle(r.now, r.prefillDone)
			r.rearm(ev.e)
		}
	case evHeaders:
		// The gateway learns x-stargate-cluster-id from a 2xx's headers.
		if s := ev.f.r.pr.session; s != "" {
			r.lastCluster[s] = ev.f.e.c.id
		}
	case evFirstToken:
		r.firstToken(ev.f)
	case evFinish:
		r.finish(ev.f)
	case evReport:
		r.report(ev.e, ev.n)
	case evApply:
		e := ev.e
		r.hub.store.Apply(state.Backend{ID: e.id, ClusterID: e.c.id, URL: "quic://127.0.0.1:1"}, ev.reg, e.c.rtt, true)
	}
}

// arrive is the gateway sending a request to the hub.
func (r *runner) arrive(rs *reqState) {
	rs.start = r.now
	if r.hub != nil {
		rreq := routing.Request{
			ID:          strconv.Itoa(rs.idx),
			InputTokens: uint64(rs.pr.tokens),
			AffinityKey: rs.pr.affinity,
			ReceivedAt:  r.wall(r.now),
		}
		if r.hub.route.LastClusterAffinity && rs.pr.session != "" {
			rreq.LastClusterID = r.lastCluster[rs.pr.session]
		}
		rs.pass = r.hub.newPass(rreq)
	}
	r.decide(rs)
}

// decide runs one routing pass for rs and acts on its outcome: a wait
// schedules the next pass, a choice dispatches to the reserved backend,
// anything else rejects the request (a 503 on the hub). The pass state,
// and with it the set-once session classification, lives in rs across
// waits.
func (r *runner) decide(rs *reqState) {
	if r.arm.Oracle {
		r.oracleDecide(rs)
		return
	}
	out, b, ok := r.hub.pass(&rs.pass, r.wall(r.now), r.rng)
	switch {
	case !ok:
		r.reject(rs, "no_backend")
	case out.Kind == dispatch.Wait:
		rs.waits++
		r.schedule(r.now+int64(out.Wait), event{kind: evDecide, r: rs})
	case out.Kind == dispatch.Chosen:
		rs.rankDepth = out.Decision.RankDepth
		if out.SessionSelection != "" {
			rs.sessState, rs.sessSel = rs.pass.Req.Session, out.SessionSelection
		}
		r.dispatch(rs, r.byID[b.ID])
	case out.Kind == dispatch.Rejected:
		r.reject(rs, out.Reason)
	default:
		r.reject(rs, out.Kind.String())
	}
}

func (r *runner) reject(rs *reqState, reason string) {
	rs.rejected = true
	rs.rejectReason = reason
	rs.routed = r.now
	r.complete(rs, r.now)
}

// complete ends a request for its client: a closed-loop worker sends its
// next request at once.
func (r *runner) complete(rs *reqState, at int64) {
	rs.done = true
	r.doneCount++
	if r.workerPos == nil {
		return
	}
	wk := rs.wr.Worker
	list := r.p.workers[wk]
	if pos := r.workerPos[wk]; pos < len(list) {
		r.workerPos[wk] = pos + 1
		r.schedule(at, event{kind: evArrive, r: &r.reqs[list[pos]]})
	}
}

func (r *runner) dispatch(rs *reqState, e *engine) *flight {
	rs.dispatched = true
	rs.routed = r.now
	rs.cluster = e.c.id
	f := &flight{r: rs, e: e, phase: phTransit, arriveAt: r.now + int64(e.c.rtt/2)}
	if r.arm.Oracle {
		e.transit = append(e.transit, f)
	}
	r.schedule(f.arriveAt, event{kind: evEngineArrive, f: f})
	return f
}

func (r *runner) engineArrive(f *flight) {
	e := f.e
	if r.arm.Oracle {
		e.transit = slices.DeleteFunc(e.transit, func(x *flight) bool { return x == f })
	}
	tok := uint64(f.r.pr.tokens)
	e.pending++
	e.queuedInput += tok
	e.liveInput += tok
	f.phase = phPending
	e.fifo = append(e.fifo, f)
	r.tryStart(e)
	r.changed(e)
}

// tryStart gives free slots to the FIFO's head.
func (r *runner) tryStart(e *engine) {
	for len(e.fifo) > 0 && (e.spec.MaxConcurrency == 0 || e.running < e.spec.MaxConcurrency) {
		f := e.fifo[0]
		e.fifo = e.fifo[1:]
		e.running++
		e.active = append(e.active, f)
		e.pending--
		e.prefilling++
		f.phase = phPrefill
		f.lease = e.kv.Lookup(f.r.pr.prompt)
		f.cached = f.lease.CachedTokens()
		work := e.spec.prefillWork(f.r.pr.tokens-f.cached, f.cached)
		if work <= 0 {
			r.prefillDone(f)
			continue
		}
		e.ps.join(r.now, f, int64(work), r.prefillDone)
		// join settled first; anything it finished was due now.
		r.rearm(e)
	}
}

// rearm points the engine's prefill event at its earliest completion.
func (r *runner) rearm(e *engine) {
	e.psVer++
	if d, ok := e.ps.deadline(); ok {
		r.schedule(d, event{kind: evPrefill, e: e, n: e.psVer})
	}
}

func (r *runner) prefillDone(f *flight) {
	e := f.e
	f.lease.Commit()
	e.prefilling--
	e.firstToken++
	f.phase = phFirstToken
	half := int64(e.c.rtt / 2)
	r.schedule(r.now+half, event{kind: evHeaders, f: f})
	first := r.now + int64(msDuration(e.spec.TTFTMs))
	f.finish = first + int64(f.r.wr.OutputTokens-1)*int64(msDuration(e.spec.TokenDelayMs))
	r.schedule(first, event{kind: evFirstToken, f: f})
}

func (r *runner) firstToken(f *flight) {
	e := f.e
	e.firstToken--
	e.decoding++
	e.queuedInput -= uint64(f.r.pr.tokens)
	f.phase = phDecode
	rs := f.r
	rs.ttft = r.now + int64(e.c.rtt/2) - rs.start
	rs.cached = f.cached
	r.schedule(f.finish, event{kind: evFinish, f: f})
	r.changed(e)
}

func (r *runner) finish(f *flight) {
	e := f.e
	rs := f.r
	f.lease.Release(replyMessage(r.p.W.Header.Seed, rs.pr.text, rs.wr.Turn, rs.wr.OutputTokens))
	f.phase = phDone
	e.decoding--
	e.liveInput -= uint64(rs.pr.tokens)
	e.running--
	e.active = slices.DeleteFunc(e.active, func(x *flight) bool { return x == f })
	end := r.now + int64(e.c.rtt/2)
	rs.e2e = end - rs.start
	r.complete(rs, end)
	r.tryStart(e)
	r.changed(e)
}

// changed is a pylon stats change: with a change gap, the pylon reports
// as soon as the gap since its last report allows.
func (r *runner) changed(e *engine) {
	if r.hub == nil || r.gap <= 0 || e.changePending {
		return
	}
	at := max(r.now, e.lastReport+r.gap)
	if at >= e.nextPeriodic {
		return
	}
	e.changePending = true
	r.schedule(at, event{kind: evReport, e: e, n: e.reportSeq})
}

// report is a pylon sending its snapshot; the hub applies it half an RTT
// later (dropping that backend's reservations, since the report now counts
// its requests; docs/design/routing-state.md#reservations).
func (r *runner) report(e *engine, seq uint64) {
	if seq != e.reportSeq {
		return
	}
	reg := r.registration(e)
	e.reportSeq++
	e.lastReport = r.now
	e.changePending = false
	e.nextPeriodic = r.now + r.interval
	r.schedule(e.nextPeriodic, event{kind: evReport, e: e, n: e.reportSeq})
	r.schedule(r.now+int64(e.c.rtt/2), event{kind: evApply, e: e, reg: reg})
}

// registration is what the engine's pylon publishes now
// (docs/design/statistics.md#fields):
// queue fields from the live requests' phases, a pinned input TPS, the
// engine's concurrency when configured, and the KV counters.
func (r *runner) registration(e *engine) *protocol.Registration {
	kv := e.kv.Stats()
	tps := e.spec.reportedTPS()
	st := &protocol.ModelStats{
		LastMeanInputTPS:        tps,
		MaxInputTPS:             tps,
		QueueSize:               uint64(e.pending + e.prefilling + e.firstToken),
		QueuedInputSize:         e.queuedInput,
		NumRunningQueries:       uint64(e.pending + e.prefilling + e.firstToken + e.decoding),
		TotalQueryInputSize:     e.liveInput,
		InputProcessingQueries:  uint64(e.prefilling + e.firstToken),
		OutputGenerationQueries: uint64(e.decoding),
		KVCacheCapacityTokens:   uint64(kv.CapacityTokens),
		KVCacheUsedTokens:       uint64(kv.UsedTokens),
		KVCacheFreeTokens:       uint64(kv.CapacityTokens - kv.UsedTokens),
		StatsObservedAtUnixMs:   uint64(r.wall(r.now).UnixMilli()),
	}
	if e.spec.ReportMaxConcurrency {
		st.MaxEngineConcurrency = uint64(e.spec.MaxConcurrency)
	}
	return &protocol.Registration{V: protocol.Version, Seq: e.reportSeq + 1, SentAtUnixMs: r.wall(r.now).UnixMilli(),
		InferenceServerID: e.id, ClusterID: e.c.id,
		Models: map[string]protocol.ModelEntry{r.p.Model: {Status: protocol.StatusActive, Stats: st}}}
}
