package state

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/affinity"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Backend is one pylon registration: where requests execute. ID is the
// inference_server_id, ClusterID the effective cluster id (never empty in
// practice: the registration layer defaults it to ID), URL the engine URL
// reported to clients, and RoutingKey the key that scopes every target of the
// registration ("" is a valid, unscoped key).
type Backend struct {
	ID         string `json:"id"`
	ClusterID  string `json:"cluster_id"`
	URL        string `json:"url"`
	RoutingKey string `json:"routing_key"`
	// Region is the pylon's --region label, for display only.
	Region string `json:"region,omitempty"`
}

// Option configures a Store.
type Option func(*Store)

// RememberTargets bounds how many targets Known remembers beyond the
// registered ones (DefaultRememberedTargets when n <= 0).
func RememberTargets(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.seen = newRecent(n)
		}
	}
}

// OnActiveServers registers fn to be called with a target's active backend
// count every time that count changes, including the final 0 when the target
// empties; the proxy turns it into the gauge
// stargate_active_inference_servers{routing_key,model}.
//
// fn runs synchronously on the writer's goroutine while the store's writer
// lock is held, so calls arrive in the order the changes happened. It must
// be quick and must not call Apply, Remove, Reserve, Reservation.Release or
// Debug (those take the writer lock); the lock-free readers are fine.
func OnActiveServers(fn func(t routing.Target, n int)) Option {
	return func(s *Store) { s.onActive = fn }
}

// Store holds the routing state. Build it with New; the zero value is not
// usable. All methods are safe for concurrent use.
type Store struct {
	clk      clock.Clock
	onActive func(routing.Target, int)
	// backendChoice is how NextBackend picks inside a cluster
	// (BackendAffinity); set once by the options.
	backendChoice backendChoice

	// index is the readers' view of which targets exist. The map is
	// replaced, never modified, and only when a target appears or goes away;
	// snapshot changes go through the slots it points to.
	index atomic.Pointer[map[routing.Target]*slot]

	mu           sync.Mutex
	targets      map[routing.Target]*target
	backends     map[string]*backendState
	reservations map[uint64]*reservation
	version      uint64 // last Snapshot.Version published
	generation   uint64 // last Snapshot.Generation handed out
	reservationN uint64 // last reservation id
	applySeq     uint64 // order in which upserts were processed
	wakes        uint64 // last waking publication's number (signalPublished)

	// activated is closed, and replaced, whenever a target goes from no
	// active backend to at least one (Activated).
	activated atomic.Pointer[chan struct{}]

	// seen remembers the targets registrations have listed since the store
	// was built (Known). It has its own lock so that Known, asked on the
	// request path, never waits for a writer.
	seenMu sync.Mutex
	seen   *recent
}

// slot is a target's publication point. Readers load it from the index and
// then load the current publication from it.
type slot struct {
	pub atomic.Pointer[published]
	// picks counts NextBackend's affinity picks of the target.
	picks backendPicks
	// wake is the target's waking-publication signal (PublishedAfter).
	wake wakeSignal
}

// published is what one publication of a target makes visible to readers.
// Everything reachable from it is immutable, except the round-robin counters.
type published struct {
	snap    *routing.Snapshot
	members [][]Backend      // per snap.Clusters index, sorted by backend id
	rr      []*atomic.Uint64 // per snap.Clusters index
	// places is, per snap.Clusters index, each member's load for the
	// affinity choice, in members order (publishedPlaces: nil for a
	// cluster of one backend, and all nil with affinity off).
	places [][]affinity.Place
}

// target is the writer-side state of one routing target. It exists while at
// least one live registration advertises the model under the routing key.
type target struct {
	key         routing.Target
	slot        *slot
	gen         uint64
	clusters    []*cluster // sorted by id; only clusters with ≥1 active backend
	active      int        // active backends, over all clusters
	advertisers int        // backends whose latest registration lists the model
}

// cluster is one cluster of one target.
type cluster struct {
	id           string
	backends     []*member // sorted by backend id, all active
	source       string    // id of the backend whose latest-wins fields are used
	reservations []*reservation
	rr           atomic.Uint64
	places       []affinity.Place // affinityPlaces of the published view; nil until needed
	// refused counts the backends marked full by a queue refusal
	// (MarkFull); while it is 0, publishing a view costs nothing more.
	refused int

	base      routing.ClusterView // aggregate of the backends, no reservations
	view      routing.ClusterView // base with reservations applied: what is published
	members   []Backend           // immutable copy of the backend identities
	baseDirty bool
	viewDirty bool
}

// member is one active backend inside a cluster of a target.
type member struct {
	backend    Backend
	stats      protocol.ModelStats // private, sanitized deep copy, never modified
	rtt        time.Duration
	receivedAt time.Time
	seq        uint64

	// refused marks the backend full after it refused a request with
	// queue_estimate_mismatch (MarkFull), reporting refusedQueueMs at
	// refusedAt. The member's next registration replaces the member, and
	// with it the mark.
	refused        bool
	refusedQueueMs uint64
	refusedAt      time.Time
}

// backendState is the store's record of one live registration.
type backendState struct {
	b            Backend
	advertised   map[string]bool // model id → active for routing
	reservations map[uint64]*reservation
	lastApply    time.Time
	lastSeq      uint64 // Registration.Seq of the latest Apply, for Debug
	applies      uint64
}

// New returns an empty Store that takes its time from clk.
func New(clk clock.Clock, opts ...Option) *Store {
	s := &Store{
		clk:          clk,
		targets:      map[routing.Target]*target{},
		backends:     map[string]*backendState{},
		reservations: map[uint64]*reservation{},
	}
	s.seen = newRecent(DefaultRememberedTargets)
	for _, o := range opts {
		o(s)
	}
	empty := map[routing.Target]*slot{}
	s.index.Store(&empty)
	ch := make(chan struct{})
	s.activated.Store(&ch)
	return s
}

// ---- readers: lock-free ----

func (s *Store) published(t routing.Target) *published {
	sl := (*s.index.Load())[t]
	if sl == nil {
		return nil
	}
	return sl.pub.Load()
}

// Snapshot returns the current snapshot of t, or nil when t has no cluster
// with an active backend. It never blocks and never allocates; the snapshot
// is immutable and stays valid however the state changes later.
func (s *Store) Snapshot(t routing.Target) *routing.Snapshot {
	if p := s.published(t); p != nil {
		return p.snap
	}
	return nil
}

// Registered reports whether some live registration advertises t.Model
// under t.RoutingKey, whatever its status: a registered target without an
// active backend answers 503, an unregistered one 404
// (docs/design/routing-state.md#targets-and-generations).
func (s *Store) Registered(t routing.Target) bool {
	_, ok := (*s.index.Load())[t]
	return ok
}

// Known reports whether some registration has listed t since the store
// was built, whatever the model's status, and whether one still does: the
// proxy tells a model that is gone for now (its pylons are restarting) from
// one nobody serves (docs/hub.md#routing). The store remembers at most
// DefaultRememberedTargets (or RememberTargets) targets no live
// registration lists, forgetting the least recently listed first, and never
// remembers a target whose routing key and model together exceed
// maxRememberedKeyBytes, so a pylon listing many or huge model ids cannot
// grow it without bound.
func (s *Store) Known(t routing.Target) bool {
	if s.Registered(t) {
		return true
	}
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	return s.seen.contains(t)
}

// Activated returns a channel that is closed the next time any target goes
// from no active backend to at least one. A caller waiting for target t
// takes the channel first and then checks Snapshot(t): a change between
// the two closes the channel it holds, so no activation is missed.
func (s *Store) Activated() <-chan struct{} { return *s.activated.Load() }

// HasBackend reports, without side effects, whether cluster clusterID of t
// has a backend skip does not refuse.
func (s *Store) HasBackend(t routing.Target, clusterID string, skip func(backendID string) bool) bool {
	p := s.published(t)
	if p == nil {
		return false
	}
	i, ok := slices.BinarySearchFunc(p.snap.Clusters, clusterID, func(c routing.ClusterView, id string) int {
		return cmp.Compare(c.ClusterID, id)
	})
	if !ok {
		return false
	}
	for _, b := range p.members[i] {
		if !skip(b.ID) {
			return true
		}
	}
	return false
}

// NextBackend returns a backend of cluster clusterID for t among its
// active backends that skip accepts (skip may be nil; it may be called
// twice per backend and must answer consistently), or false when the
// cluster has no active backend or skip rejects them all
// (docs/design/routing-state.md#backends-inside-a-cluster). With
// BackendAffinity on (the default), a request with affinityKey goes to
// the backend its key prefers unless that one is full or over its load
// bound, so a session's turns meet their KV cache; without a key, to the
// least loaded backend, ties in round-robin order. Off, every call takes
// the cluster's round robin in id order, as upstream Stargate does.
func (s *Store) NextBackend(t routing.Target, clusterID, affinityKey string, skip func(backendID string) bool) (Backend, bool) {
	sl := (*s.index.Load())[t]
	if sl == nil {
		return Backend{}, false
	}
	p := sl.pub.Load()
	if p == nil {
		return Backend{}, false
	}
	i, ok := slices.BinarySearchFunc(p.snap.Clusters, clusterID, func(c routing.ClusterView, id string) int {
		return cmp.Compare(c.ClusterID, id)
	})
	if !ok {
		return Backend{}, false
	}
	if s.backendChoice.roundRobin {
		return p.roundRobin(i, skip)
	}
	return p.pickBackend(&sl.picks, i, affinityKey, s.backendChoice.pickFactor(), skip)
}

// ActiveModels returns, sorted and without duplicates, the models of
// routingKey (exactly that key; "" is the unscoped key) that have at least
// one active backend: the answer of ListModels and GET /v1/models.
func (s *Store) ActiveModels(routingKey string) []string {
	var out []string
	for t, sl := range *s.index.Load() {
		if t.RoutingKey == routingKey && sl.pub.Load() != nil {
			out = append(out, t.Model)
		}
	}
	slices.Sort(out)
	return out
}

// ---- writers ----

// Apply applies one full registration snapshot of backend b
// (docs/design/routing-state.md#registration):
//   - every pending reservation of b is dropped first, in every target: its
//     snapshot now accounts for those requests;
//   - models b advertised before and reg no longer lists are withdrawn;
//   - a model whose status is Active, whose stats are present and for which
//     rttKnown is true is upserted with those stats (brought within
//     MaxStatCount and MaxStatRate first) and rtt, received now;
//   - any other listed model (not Active, stats nil, or no RTT: the tunnel
//     is down or not yet measured) is removed from routing but still counts
//     as registered.
//
// b's identity comes from b, not from reg. Should b's cluster, URL or routing
// key differ from what the store holds for b.ID, the old registration is
// removed first (the registration layer forbids such changes; this keeps the
// store consistent anyway). A nil reg lists no models.
func (s *Store) Apply(b Backend, reg *protocol.Registration, rtt time.Duration, rttKnown bool) {
	now := s.clk.Now()
	rtt = max(rtt, 0)
	var models map[string]protocol.ModelEntry
	var seq uint64
	if reg != nil {
		models, seq = reg.Models, reg.Seq
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.newChange()

	bs := s.backends[b.ID]
	if bs != nil && bs.b != b {
		s.removeBackend(c, bs)
		bs = nil
	}
	if bs == nil {
		bs = &backendState{b: b, advertised: map[string]bool{}, reservations: map[uint64]*reservation{}}
		s.backends[b.ID] = bs
	}
	s.dropBackendReservations(c, bs)

	for m := range bs.advertised {
		if _, ok := models[m]; ok {
			continue
		}
		t := s.targets[routing.Target{RoutingKey: b.RoutingKey, Model: m}]
		s.removeMember(c, t, bs)
		t.advertisers--
		delete(bs.advertised, m)
	}
	s.applySeq++
	s.remember(b.RoutingKey, models)
	for m, e := range models {
		t := s.target(c, routing.Target{RoutingKey: b.RoutingKey, Model: m})
		if _, ok := bs.advertised[m]; !ok {
			t.advertisers++
		}
		active := e.Status == protocol.StatusActive && e.Stats != nil && rttKnown
		if active {
			s.upsertMember(c, t, &member{backend: b, stats: sanitizeStats(e.Stats), rtt: rtt, receivedAt: now, seq: s.applySeq})
		} else {
			s.removeMember(c, t, bs)
		}
		bs.advertised[m] = active
	}
	bs.lastApply, bs.lastSeq = now, seq
	bs.applies++
	s.commit(c)
}

// Remove forgets backend backendID: it leaves every target at once and its
// pending reservations are dropped. Use it when the registration stream ends
// (disconnect or idle timeout). Removing an unknown backend does nothing.
func (s *Store) Remove(backendID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.backends[backendID]
	if bs == nil {
		return
	}
	c := s.newChange()
	s.removeBackend(c, bs)
	s.commit(c)
}

// ---- writer internals; s.mu held ----

// change collects the targets one write touched, with their active count
// before it, so that commit republishes each once.
type change struct {
	before       map[*target]int
	indexChanged bool
	// addsLoadOnly marks a reservation or a refusal's mark, which wake
	// no waiting request (signalPublished).
	addsLoadOnly bool
}

func (s *Store) newChange() *change { return &change{before: map[*target]int{}} }

func (c *change) touch(t *target) {
	if _, ok := c.before[t]; !ok {
		c.before[t] = t.active
	}
}

// target returns the state of key, creating it (not yet visible to readers
// until commit) when missing.
func (s *Store) target(c *change, key routing.Target) *target {
	t := s.targets[key]
	if t == nil {
		t = &target{key: key, slot: &slot{}}
		s.targets[key] = t
		c.indexChanged = true
	}
	c.touch(t)
	return t
}

func (t *target) findCluster(id string) (int, bool) {
	return slices.BinarySearchFunc(t.clusters, id, func(c *cluster, id string) int { return cmp.Compare(c.id, id) })
}

func (cl *cluster) findMember(id string) (int, bool) {
	return slices.BinarySearchFunc(cl.backends, id, func(m *member, id string) int { return cmp.Compare(m.backend.ID, id) })
}

// upsertMember inserts or replaces m in its cluster of t and makes it the
// cluster's latest-wins source: it is the heartbeat processed last.
func (s *Store) upsertMember(c *change, t *target, m *member) {
	c.touch(t)
	i, ok := t.findCluster(m.backend.ClusterID)
	if !ok {
		t.clusters = slices.Insert(t.clusters, i, &cluster{id: m.backend.ClusterID})
	}
	cl := t.clusters[i]
	j, ok := cl.findMember(m.backend.ID)
	if ok {
		if cl.backends[j].refused {
			cl.refused-- // the registration carries the truth the mark stood in for
		}
		cl.backends[j] = m
	} else {
		cl.backends = slices.Insert(cl.backends, j, m)
		cl.members = nil // rebuilt by refresh
		t.active++
	}
	cl.source = m.backend.ID
	cl.baseDirty = true
}

// removeMember takes bs out of its cluster of t, if it is there, with its
// reservations on that cluster; an emptied cluster goes away with its
// round-robin counter.
func (s *Store) removeMember(c *change, t *target, bs *backendState) {
	c.touch(t)
	i, ok := t.findCluster(bs.b.ClusterID)
	if !ok {
		return
	}
	cl := t.clusters[i]
	j, ok := cl.findMember(bs.b.ID)
	if !ok {
		return
	}
	if cl.backends[j].refused {
		cl.refused--
	}
	cl.backends = slices.Delete(cl.backends, j, j+1)
	cl.members = nil
	t.active--
	for _, r := range slices.Clone(cl.reservations) {
		if r.backendID == bs.b.ID || len(cl.backends) == 0 {
			s.dropReservation(c, r)
		}
	}
	if len(cl.backends) == 0 {
		t.clusters = slices.Delete(t.clusters, i, i+1)
		return
	}
	if cl.source == bs.b.ID {
		// The source left: the backend received most recently takes over;
		// among equal receive times, the one processed last.
		src := cl.backends[0]
		for _, m := range cl.backends[1:] {
			if m.receivedAt.After(src.receivedAt) || (m.receivedAt.Equal(src.receivedAt) && m.seq > src.seq) {
				src = m
			}
		}
		cl.source = src.backend.ID
	}
	cl.baseDirty = true
}

// removeBackend withdraws bs from every target it advertises and forgets it.
func (s *Store) removeBackend(c *change, bs *backendState) {
	s.dropBackendReservations(c, bs)
	for m := range bs.advertised {
		t := s.targets[routing.Target{RoutingKey: bs.b.RoutingKey, Model: m}]
		s.removeMember(c, t, bs)
		t.advertisers--
	}
	delete(s.backends, bs.b.ID)
}

// commit refreshes and republishes every touched target, retires the ones
// no registration advertises any more, updates the readers' index and fires
// OnActiveServers, in target order so that it is deterministic.
func (s *Store) commit(c *change) {
	touched := slices.SortedFunc(maps.Keys(c.before), func(a, b *target) int {
		return cmp.Or(cmp.Compare(a.key.RoutingKey, b.key.RoutingKey), cmp.Compare(a.key.Model, b.key.Model))
	})
	for _, t := range touched {
		if t.active > 0 && c.before[t] == 0 {
			s.generation++
			t.gen = s.generation
		}
		if t.advertisers == 0 {
			delete(s.targets, t.key)
			t.slot.pub.Store(nil)
			c.indexChanged = true
			continue
		}
		s.publish(t)
	}
	if c.indexChanged {
		idx := make(map[routing.Target]*slot, len(s.targets))
		for k, t := range s.targets {
			idx[k] = t.slot
		}
		s.index.Store(&idx)
	}
	if s.onActive != nil {
		for _, t := range touched {
			if t.active != c.before[t] {
				s.onActive(t.key, t.active)
			}
		}
	}
	s.signalPublished(c, touched)
	for _, t := range touched {
		if t.active > 0 && c.before[t] == 0 {
			// After publish: a waiter that saw no snapshot holds this
			// channel or an older, already closed one.
			next := make(chan struct{})
			close(*s.activated.Swap(&next))
			break
		}
	}
}

// remember records the models of one registration in the set Known reads.
func (s *Store) remember(routingKey string, models map[string]protocol.ModelEntry) {
	if len(models) == 0 {
		return
	}
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	for m := range models {
		if len(routingKey)+len(m) <= maxRememberedKeyBytes {
			s.seen.add(routing.Target{RoutingKey: routingKey, Model: m})
		}
	}
}

// publish recomputes t's dirty clusters and stores a new snapshot of t, or
// nil when t has no active backend.
func (s *Store) publish(t *target) {
	if t.active == 0 {
		t.slot.pub.Store(nil)
		return
	}
	n := len(t.clusters)
	views := make([]routing.ClusterView, n)
	// Most publications (every reservation) leave the clusters and their
	// members as they were: the previous snapshot's member lists and
	// counters, never written after publication, are shared then instead
	// of copied.
	prev := t.slot.pub.Load()
	reuse := prev != nil && len(prev.members) == n
	for i, cl := range t.clusters {
		cl.refresh()
		views[i] = cl.view
		if reuse && (prev.rr[i] != &cl.rr || !sameMembers(prev.members[i], cl.members)) {
			reuse = false
		}
	}
	p := &published{}
	if reuse {
		p.members, p.rr = prev.members, prev.rr
	} else {
		p.members = make([][]Backend, n)
		p.rr = make([]*atomic.Uint64, n)
		for i, cl := range t.clusters {
			p.members[i] = cl.members
			p.rr[i] = &cl.rr
		}
	}
	if !s.backendChoice.roundRobin {
		p.places = publishedPlaces(t.clusters)
	}
	s.version++
	p.snap = &routing.Snapshot{Target: t.key, Clusters: views, Version: s.version, Generation: t.gen}
	t.slot.pub.Store(p)
}

// sameMembers reports whether a and b are the same member list: refresh
// replaces a cluster's list when its membership changes and never writes
// to a published one.
func sameMembers(a, b []Backend) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// refresh recomputes what changed in cl since its last publication.
func (cl *cluster) refresh() {
	if cl.members == nil {
		cl.members = make([]Backend, len(cl.backends))
		for i, m := range cl.backends {
			cl.members[i] = m.backend
		}
	}
	if cl.baseDirty {
		cl.base = aggregate(cl.id, cl.backends, cl.source)
		cl.baseDirty = false
		cl.viewDirty = true
	}
	if cl.viewDirty {
		cl.view = cl.base
		if floor, full := cl.fullFloor(); full {
			applyFull(&cl.view.Stats, floor)
		}
		applyReservations(&cl.view.Stats, cl.reservations)
		cl.view.Priorities = routing.SortPriorities(cl.view.Stats.QueueTimeEstimateMsByPriority)
		cl.places = nil // publishedPlaces rebuilds it when it is needed
		cl.viewDirty = false
	}
}

// cloneStats deep-copies stats so that nothing the caller does later can
// reach a published snapshot.
func cloneStats(in *protocol.ModelStats) protocol.ModelStats {
	out := *in
	out.QueueTimeEstimateMsByPriority = maps.Clone(in.QueueTimeEstimateMsByPriority)
	out.StatsCapabilities = slices.Clone(in.StatsCapabilities)
	out.StatsSources = slices.Clone(in.StatsSources)
	return out
}
