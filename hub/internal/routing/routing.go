package routing

import (
	"time"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// Target is what the hub routes on: a routing key (empty means unscoped, and
// is a valid key everywhere) and a model id.
type Target struct {
	RoutingKey string
	Model      string
}

// ClusterView is one cluster of a target as a load balancer sees it: the
// statistics of its active backends aggregated per hub.md §6.2, with the
// cluster's pending reservations already applied (§6.5).
//
// A ClusterView inside a published Snapshot is immutable: its Stats map and
// slices are shared between readers and must never be written.
type ClusterView struct {
	// ClusterID is the capacity domain (a pylon's cluster_id, or its
	// inference_server_id when that is empty).
	ClusterID string
	// Stats is the cluster aggregate, reservations included.
	Stats protocol.ModelStats
	// RTT is the unweighted mean of the latest RTT of each active backend, in
	// whole nanoseconds rounded down (§6.3).
	RTT time.Duration
	// UpdatedAt is when the hub processed the heartbeat of the backend that
	// currently provides the cluster's latest-wins fields.
	UpdatedAt time.Time
	// ActiveBackends is the number of active backends in the cluster for
	// this target; it is at least 1 in a published snapshot.
	ActiveBackends int
}

// Snapshot is every cluster of one target that has at least one active
// backend. The state store publishes a new Snapshot on every change and never
// modifies one it has published, so a reader may keep and reuse it freely.
type Snapshot struct {
	Target Target
	// Clusters is sorted by ClusterID, so positions are deterministic (Go map
	// order is random; hub.md §11).
	Clusters []ClusterView
	// Version increases with every snapshot the store publishes, across all
	// targets. Two snapshots of one target with the same Version are the same.
	Version uint64
	// Generation identifies the target's active lifetime. It changes when the
	// target's last active backend goes away and the target later becomes
	// active again; per-target load-balancer state (counters, caches) keyed on
	// (Target, Generation) therefore resets exactly when the reference resets
	// it (hub.md §6.4).
	Generation uint64
}

// Request is one routing request as a load balancer sees it. Zero durations
// mean the header was absent.
type Request struct {
	// ID is the x-request-id, for logs only; no algorithm may depend on it.
	ID string
	// InputTokens is x-input-tokens.
	InputTokens uint64
	// Priority is x-priority: lower is more urgent, 0 when absent.
	Priority uint32
	// AffinityKey is x-cache-affinity-key; empty means absent.
	AffinityKey string
	// SLO is x-request-slo-ms.
	SLO time.Duration
	// MaxWait is x-max-wait-ms.
	MaxWait time.Duration
	// ReceivedAt is the request start, from which waiting algorithms measure
	// elapsed time.
	ReceivedAt time.Time
	// Excluded lists cluster ids that failed earlier in this request and must
	// never be chosen. It is short (a handful of retries), so a slice with a
	// linear scan beats a map and costs no allocation.
	Excluded []string
}

// IsExcluded reports whether clusterID is in r.Excluded.
func (r *Request) IsExcluded(clusterID string) bool {
	for _, id := range r.Excluded {
		if id == clusterID {
			return true
		}
	}
	return false
}

// Decision is a load balancer's choice of one cluster of a snapshot.
type Decision struct {
	// Cluster is the index of the chosen cluster in Snapshot.Clusters.
	Cluster int
	// ClusterID is Snapshot.Clusters[Cluster].ClusterID.
	ClusterID string
	// RankDepth is the 1-based rank of the choice; ≤1 counts as a "primary"
	// selection in stargate_routing_selections_total, more as "fallback".
	RankDepth int
	// QueueEstimateMs is the queue estimate (hub.md §4, qest) of the chosen
	// cluster at the request's priority, taken from the snapshot before this
	// request's own reservation; it is what x-stargate-expected-queue-ms
	// carries. It is meaningful only when QueueEstimateKnown is true; when it
	// is false the header is omitted.
	QueueEstimateMs    uint64
	QueueEstimateKnown bool
	// SelectedAfterKVFreeTokensSkip is set by algorithms that skipped a
	// higher-ranked cluster for lack of free KV cache.
	SelectedAfterKVFreeTokensSkip bool
	// Sampled is the number of clusters the algorithm looked at, when that
	// is meaningful (power-of-n's effective sample count); 0 otherwise.
	Sampled int
}
