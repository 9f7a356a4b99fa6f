package lb

import (
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Picker is the one load-balancing seam: it chooses a cluster of snap for req.
//
// Pick must be pure. It may read only its arguments and the picker's own
// state; it never writes req (a session classification it makes is
// reported in the Decision, and the routing pass keeps it), does no I/O,
// reads no clock (now is the time), draws randomness only from rng (never
// the global source) and never blocks. It must never
// choose a cluster listed in req.Excluded. It reports false when it has no
// choice: a nil or empty snapshot, every cluster excluded, or nothing the
// algorithm considers selectable. rng must not be nil; a *rand.Rand is not
// safe for concurrent use, so each goroutine passes its own.
type Picker interface {
	Pick(req *routing.Request, snap *routing.Snapshot, now time.Time, rng *rand.Rand) (routing.Decision, bool)
}

// NewDecision builds the decision for choosing snap.Clusters[i] at rankDepth,
// filling in the cluster id and the queue estimate the proxy forwards as
// x-stargate-expected-queue-ms. The estimate comes from the snapshot the
// choice was made on, before this request's own reservation, so the pylon
// compares its queue with what the hub saw when it chose
// (docs/design/hub-request.md#one-attempt).
func NewDecision(snap *routing.Snapshot, i, rankDepth int, req *routing.Request) routing.Decision {
	c := &snap.Clusters[i]
	ms, ok := ViewQueueEstimate(c, req.Priority)
	return routing.Decision{
		Cluster:            i,
		ClusterID:          c.ClusterID,
		RankDepth:          rankDepth,
		QueueEstimateMs:    ms,
		QueueEstimateKnown: ok,
	}
}

// FieldError is a configuration error that names the offending field, in the
// form "<algorithm> <field> <problem>", e.g. "power-of-n sample_count must be
// between 1 and 64, got 0".
type FieldError struct {
	Algorithm string
	Field     string
	Problem   string
}

func (e *FieldError) Error() string { return e.Algorithm + " " + e.Field + " " + e.Problem }
