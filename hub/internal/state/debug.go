package state

import (
	"cmp"
	"slices"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// DebugState is the JSON view of the routing state served on GET
// /debug/state. It is a copy: nothing in it aliases the store.
type DebugState struct {
	Targets  []DebugTarget  `json:"targets"`
	Backends []DebugBackend `json:"backends"`
	// PendingReservations counts every reservation not yet dropped.
	PendingReservations int `json:"pending_reservations"`
	// RememberedTargets counts the targets Known remembers from past
	// registrations (bounded by DefaultRememberedTargets or
	// RememberTargets).
	RememberedTargets int `json:"remembered_targets"`
}

// DebugTarget is one routing target.
type DebugTarget struct {
	RoutingKey string `json:"routing_key"`
	Model      string `json:"model"`
	// Advertisers is the number of live registrations listing the model,
	// whatever its status; Registered is Advertisers > 0.
	Advertisers    int            `json:"advertisers"`
	ActiveBackends int            `json:"active_backends"`
	Generation     uint64         `json:"generation"`
	Version        uint64         `json:"snapshot_version"`
	Clusters       []DebugCluster `json:"clusters"`
}

// DebugCluster is one cluster of a target: the view load balancers see
// (reservations applied), the aggregate without them, and its backends.
type DebugCluster struct {
	ClusterID      string              `json:"cluster_id"`
	ActiveBackends int                 `json:"active_backends"`
	RTTNanos       int64               `json:"rtt_ns"`
	RTTMs          float64             `json:"rtt_ms"`
	UpdatedAt      time.Time           `json:"updated_at"`
	StatsSource    string              `json:"stats_source_backend_id"`
	Stats          protocol.ModelStats `json:"stats"`
	BaseStats      protocol.ModelStats `json:"stats_without_reservations"`
	RoundRobin     uint64              `json:"round_robin_counter"`
	// FullByRefusal reports that every backend of the cluster is marked
	// full by a queue refusal, so Stats shows it full
	// (docs/design/routing-state.md#queue-refusals).
	FullByRefusal bool               `json:"full_by_refusal"`
	Backends      []DebugMember      `json:"backends"`
	Reservations  []DebugReservation `json:"reservations"`
}

// DebugMember is one active backend inside a cluster of a target.
type DebugMember struct {
	ID         string              `json:"id"`
	URL        string              `json:"url"`
	RTTNanos   int64               `json:"rtt_ns"`
	ReceivedAt time.Time           `json:"received_at"`
	Stats      protocol.ModelStats `json:"stats"`
	// QueueRefusal is the backend's mark after a queue_estimate_mismatch
	// refusal, until its next registration; nil when it has none.
	QueueRefusal *DebugQueueRefusal `json:"queue_refusal,omitempty"`
}

// DebugQueueRefusal is a backend's mark after a refusal (Store.MarkFull).
type DebugQueueRefusal struct {
	// ActualQueueMs is the queue the backend reported with its refusal.
	ActualQueueMs uint64    `json:"actual_queue_ms"`
	At            time.Time `json:"at"`
}

// DebugReservation is one pending reservation.
type DebugReservation struct {
	ID        uint64    `json:"id"`
	BackendID string    `json:"backend_id"`
	Tokens    uint64    `json:"input_tokens"`
	Priority  uint32    `json:"priority"`
	CreatedAt time.Time `json:"created_at"`
}

// DebugBackend is one live registration.
type DebugBackend struct {
	Backend
	LastApply           time.Time `json:"last_apply"`
	LastSeq             uint64    `json:"last_seq"`
	Applies             uint64    `json:"applies"`
	AdvertisedModels    []string  `json:"advertised_models"`
	ActiveModels        []string  `json:"active_models"`
	PendingReservations int       `json:"pending_reservations"`
}

// Debug returns a DebugState: every target with its clusters, backends,
// statistics, RTTs, reservations and update times. It takes the writer lock,
// so it is for the debug endpoint, not for the request path.
func (s *Store) Debug() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := DebugState{Targets: []DebugTarget{}, Backends: []DebugBackend{}, PendingReservations: len(s.reservations)}
	for _, t := range s.targets {
		dt := DebugTarget{RoutingKey: t.key.RoutingKey, Model: t.key.Model, Advertisers: t.advertisers,
			ActiveBackends: t.active, Generation: t.gen, Clusters: []DebugCluster{}}
		if p := t.slot.pub.Load(); p != nil {
			dt.Version = p.snap.Version
		}
		for _, cl := range t.clusters {
			dc := DebugCluster{
				ClusterID: cl.id, ActiveBackends: cl.view.ActiveBackends,
				RTTNanos: int64(cl.view.RTT), RTTMs: cl.view.RTT.Seconds() * 1000, UpdatedAt: cl.view.UpdatedAt,
				StatsSource: cl.source, Stats: cloneStats(&cl.view.Stats), BaseStats: cloneStats(&cl.base.Stats),
				RoundRobin: cl.rr.Load(), Backends: []DebugMember{}, Reservations: []DebugReservation{},
			}
			_, dc.FullByRefusal = cl.fullFloor()
			for _, m := range cl.backends {
				dm := DebugMember{ID: m.backend.ID, URL: m.backend.URL,
					RTTNanos: int64(m.rtt), ReceivedAt: m.receivedAt, Stats: cloneStats(&m.stats)}
				if m.refused {
					dm.QueueRefusal = &DebugQueueRefusal{ActualQueueMs: m.refusedQueueMs, At: m.refusedAt}
				}
				dc.Backends = append(dc.Backends, dm)
			}
			for _, r := range cl.reservations {
				dc.Reservations = append(dc.Reservations, DebugReservation{ID: r.id, BackendID: r.backendID,
					Tokens: r.tokens, Priority: r.priority, CreatedAt: r.at})
			}
			dt.Clusters = append(dt.Clusters, dc)
		}
		out.Targets = append(out.Targets, dt)
	}
	slices.SortFunc(out.Targets, func(a, b DebugTarget) int {
		return cmp.Or(cmp.Compare(a.RoutingKey, b.RoutingKey), cmp.Compare(a.Model, b.Model))
	})
	for _, bs := range s.backends {
		db := DebugBackend{Backend: bs.b, LastApply: bs.lastApply, LastSeq: bs.lastSeq, Applies: bs.applies,
			AdvertisedModels: []string{}, ActiveModels: []string{}, PendingReservations: len(bs.reservations)}
		for m, active := range bs.advertised {
			db.AdvertisedModels = append(db.AdvertisedModels, m)
			if active {
				db.ActiveModels = append(db.ActiveModels, m)
			}
		}
		slices.Sort(db.AdvertisedModels)
		slices.Sort(db.ActiveModels)
		out.Backends = append(out.Backends, db)
	}
	slices.SortFunc(out.Backends, func(a, b DebugBackend) int { return cmp.Compare(a.ID, b.ID) })
	s.seenMu.Lock()
	out.RememberedTargets = s.seen.len()
	s.seenMu.Unlock()
	return out
}

// ClusterGauge is the scrape-time view of one cluster of one target: what
// the Cluster balance dashboard shows beside the pylons' own series.
type ClusterGauge struct {
	Target    routing.Target
	ClusterID string
	// RTT is the mean tunnel round trip of the cluster's backends, the
	// value the load balancers see.
	RTT time.Duration
	// Reservations and ReservedTokens are the requests the hub has sent
	// to the cluster that its backends' statistics do not show yet.
	Reservations   int
	ReservedTokens uint64
	// RefusedBackends counts the cluster's backends marked full by a
	// queue refusal since their last registration (Store.MarkFull).
	RefusedBackends int
}

// ClusterGauges calls fn once per cluster of every target. It takes the
// writer lock for the walk, so it is for a metrics scrape, not for the
// request path; fn must not call back into the store.
func (s *Store) ClusterGauges(fn func(ClusterGauge)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		for _, cl := range t.clusters {
			fn(ClusterGauge{Target: t.key, ClusterID: cl.id, RTT: cl.view.RTT, Reservations: len(cl.reservations),
				ReservedTokens: cl.reservedTokens(), RefusedBackends: cl.refused})
		}
	}
}
