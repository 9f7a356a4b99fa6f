package routing

import (
	"cmp"
	"slices"
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
// statistics of its active backends aggregated into one
// (docs/design/routing-state.md#cluster-aggregation), with the cluster's
// pending reservations already applied
// (docs/design/routing-state.md#reservations).
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
	// whole nanoseconds rounded down.
	RTT time.Duration
	// UpdatedAt is when the hub processed the heartbeat of the backend that
	// currently provides the cluster's latest-wins fields.
	UpdatedAt time.Time
	// ActiveBackends is the number of active backends in the cluster for
	// this target; it is at least 1 in a published snapshot.
	ActiveBackends int
	// Priorities is Stats.QueueTimeEstimateMsByPriority sorted by priority,
	// built once when the view is published: estimates look priorities up
	// on every decision for every cluster, and a sorted slice answers
	// "greatest key ≤ p" without iterating a map. Nil when the map is empty
	// or when the view was built by hand (estimates then read the map).
	Priorities []PriorityEstimate
}

// PriorityEstimate is one entry of a queue-time-by-priority map.
type PriorityEstimate struct {
	Priority uint32
	Ms       uint64
}

// SortPriorities returns m's entries sorted by priority, nil for an empty
// map.
func SortPriorities(m map[uint32]uint64) []PriorityEstimate {
	if len(m) == 0 {
		return nil
	}
	out := make([]PriorityEstimate, 0, len(m))
	for p, ms := range m {
		out = append(out, PriorityEstimate{Priority: p, Ms: ms})
	}
	slices.SortFunc(out, func(a, b PriorityEstimate) int { return cmp.Compare(a.Priority, b.Priority) })
	return out
}

// Snapshot is every cluster of one target that has at least one active
// backend. The state store publishes a new Snapshot on every change and never
// modifies one it has published, so a reader may keep and reuse it freely.
type Snapshot struct {
	Target Target
	// Clusters is sorted by ClusterID, so positions are deterministic: Go
	// map order is random, and an algorithm that indexes or samples
	// clusters must see the same order for the same state.
	Clusters []ClusterView
	// Version increases with every snapshot the store publishes, across all
	// targets. Two snapshots of one target with the same Version are the same.
	Version uint64
	// Generation identifies the target's active lifetime. It changes when the
	// target's last active backend goes away and the target later becomes
	// active again; per-target load-balancer state (counters, caches) keyed on
	// (Target, Generation) therefore starts afresh when the target comes
	// back, as upstream Stargate's does
	// (docs/design/routing-state.md#targets-and-generations).
	Generation uint64
}

// Index returns the position of clusterID in s.Clusters, or -1. It
// relies on Clusters being sorted by ClusterID, as every published snapshot
// is.
func (s *Snapshot) Index(clusterID string) int {
	// By index, not slices.BinarySearchFunc: its callback takes each
	// ClusterView by value, a few hundred bytes copied per probe.
	lo, hi := 0, len(s.Clusters)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.Clusters[mid].ClusterID < clusterID {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(s.Clusters) && s.Clusters[lo].ClusterID == clusterID {
		return lo
	}
	return -1
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
	// LastClusterID is the trusted x-stargate-last-cluster-id: the cluster
	// that served this session's previous request, empty when there is no
	// hint. Only algorithms with last_cluster_affinity read it.
	LastClusterID string
	// Session is the classification an earlier decision of this request
	// made (docs/design/hub-request.md#session-classification). It is a
	// set-once cell owned by the routing pass (hub/internal/dispatch): the
	// first decision that applies session rules reports a classification
	// in Decision.Session, the pass stores it here, and every later
	// decision of the same request (timed waits, retries on other
	// clusters) reuses it unchanged. A picker reads it and never writes
	// it.
	Session SessionState
	// SessionPromoted records whether that first classification moved the
	// last cluster to the front of the affinity order (for the log).
	SessionPromoted bool
	// Prefix is what the hub's prefix index knew of the request's prompt
	// when the routing pass began; the zero value means the request carried
	// no prefix summary. Only prefix-aware algorithms read it.
	Prefix PrefixMatch
}

// PrefixHolder is one cluster the prefix index knows to hold a prefix of a
// request's prompt.
type PrefixHolder struct {
	ClusterID string
	// Blocks is the longest prefix of the prompt, in blocks, the cluster is
	// known to hold.
	Blocks int
}

// PrefixMatch is what the hub's prefix index knows of one request's prompt
// (docs/load-balancing.md#content-prefix-affinity).
type PrefixMatch struct {
	// TotalBlocks is the prompt's number of full blocks per the gateway's
	// summary; 0 means no summary.
	TotalBlocks int
	// BlockTokens is the block size in estimated tokens.
	BlockTokens int
	// Stride is the distance in blocks between two checkpoints of the
	// summary: the resolution at which the hub knows how much of the
	// prompt a cluster holds.
	Stride int
	// Holders lists the clusters holding a prefix, longest prefix first,
	// ties by ClusterID. It may name clusters outside the snapshot (a
	// holder that left or does not serve the target); readers skip those.
	// The slice is shared and must not be written.
	Holders []PrefixHolder
}

// Known reports whether the request carried a prefix summary.
func (p *PrefixMatch) Known() bool { return p.TotalBlocks > 0 }

// HeldBlocks returns the blocks clusterID is known to hold, 0 if none.
func (p *PrefixMatch) HeldBlocks(clusterID string) int {
	for _, h := range p.Holders {
		if h.ClusterID == clusterID {
			return h.Blocks
		}
	}
	return 0
}

// PrefixTier names how a prefix-aware decision used the prompt's prefix
// (docs/load-balancing.md#content-prefix-affinity).
type PrefixTier uint8

// The tiers, in the order a prefix-aware algorithm tries them. The zero
// value means the decision did not consider the prefix.
const (
	PrefixTierNone PrefixTier = iota
	// PrefixTierCache: a cluster holding the prefix had room.
	PrefixTierCache
	// PrefixTierSplit: every holder was saturated, so another cluster under
	// the split guard takes a copy of the prefix.
	PrefixTierSplit
	// PrefixTierOverflow: nothing cleared the guard; idle capacity serves the
	// request once, without becoming a holder.
	PrefixTierOverflow
	// PrefixTierLoad: no cluster is known to hold any of the prompt; the
	// least-loaded cluster serves it and becomes its first holder.
	PrefixTierLoad
)

// String returns the label value: "cache", "split", "overflow", "load", or
// "" for PrefixTierNone.
func (t PrefixTier) String() string {
	switch t {
	case PrefixTierCache:
		return "cache"
	case PrefixTierSplit:
		return "split"
	case PrefixTierOverflow:
		return "overflow"
	case PrefixTierLoad:
		return "load"
	}
	return ""
}

// SessionState classifies a request against its last-cluster hint.
type SessionState uint8

// The session states of last_cluster_affinity. The zero value means the
// request was never classified (feature off, or no affinity key).
const (
	SessionUnclassified SessionState = iota
	// SessionNew: no usable hint.
	SessionNew
	// SessionReturning: the hint names a current candidate cluster.
	SessionReturning
	// SessionStale: the hint names a cluster outside the candidate set.
	SessionStale
)

// String returns the label value: "new", "returning", "stale", or "" when
// unclassified.
func (s SessionState) String() string {
	switch s {
	case SessionNew:
		return "new"
	case SessionReturning:
		return "returning"
	case SessionStale:
		return "stale"
	}
	return ""
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
	// QueueEstimateMs is the queue estimate
	// (docs/design/algorithms.md#estimates) of the chosen cluster at the
	// request's priority, taken from the snapshot before this
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
	// GroupSize is the affinity group size a session-aware algorithm used
	// (cache_affinity_backend_selection_count, or 1); it decides whether a
	// new or stale session's selection counts as primary
	// (docs/design/hub-request.md#session-classification).
	GroupSize int
	// Session is the session classification this decision applied:
	// req.Session when the request was already classified, else the one
	// this decision made, else SessionUnclassified (the algorithm has no
	// session rules, the feature is off, or the request has no affinity
	// key). It is set on a "no choice, wait" decision too, since the first
	// classification may happen on a pass that waits. The routing pass
	// keeps the first one it sees in the request; the picker never writes
	// its input.
	Session SessionState
	// SessionPromoted is the promoted flag of that classification.
	SessionPromoted bool
	// PrefixTier is the tier a prefix-aware decision used, PrefixTierNone
	// when it did not look at the prefix.
	PrefixTier PrefixTier
	// PrefixMark asks the proxy to record the serving cluster as a holder of
	// the request's prefix once its response headers arrive (cache, split
	// and load tiers; an overflow serves without becoming a holder).
	PrefixMark bool
	// Wait is set only when Pick reports no choice: a positive Wait means
	// the algorithm expects a choice after that long (a locked bucket, the
	// affinity wait, the next band opening), so the routing pass waits and
	// asks again instead of failing the request
	// (docs/design/hub-request.md#waits).
	Wait time.Duration
}
