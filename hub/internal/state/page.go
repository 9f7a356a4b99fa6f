package state

import (
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// ClusterView is one cluster of one target as the routing page shows it:
// the aggregate of its backends' statistics without the hub's
// reservations, which it lists apart.
type ClusterView struct {
	Target    routing.Target
	ClusterID string
	// Region is the first non-empty --region label of its backends, in
	// backend id order ("" when none has one).
	Region   string
	Backends int
	RTT      time.Duration
	// UpdatedAt is when its newest statistics arrived.
	UpdatedAt time.Time
	// Running, MaxConcurrency, QueuedInputTokens and the KV tokens are
	// sums over the backends' latest statistics: the aggregate the
	// algorithms read takes some of them from one backend
	// (docs/design/routing-state.md#cluster-aggregation), which would show a
	// two-pylon cluster at half its size. InputTPS is the aggregate's.
	Running           uint64
	MaxConcurrency    uint64
	QueuedInputTokens uint64
	KVUsedTokens      uint64
	KVCapacityTokens  uint64
	InputTPS          float64
	Reservations      int
	ReservedTokens    uint64
	// FullByRefusal: every backend is marked full by a queue refusal.
	FullByRefusal bool
}

// reservedTokens sums the prompt tokens of the cluster's pending
// reservations. The caller holds the writer lock.
func (cl *cluster) reservedTokens() uint64 {
	var n uint64
	for _, r := range cl.reservations {
		n = satAdd(n, r.tokens)
	}
	return n
}

// ClusterViews returns every cluster of every target. It takes the writer
// lock for the walk, so it is for the routing page, not the request path.
func (s *Store) ClusterViews() []ClusterView {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ClusterView
	for _, t := range s.targets {
		for _, cl := range t.clusters {
			v := ClusterView{Target: t.key, ClusterID: cl.id, Backends: cl.view.ActiveBackends, RTT: cl.view.RTT,
				UpdatedAt: cl.view.UpdatedAt, InputTPS: cl.base.Stats.LastMeanInputTPS, Reservations: len(cl.reservations),
				ReservedTokens: cl.reservedTokens()}
			_, v.FullByRefusal = cl.fullFloor()
			for _, m := range cl.backends {
				if v.Region == "" {
					v.Region = m.backend.Region
				}
				v.Running = satAdd(v.Running, m.stats.NumRunningQueries)
				v.MaxConcurrency = satAdd(v.MaxConcurrency, m.stats.MaxEngineConcurrency)
				v.QueuedInputTokens = satAdd(v.QueuedInputTokens, m.stats.QueuedInputSize)
				v.KVUsedTokens = satAdd(v.KVUsedTokens, m.stats.KVCacheUsedTokens)
				v.KVCapacityTokens = satAdd(v.KVCapacityTokens, m.stats.KVCacheCapacityTokens)
			}
			out = append(out, v)
		}
	}
	return out
}
