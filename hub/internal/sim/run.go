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
	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/affinity"
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
	// MaxWaitSleep bounds one sleep of a routing wait (the hub's 1 s);
	// a sleeper wakes sooner at the next report applied (runner.wake).
	MaxWaitSleep time.Duration
	// State configures the hub's state store as the hub's flags do (e.g.
	// state.BackendAffinity); none keeps the store's defaults.
	State []state.Option
	// PrefixIndex bounds the hub's prefix index as the hub's
	// --prefix-index-* flags do; a zero field takes the hub's default
	// (prefixindex.DefaultConfig).
	PrefixIndex prefixindex.Config
	// Warmup are workloads the arm's stack served before this one, in
	// order, as a live campaign runs an arm's workloads one after another
	// on the same processes. Each arm replays them first on the same fleet
	// and carries over what the live stack keeps across runs and routing
	// reads: every pylon's learned input rate (pylonTPS). Nothing else
	// carries over: the live runs salt their prompts, so an earlier run's
	// cache blocks, prefix-index entries and session hints never match a
	// later run's requests.
	Warmup []*Prepared
	// MarkPrefixAtDispatch records a decision's cluster as a holder of the
	// prompt's prefix as soon as the hub dispatches the request, instead
	// of when the cluster's 2xx headers reach the hub as the live hub does
	// (with the mock engine, after the prompt's prefill). It is a what-if:
	// how much routing by load the wait for a new prompt's first answer
	// costs.
	MarkPrefixAtDispatch bool
}

func (o Options) withDefaults() Options {
	d := dispatch.DefaultLimits()
	if o.MaxRoutingWait <= 0 {
		o.MaxRoutingWait = d.MaxRoutingWait
	}
	if o.MaxWaitSleep <= 0 {
		o.MaxWaitSleep = d.MaxWaitSleep
	}
	pi := prefixindex.DefaultConfig()
	if o.PrefixIndex.MaxNodes == 0 {
		o.PrefixIndex.MaxNodes = pi.MaxNodes
	}
	if o.PrefixIndex.MaxHoldersPerNode == 0 {
		o.PrefixIndex.MaxHoldersPerNode = pi.MaxHoldersPerNode
	}
	if o.PrefixIndex.TTL == 0 {
		o.PrefixIndex.TTL = pi.TTL
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

// flight is one request's stay on one pylon and one of its engines.
type flight struct {
	r *reqState
	// p is the pylon (hub backend) the request was sent to; e is the
	// engine, chosen by the pylon when the request reaches it (by the
	// greedy-ttft arm when it routes).
	p        *pylon
	e        *engine
	phase    int
	arriveAt int64
	lease    *kvcache.Lease
	cached   int
	// estWork is the greedy-ttft arm's estimate of the solo prefill work
	// (ns) from the cache contents at routing time; only that arm sets it.
	estWork     int64
	psRemaining float64
	finish      int64
	// admitted is when the request took an engine slot, where its
	// pylon's input-rate sample starts.
	admitted int64
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
	// innerKey chooses the backend and the engine inside the chosen
	// cluster: the affinity key, or the prompt's anchor on a prefix-aware
	// route (hub.prefixRequest).
	innerKey string
	// tier and mark are the chosen decision's PrefixTier and PrefixMark.
	tier routing.PrefixTier
	mark bool
	// held is the prompt tokens the prefix index said the chosen
	// cluster held when the request was routed.
	held int

	dispatched bool
	cluster    string
	// prevCluster is the cluster of the session's latest earlier turn
	// dispatched before this one was routed ("" for none); prevPresent
	// says whether the hub's snapshot held it then.
	prevCluster string
	prevPresent bool
	// engine is the engine that ran it.
	engine    *engine
	rankDepth int
	sessState routing.SessionState
	sessSel   string
	routed    int64 // when the decision was made
	ttft      int64
	e2e       int64
	cached    int
	rejected  bool
	// rejectReason is why: an admission reason (dispatch.Reason*), or
	// the kind of a pass that found no cluster.
	rejectReason string
	// premature is set on a rejection while some cluster had a free slot
	// nothing was on its way to take (runner.roomAnywhere).
	premature bool
	done      bool
}

// engine is one mock engine behind a pylon.
type engine struct {
	id     string
	c      *simCluster
	p      *pylon
	hashID uint64 // affinity.HashID(id), the pylon's name for it
	spec   *EngineSpec
	kv     *kvcache.Cache
	ps     procShare
	psVer  uint64

	running int       // slots held
	fifo    []*flight // waiting for a slot
	active  []*flight // holding a slot
	transit []*flight // greedy-ttft arm: on their way here

	// live requests by phase and their x-input-tokens, as the pylon
	// observes them.
	pending, prefilling, firstToken, decoding int
	queuedInput, liveInput                    uint64
}

// outstanding is the engine's load as its pylon counts it: requests sent
// to it and not finished.
func (e *engine) outstanding() int { return e.pending + e.prefilling + e.firstToken + e.decoding }

// pylon is one pylon (one hub backend) with the engines behind it.
type pylon struct {
	id      string
	c       *simCluster
	engines []*engine
	// next is the round-robin cursor that breaks ties among least loaded
	// engines with engine affinity off, as the live pylon's pool does.
	next int
	// tps is the input rate the pylon has learned (unused when the fleet
	// pins it).
	tps pylonTPS

	reportSeq     uint64
	lastReport    int64
	nextPeriodic  int64
	changePending bool
}

type simCluster struct {
	id     string
	region string
	// rtt is what the hub measures; halfTransit (ns) is half the round
	// trip messages take.
	rtt         time.Duration
	halfTransit int64
	pylons      []*pylon
	engines     []*engine
	// slots is its engines' slots together (0: unlimited); transit counts
	// the requests dispatched to it that have not reached their pylon.
	slots   int
	transit int
}

type evKind uint8

const (
	evArrive evKind = iota
	evDecide
	evPylonArrive
	evPrefill
	evHeaders
	evFirstToken
	evFinish
	evReport
	evApply
	evSweep
	evSample
)

type event struct {
	at   int64
	seq  uint64
	kind evKind
	n    uint64
	r    *reqState
	f    *flight
	e    *engine
	p    *pylon
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
	pylons   []*pylon
	engines  []*engine
	byID     map[string]*pylon // pylons by backend id

	// hub is nil for the greedy-ttft arm; rng is the load balancers'
	// stream.
	hub *hub
	rng *rand.Rand

	// gateway: session → last serving cluster
	lastCluster map[string]string
	// sessCluster is each session's latest dispatched cluster, for the
	// escape counts.
	sessCluster map[string]string
	// affinityOn and factor are the pylons' engine choice; places is
	// scratch space for it.
	affinityOn bool
	factor     float64
	// queueWhenFull keeps a key on its engine when the engine's slots are
	// all held (Pylon.EngineAffinityWhenFull).
	queueWhenFull bool
	places        []affinity.Place
	// ceiling is the workload's cacheable prompt tokens.
	ceiling Ceiling

	reqs      []reqState
	doneCount int
	workerPos []int
	// nextTurn is, in an open-loop run, the index of the next turn of each
	// request's session (-1: none); nil in a closed-loop run.
	nextTurn []int
	interval int64
	gap      int64
	// copies samples how many clusters hold each cached block.
	copies copySampler
}

// Run replays p through one arm on a fresh fleet and returns its result.
func Run(p *Prepared, fleet Fleet, arm Arm, opts Options) (*ArmResult, error) {
	return run(p, fleet, arm, opts, WorkloadCeiling(p))
}

// run is Run with the workload's ceiling computed once by the caller.
func run(p *Prepared, fleet Fleet, arm Arm, opts Options, ceil Ceiling) (*ArmResult, error) {
	learned, err := warmUp(fleet, arm, opts)
	if err != nil {
		return nil, err
	}
	r, err := newRunner(p, fleet, arm, opts)
	if err != nil {
		return nil, err
	}
	r.setLearned(learned)
	r.ceiling = ceil
	for r.step() {
	}
	return r.result(), nil
}

// warmUp replays opts.Warmup through arm, one workload after another,
// and returns every pylon's learned input rate at the end, in r.pylons
// order (nil without warm-up). The greedy-ttft arm reads no pylon
// statistics and skips it.
func warmUp(fleet Fleet, arm Arm, opts Options) ([]pylonTPS, error) {
	if arm.GreedyTTFT {
		return nil, nil
	}
	var learned []pylonTPS
	for i, w := range opts.Warmup {
		r, err := newRunner(w, fleet, arm, opts)
		if err != nil {
			return nil, fmt.Errorf("warm-up workload %d: %w", i+1, err)
		}
		r.setLearned(learned)
		for r.step() {
		}
		learned = learned[:0]
		for _, p := range r.pylons {
			learned = append(learned, p.tps)
		}
	}
	return learned, nil
}

// setLearned starts every pylon from the input rate an earlier run left
// it (warmUp); nil keeps the seeds.
func (r *runner) setLearned(learned []pylonTPS) {
	for i, t := range learned {
		r.pylons[i].tps = t
	}
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
		byID:          map[string]*pylon{},
		lastCluster:   map[string]string{},
		sessCluster:   map[string]string{},
		interval:      int64(msDuration(fleet.Pylon.IntervalMs)),
		gap:           int64(msDuration(fleet.Pylon.ChangeGapMs)),
		affinityOn:    fleet.Pylon.EngineAffinity == EngineAffinityOn,
		factor:        fleet.Pylon.EngineAffinityLoadFactor,
		queueWhenFull: fleet.Pylon.EngineAffinityWhenFull == EngineFullQueue,
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
		sc := &simCluster{id: c.ID, region: c.Region, rtt: r.fleet.rtt(c), halfTransit: int64(r.fleet.transit(c) / 2)}
		pylons, perPylon := c.layout()
		for k := range pylons {
			p := &pylon{id: c.ID + "/p" + strconv.Itoa(k), c: sc, tps: seededTPS(c.Engine.reportedTPS(perPylon))}
			for j := range perPylon {
				kv, err := kvcache.New(kvcache.Config{BlockTokens: r.fleet.BlockTokens, CharsPerToken: workload.CharsPerToken,
					CapacityTokens: c.Engine.KVCapacityTokens})
				if err != nil {
					return err
				}
				id := p.id + "/e" + strconv.Itoa(j)
				e := &engine{id: id, c: sc, p: p, hashID: affinity.HashID(id), spec: &c.Engine, kv: kv}
				sc.slots += c.Engine.MaxConcurrency
				p.engines = append(p.engines, e)
				sc.engines = append(sc.engines, e)
				r.engines = append(r.engines, e)
			}
			sc.pylons = append(sc.pylons, p)
			r.pylons = append(r.pylons, p)
			r.byID[p.id] = p
		}
		r.clusters = append(r.clusters, sc)
	}
	if r.arm.GreedyTTFT {
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
		for k, p := range r.pylons {
			r.hub.store.Apply(p.backend(), r.registration(p), p.c.rtt, true)
			p.nextPeriodic = r.interval * int64(k+1) / int64(len(r.pylons))
			r.schedule(p.nextPeriodic, event{kind: evReport, p: p, n: p.reportSeq})
		}
		if r.hub.prefix != nil {
			r.schedule(int64(sweepInterval(r.opts.PrefixIndex.TTL)), event{kind: evSweep})
		}
	}
	r.schedule(int64(copySampleInterval), event{kind: evSample})
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
	// Open loop, as the load generator runs it: a session's later turn
	// goes out at its at_ms, or when the previous turn's answer has
	// arrived if that is later (its prompt holds that answer), so only
	// each session's first request, and every anonymous one, is scheduled
	// here; complete schedules the next turn.
	r.nextTurn = make([]int, len(r.reqs))
	last := map[string]int{}
	for i := range r.reqs {
		r.nextTurn[i] = -1
		if s := w.Requests[i].Session; s != "" {
			if prev, ok := last[s]; ok && w.Requests[i].Turn > 1 {
				r.nextTurn[prev] = i
				last[s] = i
				continue
			}
			last[s] = i
		}
		r.schedule(atNs(w.Requests[i].AtMs), event{kind: evArrive, r: &r.reqs[i]})
	}
}

// atNs is a workload's at_ms on the simulated clock.
func atNs(ms int64) int64 { return int64(time.Duration(ms) * time.Millisecond) }

func (r *runner) handle(ev *event) {
	switch ev.kind {
	case evArrive:
		r.arrive(ev.r)
	case evDecide:
		if r.hub.awake(ev.r, ev.n) {
			r.decide(ev.r)
		}
	case evPylonArrive:
		r.pylonArrive(ev.f)
	case evPrefill:
		if ev.n == ev.e.psVer {
			ev.e.ps.settle(r.now, r.prefillDone)
			r.rearm(ev.e)
		}
	case evHeaders:
		// The gateway learns x-stargate-cluster-id from a 2xx's headers,
		// and the hub marks the prefix's holder when they pass it.
		if s := ev.f.r.pr.session; s != "" {
			r.lastCluster[s] = ev.f.p.c.id
		}
		if r.hub != nil && ev.f.r.mark && !r.opts.MarkPrefixAtDispatch {
			r.hub.markPrefix(ev.f.r.pr.summary, ev.f.p.c.id)
		}
	case evFirstToken:
		r.firstToken(ev.f)
	case evFinish:
		r.finish(ev.f)
	case evReport:
		r.report(ev.p, ev.n)
	case evApply:
		r.hub.store.Apply(ev.p.backend(), ev.reg, ev.p.c.rtt, true)
		r.wake()
	case evSweep:
		r.hub.prefix.Sweep()
		r.schedule(r.now+int64(sweepInterval(r.opts.PrefixIndex.TTL)), event{kind: evSweep})
	case evSample:
		r.copies.sample(r.clusters)
		r.schedule(r.now+int64(copySampleInterval), event{kind: evSample})
	}
}

// sweepInterval is how often the live hub sweeps its prefix index (a
// tenth of the TTL, within [1 s, 1 min]; hub/internal/app). A sweep only
// frees expired holders, which Match already ignores, so it changes the
// index's size and no decision.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), time.Minute)
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
		rs.innerKey = r.hub.prefixRequest(&rreq, rs.pr.summary)
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
	if r.arm.GreedyTTFT {
		r.greedyDecide(rs)
		return
	}
	out, b, ok := r.hub.pass(&rs.pass, rs.innerKey, r.wall(r.now), r.rng)
	switch {
	case !ok:
		r.reject(rs, "no_backend")
	case out.Kind == dispatch.Wait:
		rs.waits++
		r.sleep(rs, out.Wait)
	case out.Kind == dispatch.Chosen:
		rs.rankDepth = out.Decision.RankDepth
		rs.tier, rs.mark = out.Decision.PrefixTier, out.Decision.PrefixMark
		rs.held = heldTokens(&rs.pass.Req, out.Decision.ClusterID)
		if out.SessionSelection != "" {
			rs.sessState, rs.sessSel = rs.pass.Req.Session, out.SessionSelection
		}
		r.notePrevious(rs, func(id string) bool { return r.hub.store.Snapshot(r.hub.target).Index(id) >= 0 })
		r.dispatch(rs, r.byID[b.ID], nil)
		if rs.mark && r.opts.MarkPrefixAtDispatch {
			r.hub.markPrefix(rs.pr.summary, b.ClusterID)
		}
	case out.Kind == dispatch.Rejected:
		r.reject(rs, out.Reason)
	default:
		r.reject(rs, out.Kind.String())
	}
}

func (r *runner) reject(rs *reqState, reason string) {
	rs.rejected = true
	rs.rejectReason = reason
	rs.premature = r.roomAnywhere()
	rs.routed = r.now
	r.complete(rs, r.now)
}

// complete ends a request for its client: a closed-loop worker sends its
// next request at once.
func (r *runner) complete(rs *reqState, at int64) {
	rs.done = true
	r.doneCount++
	if r.nextTurn != nil {
		if n := r.nextTurn[rs.idx]; n >= 0 {
			r.schedule(max(at, atNs(r.reqs[n].wr.AtMs)), event{kind: evArrive, r: &r.reqs[n]})
		}
		return
	}
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

// notePrevious records, as rs is routed, the cluster of its session's
// latest dispatched turn and whether present (the routing's view) still
// had it, for the escape counts.
func (r *runner) notePrevious(rs *reqState, present func(clusterID string) bool) {
	if rs.wr.Session == "" {
		return
	}
	if prev := r.sessCluster[rs.wr.Session]; prev != "" {
		rs.prevCluster, rs.prevPresent = prev, present(prev)
	}
}

// dispatch sends rs to pylon p: to engine e when the router chose one
// (greedy-ttft), else to the engine p picks when the request reaches it.
func (r *runner) dispatch(rs *reqState, p *pylon, e *engine) *flight {
	rs.dispatched = true
	rs.routed = r.now
	rs.cluster = p.c.id
	if rs.wr.Session != "" {
		r.sessCluster[rs.wr.Session] = p.c.id
	}
	f := &flight{r: rs, p: p, e: e, phase: phTransit, arriveAt: r.now + p.c.halfTransit}
	p.c.transit++
	if e != nil {
		e.transit = append(e.transit, f)
	}
	r.schedule(f.arriveAt, event{kind: evPylonArrive, f: f})
	return f
}

// pylonArrive is the request reaching its pylon, which passes it to an
// engine at once.
func (r *runner) pylonArrive(f *flight) {
	f.p.c.transit--
	e := f.e
	if e != nil {
		e.transit = slices.DeleteFunc(e.transit, func(x *flight) bool { return x == f })
	} else {
		e = r.pickEngine(f.p, f.r.innerKey)
		f.e = e
	}
	f.r.engine = e
	tok := uint64(f.r.pr.tokens)
	e.pending++
	e.queuedInput += tok
	e.liveInput += tok
	f.phase = phPending
	e.fifo = append(e.fifo, f)
	r.tryStart(e)
	r.changed(e.p)
}

// pickEngine is the pylon's engine choice (pylon --engine-affinity): with
// affinity on, pkg/affinity's bounded-load rendezvous pick by the
// request's affinity key (least outstanding without a key); off, the
// least outstanding engine, ties round robin from after the last pick, as
// the live pylon's pool does. An engine whose slots are all held counts
// as full, except for a keyed pick with Pylon.EngineAffinityWhenFull
// "queue". Load is outstanding requests, the live pylon's
// count.
func (r *runner) pickEngine(p *pylon, key string) *engine {
	if len(p.engines) == 1 {
		return p.engines[0]
	}
	if !r.affinityOn {
		n := len(p.engines)
		var best *engine
		for i := range n {
			e := p.engines[(p.next+i)%n]
			if best == nil || e.outstanding() < best.outstanding() {
				best = e
			}
		}
		p.next = (slices.Index(p.engines, best) + 1) % n
		return best
	}
	places := r.places[:0]
	for _, e := range p.engines {
		full := e.spec.MaxConcurrency > 0 && e.running >= e.spec.MaxConcurrency
		places = append(places, affinity.Place{ID: e.hashID, Load: e.outstanding(), Full: full})
	}
	r.places = places
	if key == "" {
		return p.engines[affinity.PickLeastLoaded(places)]
	}
	if r.queueWhenFull {
		// The key's engine holds its prompt's cache; a request queued
		// there for a slot prefills it from cache, one sent to another
		// engine prefills it cold and copies it. Only the load bound
		// moves the key.
		for i := range places {
			places[i].Full = false
		}
	}
	return p.engines[affinity.Pick(affinity.HashKey(key), places, r.factor)]
}

// roomAnywhere reports whether some cluster has a free engine slot that
// no request already dispatched to it will take: a request refused now is
// refused while the fleet could have started it at once.
func (r *runner) roomAnywhere() bool {
	for _, c := range r.clusters {
		if c.slots == 0 {
			return true
		}
		busy := c.transit
		for _, e := range c.engines {
			busy += e.running + len(e.fifo)
		}
		if busy < c.slots {
			return true
		}
	}
	return false
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
		f.admitted = r.now
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
	// The response head: the pylon moves the request from Pending to
	// InputProcessing, a change it reports.
	r.changed(e.p)
	r.schedule(r.now+e.c.halfTransit, event{kind: evHeaders, f: f})
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
	e.p.tps.add(inputSample(f.r.pr.tokens, time.Duration(r.now-f.admitted)))
	rs := f.r
	rs.ttft = r.now + e.c.halfTransit - rs.start
	rs.cached = f.cached
	r.schedule(f.finish, event{kind: evFinish, f: f})
	r.changed(e.p)
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
	end := r.now + e.c.halfTransit
	rs.e2e = end - rs.start
	r.complete(rs, end)
	r.tryStart(e)
	r.changed(e.p)
}

// changed is a pylon stats change now: with a change gap, the pylon
// reports as soon as the gap since its last report allows.
func (r *runner) changed(p *pylon) { r.changedAt(p, r.now) }

// changedAt is a pylon stats change at t (≥ the pylon's last report).
func (r *runner) changedAt(p *pylon, t int64) {
	if r.hub == nil || r.gap <= 0 || p.changePending {
		return
	}
	at := max(t, p.lastReport+r.gap)
	if at >= p.nextPeriodic {
		return
	}
	p.changePending = true
	r.schedule(at, event{kind: evReport, p: p, n: p.reportSeq})
}

// report is a pylon sending its snapshot; the hub applies it half a
// transit RTT later (dropping that backend's reservations, since the
// report now counts its requests; docs/design/routing-state.md#reservations).
func (r *runner) report(p *pylon, seq uint64) {
	if seq != p.reportSeq {
		return
	}
	reg := r.registration(p)
	p.reportSeq++
	p.lastReport = r.now
	p.changePending = false
	p.nextPeriodic = r.now + r.interval
	r.schedule(p.nextPeriodic, event{kind: evReport, p: p, n: p.reportSeq})
	r.schedule(r.now+p.c.halfTransit, event{kind: evApply, p: p, reg: reg})
	// Every output chunk is a change to the live pylon's collector (it
	// observes the request), so while a request streams the pylon reports
	// again as soon as the gap allows. Arrivals, heads and ends call
	// changed themselves.
	if t, ok := p.nextChunk(r.now); ok {
		r.changedAt(p, t)
	}
}

// nextChunk is when the pylon next relays an output chunk after now:
// the earliest next token of its streaming requests (a request's tokens
// come every token delay, the last at its finish); false when none
// streams.
func (p *pylon) nextChunk(now int64) (int64, bool) {
	var next int64
	ok := false
	for _, e := range p.engines {
		step := int64(msDuration(e.spec.TokenDelayMs))
		for _, f := range e.active {
			if f.phase != phDecode {
				continue
			}
			t := f.finish
			if step > 0 {
				if t = f.finish - (f.finish-now)/step*step; t <= now {
					t += step
				}
			}
			if !ok || t < next {
				next, ok = t, true
			}
		}
	}
	return next, ok
}

// backend is the pylon as the hub's store knows it.
func (p *pylon) backend() state.Backend {
	return state.Backend{ID: p.id, ClusterID: p.c.id, URL: "quic://127.0.0.1:1"}
}

// registration is what the pylon publishes now
// (docs/design/statistics.md#fields), one snapshot for all its engines as
// the live pylon's collector keeps it: queue fields from its live
// requests' phases and their input tokens, summed over the engines (a
// request is Pending until its response head, which the mock engine
// sends after prefill, then InputProcessing until its first output); the
// KV counters summed over the engines; the engines' slots together when
// the pylon is told them (its --max-engine-concurrency); and the input
// TPS it has learned, or its seed when the fleet pins it.
func (r *runner) registration(p *pylon) *protocol.Registration {
	st := &protocol.ModelStats{StatsObservedAtUnixMs: uint64(r.wall(r.now).UnixMilli())}
	spec := p.engines[0].spec
	if r.fleet.Pylon.PinInputTPS {
		tps := spec.reportedTPS(len(p.engines))
		st.LastMeanInputTPS, st.MaxInputTPS = tps, tps
	} else {
		st.LastMeanInputTPS, st.MaxInputTPS = p.tps.published(), p.tps.max
	}
	for _, e := range p.engines {
		kv := e.kv.Stats()
		st.QueueSize += uint64(e.pending + e.prefilling + e.firstToken)
		st.QueuedInputSize += e.queuedInput
		st.NumRunningQueries += uint64(e.outstanding())
		st.TotalQueryInputSize += e.liveInput
		st.InputProcessingQueries += uint64(e.firstToken)
		st.OutputGenerationQueries += uint64(e.decoding)
		st.KVCacheCapacityTokens += uint64(kv.CapacityTokens)
		st.KVCacheUsedTokens += uint64(kv.UsedTokens)
		st.KVCacheFreeTokens += uint64(kv.CapacityTokens - kv.UsedTokens)
		if spec.ReportMaxConcurrency {
			st.MaxEngineConcurrency += uint64(e.spec.MaxConcurrency)
		}
	}
	return &protocol.Registration{V: protocol.Version, Seq: p.reportSeq + 1, SentAtUnixMs: r.wall(r.now).UnixMilli(),
		InferenceServerID: p.id, ClusterID: p.c.id,
		Models: map[string]protocol.ModelEntry{r.p.Model: {Status: protocol.StatusActive, Stats: st}}}
}
