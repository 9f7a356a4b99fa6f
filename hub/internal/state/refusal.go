package state

import (
	"maps"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// MarkFull records that backendID, in cluster clusterID of t, refused a
// request because its own queue estimate (queueMs, the refusal's
// actual_queue_ms) exceeded the hub's
// (docs/design/routing-state.md#queue-refusals). Until the backend's next
// registration snapshot replaces its statistics, or it leaves, the backend
// counts as full; a cluster whose every active backend is marked is
// published with no free slot and a queue estimate of at least the
// smallest of their queueMs, pending reservations adding on top. A later
// refusal before that registration replaces the backend's queueMs: it is
// the fresher observation.
//
// Several hubs route to the same pylons and each counts only its own
// reservations, so between two registrations each can see a free slot the
// others have already taken; the refusal is the only news of that a hub
// gets before the next registration. MarkFull reports false, and marks
// nothing, when backendID is not an active backend of that cluster of t.
func (s *Store) MarkFull(t routing.Target, clusterID, backendID string, queueMs uint64) bool {
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	tg := s.targets[t]
	if tg == nil {
		return false
	}
	i, ok := tg.findCluster(clusterID)
	if !ok {
		return false
	}
	cl := tg.clusters[i]
	j, ok := cl.findMember(backendID)
	if !ok {
		return false
	}
	m := cl.backends[j]
	if !m.refused {
		cl.refused++
	}
	m.refused, m.refusedQueueMs, m.refusedAt = true, queueMs, now
	cl.viewDirty = true
	c := s.newChange()
	c.touch(tg)
	c.addsLoadOnly = true
	s.commit(c)
	return true
}

// fullFloor reports whether every backend of cl is marked full by a
// refusal and, if so, the smallest queue any of them reported: the
// cluster's queue estimate may not fall below it.
func (cl *cluster) fullFloor() (uint64, bool) {
	if cl.refused == 0 || cl.refused < len(cl.backends) {
		return 0, false
	}
	floor := cl.backends[0].refusedQueueMs
	for _, m := range cl.backends[1:] {
		floor = min(floor, m.refusedQueueMs)
	}
	return floor, true
}

// applyFull makes a cluster's aggregate full
// (docs/design/routing-state.md#queue-refusals): num_running_queries is
// raised to max_engine_concurrency, so the free-slot rule no longer applies
// and a capacity check without an allowance finds no room, and the queue
// estimate at every priority is raised to at least floorMs:
//
//   - a non-empty priority map gets every value raised to floorMs and a
//     key 0 (which every priority's lookup reaches) of at least floorMs;
//   - an empty map whose tokens/TPS estimate is defined becomes
//     {0: max(that estimate, floorMs)}, so the estimate stays what it was
//     when it was higher;
//   - an undefined estimate (queued input without a usable TPS) is
//     already unbounded and is left as it is.
//
// It runs before applyReservations, which then adds the hub's pending
// requests on top. The map is copied first: it is shared with a backend's
// stored statistics.
func applyFull(stats *protocol.ModelStats, floorMs uint64) {
	if stats.MaxEngineConcurrency > 0 {
		stats.NumRunningQueries = max(stats.NumRunningQueries, stats.MaxEngineConcurrency)
	}
	if len(stats.QueueTimeEstimateMsByPriority) == 0 {
		ms, ok := queueTimeDeltaMs(stats.QueuedInputSize, stats.LastMeanInputTPS)
		if !ok {
			return
		}
		stats.QueueTimeEstimateMsByPriority = map[uint32]uint64{0: max(ms, floorMs)}
		return
	}
	m := maps.Clone(stats.QueueTimeEstimateMsByPriority)
	for k, v := range m {
		m[k] = max(v, floorMs)
	}
	m[0] = max(m[0], floorMs)
	stats.QueueTimeEstimateMsByPriority = m
}
