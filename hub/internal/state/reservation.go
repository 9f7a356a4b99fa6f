package state

import (
	"maps"
	"slices"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// reservation is one pending assignment
// (docs/design/routing-state.md#reservations): a request sent to backendID
// in cluster c of target t, not yet visible in that backend's statistics.
type reservation struct {
	id        uint64
	t         *target
	c         *cluster
	backendID string
	tokens    uint64
	priority  uint32
	at        time.Time
}

// Reservation is the handle of a pending reservation. Its zero value, and
// the value Reserve returns when it placed nothing, are valid and do nothing.
type Reservation struct {
	s  *Store
	id uint64
}

// Valid reports whether Reserve placed this reservation (it may since have
// been dropped by a heartbeat or a release).
func (r Reservation) Valid() bool { return r.s != nil }

// Release drops the reservation now. The proxy calls it only for a 429
// queue_estimate_mismatch answer; every other reservation lives until the
// backend's next registration snapshot or its removal. Release is idempotent
// and safe after the reservation was dropped for any other reason.
func (r Reservation) Release() {
	if r.s == nil {
		return
	}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.reservations[r.id]
	if res == nil {
		return
	}
	c := s.newChange()
	s.dropReservation(c, res)
	s.commit(c)
}

// Reserve records that a request of tokens input tokens at priority prio is
// being sent to backendID in cluster clusterID of t, and publishes a new
// snapshot of t in which that cluster carries it
// (docs/design/routing-state.md#reservations). It places nothing, and
// returns a no-op handle, when backendID is not an active backend of that
// cluster of t.
func (s *Store) Reserve(t routing.Target, clusterID, backendID string, tokens uint64, prio uint32) Reservation {
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	tg := s.targets[t]
	if tg == nil {
		return Reservation{}
	}
	i, ok := tg.findCluster(clusterID)
	if !ok {
		return Reservation{}
	}
	cl := tg.clusters[i]
	if _, ok := cl.findMember(backendID); !ok {
		return Reservation{}
	}
	bs := s.backends[backendID]
	s.reservationN++
	r := &reservation{id: s.reservationN, t: tg, c: cl, backendID: backendID, tokens: tokens, priority: prio, at: now}
	cl.reservations = append(cl.reservations, r) // ids ascend, so this stays in creation order
	cl.addToView(r)
	bs.reservations[r.id] = r
	s.reservations[r.id] = r
	c := s.newChange()
	c.touch(tg)
	c.addsLoadOnly = true
	s.commit(c)
	return Reservation{s: s, id: r.id}
}

// addToView brings cl's view up to date with r, its newest reservation.
// When the view is otherwise current, r is applied on top of it: applying
// reservations in creation order is a fold, so the result is the one a
// full recompute gives, at the cost of one reservation instead of every
// pending one. A full recompute per reservation made each request pay for
// all requests since the backends' last registrations, a cost that grew
// with the request rate. Otherwise the view is marked for the recompute.
func (cl *cluster) addToView(r *reservation) {
	if cl.baseDirty || cl.viewDirty {
		cl.viewDirty = true
		return
	}
	// The view's map and priorities are shared with the published
	// snapshot: applyReservations copies the map before writing, and the
	// sorted priorities are a new slice.
	one := [1]*reservation{r}
	applyReservations(&cl.view.Stats, one[:])
	cl.view.Priorities = routing.SortPriorities(cl.view.Stats.QueueTimeEstimateMsByPriority)
	cl.places = nil // publishedPlaces rebuilds it when it is needed
}

// dropReservation forgets r everywhere and marks its cluster for republishing.
func (s *Store) dropReservation(c *change, r *reservation) {
	delete(s.reservations, r.id)
	if bs := s.backends[r.backendID]; bs != nil {
		delete(bs.reservations, r.id)
	}
	if i, ok := slices.BinarySearchFunc(r.c.reservations, r.id, func(x *reservation, id uint64) int {
		switch {
		case x.id < id:
			return -1
		case x.id > id:
			return 1
		}
		return 0
	}); ok {
		r.c.reservations = slices.Delete(r.c.reservations, i, i+1)
	}
	r.c.viewDirty = true
	c.touch(r.t)
}

// dropBackendReservations drops every pending reservation of bs, in every
// target.
func (s *Store) dropBackendReservations(c *change, bs *backendState) {
	for _, r := range bs.reservations {
		s.dropReservation(c, r)
	}
}

// applyReservations adds the pending reservations, in creation order, to a
// cluster's aggregate (docs/design/routing-state.md#reservations). Each one
// adds 1 to queue_size and num_running_queries and its tokens to
// queued_input_size and total_query_input_size, saturating. When the priority map is non-empty:
// tokens with no valid TPS clear the whole map (the estimate then falls back
// to tokens/TPS, which is +Inf); otherwise δ = ceil(1000·tokens/tps) is added
// to the estimate at the reservation's priority p (creating key p from the
// lookup for p when missing) and to every key above p, the less urgent ones.
//
// The map is copied before the first change: the one in stats is shared with
// a backend's stored statistics.
func applyReservations(stats *protocol.ModelStats, rs []*reservation) {
	if len(rs) == 0 {
		return
	}
	m := stats.QueueTimeEstimateMsByPriority
	if len(m) > 0 {
		m = maps.Clone(m)
	}
	for _, r := range rs {
		stats.QueueSize = satAdd(stats.QueueSize, 1)
		stats.QueuedInputSize = satAdd(stats.QueuedInputSize, r.tokens)
		stats.NumRunningQueries = satAdd(stats.NumRunningQueries, 1)
		stats.TotalQueryInputSize = satAdd(stats.TotalQueryInputSize, r.tokens)
		if len(m) == 0 {
			continue
		}
		delta, ok := queueTimeDeltaMs(r.tokens, stats.LastMeanInputTPS)
		if !ok {
			m = nil
			continue
		}
		m[r.priority] = satAdd(priorityEstimate(m, r.priority), delta)
		for k, v := range m {
			if k > r.priority {
				m[k] = satAdd(v, delta)
			}
		}
	}
	stats.QueueTimeEstimateMsByPriority = m
}
