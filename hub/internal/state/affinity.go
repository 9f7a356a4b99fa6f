package state

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/affinity"
)

// DefaultBackendAffinityLoadFactor is the load bound of the backend choice
// when none is configured (--backend-affinity-load-factor): a backend
// keeps its sessions while it carries at most twice the cluster's mean
// load plus the request, and always while it is not full on two backends.
// Tighter factors (1.25, 1.5) spill sessions at the small in-flight counts
// of a lightly loaded cluster, splitting their caches
// (docs/design/routing-state.md#backends-inside-a-cluster has the
// measurements); it is pkg/affinity's default, which the pylon's engine
// choice uses too.
const DefaultBackendAffinityLoadFactor = affinity.DefaultLoadFactor

// BackendAffinity chooses how NextBackend picks a backend inside a cluster
// (docs/design/routing-state.md#backends-inside-a-cluster). On (the
// default of a Store built without this option, at
// DefaultBackendAffinityLoadFactor), a request with an affinity key goes
// to the backend its key prefers by rendezvous hashing, unless that
// backend is full or carries more than loadFactor times the mean load of
// the eligible backends; a request without one goes to the least loaded
// backend, ties taken in round-robin order. Off, every request takes the
// cluster's round robin, as upstream Stargate does.
//
// loadFactor is 0 for no bound (only a full backend moves a key) or a
// finite value of at least 1 (CheckBackendAffinityLoadFactor); any other
// value counts as 1, since below 1 every backend would be over its share.
func BackendAffinity(on bool, loadFactor float64) Option {
	return func(s *Store) {
		s.backendChoice = backendChoice{roundRobin: !on, factor: pickFactor(loadFactor)}
	}
}

// CheckBackendAffinityLoadFactor reports whether f is a valid load factor
// for BackendAffinity: 0 (no bound) or a finite value of at least 1.
func CheckBackendAffinityLoadFactor(f float64) error {
	if f == 0 || (f >= 1 && !math.IsInf(f, 1)) {
		return nil
	}
	return fmt.Errorf("%v: want 0 (no bound) or a finite factor >= 1", f)
}

// pickFactor turns a configured load factor into affinity.Pick's factor:
// 0 (no bound) becomes negative, a value below 1 or not finite becomes 1.
func pickFactor(f float64) float64 {
	switch {
	case f == 0:
		return -1
	case !(f >= 1) || math.IsInf(f, 1):
		return 1
	}
	return f
}

// backendChoice is the Store's backend choice. Its zero value is the
// default: affinity on at DefaultBackendAffinityLoadFactor.
type backendChoice struct {
	roundRobin bool
	factor     float64 // affinity.Pick's factor; 0 means the default
}

func (c backendChoice) pickFactor() float64 {
	if c.factor == 0 {
		return DefaultBackendAffinityLoadFactor
	}
	return c.factor
}

// pickOutcome is the outcome label of
// stargate_backend_affinity_picks_total.
type pickOutcome uint8

const (
	pickPreferred pickOutcome = iota // the backend the key prefers over every active one
	pickSpilled                      // another one: the preferred one was full, over its bound or skipped
	pickNoKey                        // no affinity key: the least loaded backend
	pickOutcomes
)

func (o pickOutcome) String() string {
	return [...]string{"preferred", "spilled", "no_key"}[o]
}

// backendPicks counts a target's affinity picks by outcome. It lives in
// the target's slot, so it survives publications and goes with the target.
type backendPicks [pickOutcomes]atomic.Uint64

// stackPlaces is how many backends of a cluster NextBackend filters
// without allocating; a larger cluster costs one allocation per call.
const stackPlaces = 16

// roundRobin is upstream Stargate's choice: the cluster's counter advances
// by one per call and indexes the backends skip accepts, in id order,
// modulo their number. skip may be nil, or is called twice per backend.
func (p *published) roundRobin(i int, skip func(backendID string) bool) (Backend, bool) {
	ms := p.members[i]
	eligible := len(ms)
	if skip != nil {
		eligible = 0
		for _, b := range ms {
			if !skip(b.ID) {
				eligible++
			}
		}
	}
	if eligible == 0 {
		return Backend{}, false
	}
	nth := int((p.rr[i].Add(1) - 1) % uint64(eligible))
	for _, b := range ms {
		if skip != nil && skip(b.ID) {
			continue
		}
		if nth == 0 {
			return b, true
		}
		nth--
	}
	return Backend{}, false // skip changed its mind between the passes
}

// pickBackend is the affinity choice among the backends of cluster i that
// skip (may be nil, called once per backend) accepts: by key with the
// bounded-load rendezvous hash, or, without a key, the least loaded one
// starting from the round-robin position. Picks in clusters of one
// backend are not counted: there was no choice to make.
func (p *published) pickBackend(picks *backendPicks, i int, key string, factor float64, skip func(backendID string) bool) (Backend, bool) {
	ms := p.members[i]
	if len(ms) == 1 {
		if skip != nil && skip(ms[0].ID) {
			return Backend{}, false
		}
		return ms[0], true
	}
	all := p.places[i]
	var placeBuf [stackPlaces]affinity.Place
	var indexBuf [stackPlaces]int
	places, index := all, []int(nil)
	if skip != nil {
		places, index = placeBuf[:0], indexBuf[:0]
		for j, b := range ms {
			if !skip(b.ID) {
				places, index = append(places, all[j]), append(index, j)
			}
		}
		if len(places) == 0 {
			return Backend{}, false
		}
	}
	var j int
	var outcome pickOutcome
	if key == "" {
		j, outcome = leastLoaded(places, p.rr[i].Add(1)-1), pickNoKey
	} else {
		k := affinity.HashKey(key)
		j, outcome = affinity.Pick(k, places, factor), pickSpilled
		if places[j].ID == all[affinity.Preferred(k, len(all), func(j int) uint64 { return all[j].ID })].ID {
			outcome = pickPreferred
		}
	}
	picks[outcome].Add(1)
	if index != nil {
		j = index[j]
	}
	return ms[j], true
}

// leastLoaded is the least loaded place that is not full (all full: the
// least loaded of all), ties going to the first from position start on,
// cyclically. With equal loads it is the round robin, so an idle cluster
// still spreads keyless requests, and hub replicas that see the same
// figures do not all pick the lowest id.
func leastLoaded(places []affinity.Place, start uint64) int {
	n := len(places)
	off := int(start % uint64(n))
	best := -1
	for pass := 0; pass < 2 && best < 0; pass++ {
		for c := range n {
			j := (off + c) % n
			if pass == 0 && places[j].Full {
				continue
			}
			if best < 0 || places[j].Load < places[best].Load {
				best = j
			}
		}
	}
	return best
}

// affinityPlaces is every backend of cl as the affinity choice sees it:
// its load is what its last registration counted running (every live
// request on the pylon) plus the hub's pending reservations on it, the
// requests the registration does not show yet; it is full when a queue
// refusal marked it (MarkFull) or when that load leaves no free slot
// under the max_engine_concurrency it reported.
func (cl *cluster) affinityPlaces() []affinity.Place {
	out := make([]affinity.Place, len(cl.backends))
	for i, m := range cl.backends {
		out[i] = affinity.Place{ID: affinity.HashID(m.backend.ID), Load: int(m.stats.NumRunningQueries)}
	}
	for _, r := range cl.reservations {
		if j, ok := cl.findMember(r.backendID); ok {
			out[j].Load++
		}
	}
	for i, m := range cl.backends {
		limit := m.stats.MaxEngineConcurrency
		out[i].Full = m.refused || (limit > 0 && uint64(out[i].Load) >= limit)
	}
	return out
}

// publishedPlaces collects the clusters' places for one publication,
// computing those a change made stale. A cluster of one backend has none
// (there is no choice to make), and a target whose clusters all have one
// backend gets nil, so the common deployment, one pylon per cluster, pays
// nothing for the affinity choice.
func publishedPlaces(clusters []*cluster) [][]affinity.Place {
	var out [][]affinity.Place
	for i, cl := range clusters {
		if len(cl.backends) < 2 {
			continue
		}
		if cl.places == nil {
			cl.places = cl.affinityPlaces()
		}
		if out == nil {
			out = make([][]affinity.Place, len(clusters))
		}
		out[i] = cl.places
	}
	return out
}

// picksCollector exports every target's affinity picks at scrape time.
type picksCollector struct {
	s     *Store
	picks *prometheus.Desc
}

// AffinityCollector returns the scrape-time counter
// <prefix>backend_affinity_picks_total{routing_key, model, outcome}: the
// backends NextBackend chose by affinity in clusters of more than one
// backend, per target, as preferred (the key's first choice), spilled
// (another one) or no_key (a request without a key). It exports nothing
// with BackendAffinity off. A target's counts go with it when no
// registration lists it any more and start again from 0 if it returns.
func (s *Store) AffinityCollector(prefix string) prometheus.Collector {
	return &picksCollector{s: s, picks: prometheus.NewDesc(prefix+"backend_affinity_picks_total",
		"Backends chosen inside a cluster by the request's affinity key: its first choice (preferred), another one (spilled), or the least loaded for a request without a key (no_key).",
		[]string{"routing_key", "model", "outcome"}, nil)}
}

func (c *picksCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.picks }

func (c *picksCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.backendChoice.roundRobin {
		return
	}
	for t, sl := range *c.s.index.Load() {
		for o := range pickOutcomes {
			ch <- prometheus.MustNewConstMetric(c.picks, prometheus.CounterValue, float64(sl.picks[o].Load()),
				t.RoutingKey, t.Model, o.String())
		}
	}
}
