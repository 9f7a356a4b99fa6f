package proxy

import (
	"math"
	"net/http"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// Input-work admission reasons (hub.md §5.10), the values of
// stargate_admission_rejections_total{reason}.
const (
	reasonInputWorkLimit       = "input_work_limit_exceeded"
	reasonInputWorkUnavailable = "input_work_capacity_unavailable"
	// reasonRoutingCapacity: every candidate lacked capacity until the
	// routing wait ran out (503 overloaded_error).
	reasonRoutingCapacity = "routing_capacity_unavailable"
)

// admit applies max_input_work_seconds on one routing pass: the request's
// tokens plus every eligible cluster's queued input (reservations included),
// over the eligible clusters' summed valid input TPS. It returns "" to admit
// or the rejection reason. Pulsar-family algorithms count only clusters
// with a valid TPS (and, with consider_kv_free_tokens, room in their KV
// cache), since only those can be ranked.
func admit(route *Route, req *routing.Request, snap *routing.Snapshot) string {
	work := float64(req.InputTokens)
	rate := 0.0
	if snap != nil {
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
	}
	seconds := work / rate
	if !(rate > 0) || math.IsInf(rate, 0) || math.IsInf(seconds, 0) || math.IsNaN(seconds) {
		return reasonInputWorkUnavailable
	}
	if seconds > route.MaxInputWorkSeconds {
		return reasonInputWorkLimit
	}
	return ""
}

// kvFeasible is pulsar's KV check: a cluster must report KV metrics and have
// at least the request's tokens free.
func kvFeasible(req *routing.Request, c *routing.ClusterView) bool {
	s := &c.Stats
	if s.KVCacheCapacityTokens == 0 && s.KVCacheUsedTokens == 0 && s.KVCacheFreeTokens == 0 {
		return false
	}
	return s.KVCacheFreeTokens >= req.InputTokens
}

// rejectAdmission answers an admission rejection: 503 with code
// input_work_limit_exceeded for both reasons, as the reference does.
func (p *Proxy) rejectAdmission(w http.ResponseWriter, req *request, reason string) {
	t := req.target
	p.cfg.Log.Warn("rejecting request before routing due to input-work admission", "request_id", req.rreq.ID,
		"model", t.Model, "routing_key", t.RoutingKey, "reason", reason, "max_input_work_seconds", req.route.MaxInputWorkSeconds)
	p.cfg.Metrics.admissionRejected(t, reason)
	w.Header().Set(headers.StargateErrorCode, reasonInputWorkLimit)
	openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer,
		Code: reasonInputWorkLimit, Message: "input work admission limit exceeded"})
	p.done(req, "", http.StatusServiceUnavailable)
}
