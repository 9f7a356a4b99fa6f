package dispatch

import (
	"math"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Admission reasons, the values of stargate_admission_rejections_total's
// reason label (docs/design/hub-request.md#input-work-admission).
const (
	// ReasonInputWorkLimit: the eligible clusters' queued input plus the
	// request's tokens would take longer than max_input_work_seconds.
	ReasonInputWorkLimit = "input_work_limit_exceeded"
	// ReasonInputWorkUnavailable: the eligible clusters report no usable
	// input rate, so the work cannot be timed at all.
	ReasonInputWorkUnavailable = "input_work_capacity_unavailable"
	// ReasonRoutingCapacity: every eligible cluster lacked capacity until
	// the routing wait ran out (a pass of Kind Unavailable with nothing
	// failed earlier). Decide never returns it as a Reason; the proxy
	// labels that outcome with it.
	ReasonRoutingCapacity = "routing_capacity_unavailable"
)

// admit applies max_input_work_seconds on one pass: the request's tokens
// plus every eligible cluster's queued input (reservations included), over
// the eligible clusters' summed valid input TPS. It returns "" to admit, or
// the rejection reason. Pulsar-family routes count only clusters with a
// valid TPS (and, with consider_kv_free_tokens, room in their KV cache),
// since only those can be ranked.
func admit(route *lb.Route, req *routing.Request, snap *routing.Snapshot) string {
	work := float64(req.InputTokens)
	rate := 0.0
	for i := range snap.Clusters {
		c := &snap.Clusters[i]
		if len(req.Excluded) > 0 && req.IsExcluded(c.ClusterID) {
			continue
		}
		tps := c.Stats.LastMeanInputTPS
		if route.AdmissionNeedsWeight && !lb.ValidTPS(tps) {
			continue
		}
		if route.AdmissionConsidersKV && !kvFeasible(req, c) {
			continue
		}
		work += float64(c.Stats.QueuedInputSize)
		if lb.ValidTPS(tps) {
			rate += tps
		}
	}
	seconds := work / rate
	if !(rate > 0) || math.IsInf(rate, 0) || math.IsInf(seconds, 0) || math.IsNaN(seconds) {
		return ReasonInputWorkUnavailable
	}
	if seconds > route.MaxInputWorkSeconds {
		return ReasonInputWorkLimit
	}
	return ""
}

// kvFeasible is pulsar's KV check (the same rule as pulsar.KVFeasible,
// which this package may not import): a cluster must report KV metrics and
// have at least the request's tokens free.
func kvFeasible(req *routing.Request, c *routing.ClusterView) bool {
	s := &c.Stats
	if s.KVCacheCapacityTokens == 0 && s.KVCacheUsedTokens == 0 && s.KVCacheFreeTokens == 0 {
		return false
	}
	return s.KVCacheFreeTokens >= req.InputTokens
}
