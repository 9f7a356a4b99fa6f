package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/pkg/clock"
)

// Synced admits from per-replica state and reconciles it with the shared
// counters in the background: every sync interval it pushes each active
// key's local delta with one add, whose answer is the cluster's total. A
// request is admitted without a round trip while the last total seen plus
// the deltas not yet pushed stays within the limit and within this
// replica's share of what is left (the limit minus the total, divided by
// the number of replicas), and refused without one when that sum is over
// the limit; otherwise it is checked on the store at once, as in the exact
// mode. The share keeps a burst spread over every replica at the start of
// a window from admitting the limit on each of them.
//
// A key's total is trusted only while it comes from the latest or the
// previous sync round (or a store check since): a key idle for a whole
// round is checked on the store at its next use, so no admission reads a
// total older than one interval plus one round.
type Synced struct {
	remote   Counter
	timeout  time.Duration
	interval time.Duration
	clock    clock.Clock
	m        *metrics.Metrics
	// localChecks and storeChecks are the two series of the checks
	// counter, resolved once: a label lookup per check would cost more
	// than the local decision it counts.
	localChecks, storeChecks prometheus.Counter

	// replicas is the number of gateways sharing the counters (Olric
	// members), at least 1.
	replicas atomic.Int64

	mu sync.Mutex
	// round counts sync rounds begun; a slot refreshed in round or
	// round-1 is fresh. It starts at 1 so that 0 means never refreshed.
	round uint64
	slots map[string]*slot
}

// slot is one counter key's local state.
type slot struct {
	// seen is the cluster total the last push or store check returned.
	seen int64
	// pending is what this replica added since, not yet pushed.
	pending int64
	// round is the sync round of the last refresh of seen (0: never).
	round uint64
	// touched says the key was used since the last round, so the next
	// round refreshes it even with nothing to push.
	touched bool
	// expires is when the store forgets the key (KeyTTL after this
	// replica first used it, an upper bound of the store's own expiry).
	expires time.Time
}

// SyncConfig tunes a Synced counter.
type SyncConfig struct {
	// Interval is the period of the sync rounds.
	Interval time.Duration
	// StoreTimeout bounds each store call, pushes and checks alike.
	StoreTimeout time.Duration
}

// NewSynced returns a Synced counter over remote (the shared store). It
// starts with one replica; SetReplicas keeps the count current. Run
// drives the sync rounds.
func NewSynced(remote Counter, cfg SyncConfig, clk clock.Clock, m *metrics.Metrics) *Synced {
	s := &Synced{remote: remote, timeout: cfg.StoreTimeout, interval: cfg.Interval, clock: clk, m: m, round: 1, slots: map[string]*slot{},
		localChecks: m.RateLimitChecks.WithLabelValues("local"), storeChecks: m.RateLimitChecks.WithLabelValues("store")}
	s.replicas.Store(1)
	return s
}

// SetReplicas sets the number of gateways sharing the counters (values
// below 1 count as 1).
func (s *Synced) SetReplicas(n int) { s.replicas.Store(int64(max(n, 1))) }

// slotLocked returns key's slot, creating it; s.mu must be held.
func (s *Synced) slotLocked(key string, now time.Time) *slot {
	sl := s.slots[key]
	if sl == nil {
		sl = &slot{expires: now.Add(KeyTTL)}
		s.slots[key] = sl
	}
	sl.touched = true
	return sl
}

// take adds delta to key when the result fits limit, and reports the
// counter's value after the add and whether it was admitted. A refused
// add is taken back (in the next push). An error is a failed store check;
// nothing was added then.
func (s *Synced) take(ctx context.Context, key string, delta, limit int64) (int64, bool, error) {
	now := s.clock.Now()
	s.mu.Lock()
	sl := s.slotLocked(key, now)
	if sl.round != 0 && sl.round+1 >= s.round {
		v := sl.seen + sl.pending + delta
		share := (limit - sl.seen) / s.replicas.Load()
		switch {
		case v > limit:
			// Over on what this replica knows: refused without a round
			// trip, so a caller far over its limit costs the store
			// nothing. A refund the round has not brought yet can make
			// this refuse early, for at most a round.
			s.mu.Unlock()
			s.localChecks.Inc()
			return v, false, nil
		case sl.pending+delta <= share:
			sl.pending += delta
			s.mu.Unlock()
			s.localChecks.Inc()
			return v, true, nil
		}
	}
	// Check on the store, pushing what is pending with it: the answer is
	// then the cluster's total including everything this replica admitted.
	push := sl.pending + delta
	sl.pending = 0
	round := s.round
	s.mu.Unlock()
	s.storeChecks.Inc()
	total, err := storeAdd(ctx, s.remote, s.timeout, s.m, "reserve", key, push)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A round may have dropped the slot meanwhile (its touch was cleared
	// and nothing was pending); keep the one in hand.
	if cur := s.slots[key]; cur != sl {
		if cur != nil {
			sl.pending += cur.pending
		}
		s.slots[key] = sl
	}
	if err != nil {
		// The add may or may not have landed; pushing the earlier pending
		// again errs toward counting it twice (under-admission).
		sl.pending += push - delta
		return 0, false, err
	}
	if push >= 0 {
		// Concurrent checks may return out of order: the largest total is
		// the latest, and over-estimating only refuses earlier.
		sl.seen = max(sl.seen, total)
	} else {
		sl.seen = total
	}
	sl.round = max(sl.round, round)
	v := total + sl.pending
	if v > limit {
		sl.pending -= delta
		return v, false, nil
	}
	return v, true, nil
}

// adjust adds delta to key locally, for the next push: take-backs,
// refunds and overruns never wait for the store.
func (s *Synced) adjust(key string, delta int64) {
	now := s.clock.Now()
	s.mu.Lock()
	s.slotLocked(key, now).pending += delta
	s.mu.Unlock()
}

// syncItem is one key's share of a round.
type syncItem struct {
	key   string
	sl    *slot
	delta int64
}

// Sync runs one round: it pushes the pending delta of every key used
// since the last round (an add of 0 when there is none, to read the total)
// and forgets keys unused for a whole round with nothing pending.
func (s *Synced) Sync(ctx context.Context) {
	start := s.clock.Now()
	s.mu.Lock()
	s.round++
	round := s.round
	todo := make([]syncItem, 0, len(s.slots))
	for key, sl := range s.slots {
		switch {
		case !start.Before(sl.expires):
			// The store forgot the key; so can this replica.
			delete(s.slots, key)
		case sl.touched || sl.pending != 0:
			todo = append(todo, syncItem{key: key, sl: sl, delta: sl.pending})
			sl.pending, sl.touched = 0, false
		default:
			delete(s.slots, key)
		}
	}
	s.mu.Unlock()
	for _, p := range todo {
		total, err := storeAdd(ctx, s.remote, s.timeout, s.m, "sync", p.key, p.delta)
		s.mu.Lock()
		if err != nil {
			// Pushed again next round: an add that timed out but landed
			// then counts twice, which errs toward refusing.
			// The total is not refreshed: the key's next use asks the store.
			p.sl.pending += p.delta
			p.sl.round = 0
			if s.slots[p.key] == nil {
				s.slots[p.key] = p.sl
			}
		} else {
			p.sl.seen, p.sl.round = total, max(p.sl.round, round)
		}
		s.mu.Unlock()
	}
	s.m.RateLimitSyncDuration.Observe(s.clock.Since(start).Seconds())
}

// Run syncs every interval until ctx ends, then pushes what is pending one
// last time, bounded by the store timeout, so a replica that stops loses
// no admitted request's count.
func (s *Synced) Run(ctx context.Context) {
	t := s.clock.NewTimer(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Bounded as a whole, so a dead store cannot hold shutdown
			// for a timeout per key.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.interval+s.timeout)
			s.Sync(fctx)
			cancel()
			return
		case <-t.C():
		}
		s.Sync(ctx)
		t.Reset(s.interval)
	}
}

// Len is the number of keys held, for tests.
func (s *Synced) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.slots)
}
