package dispatch

import (
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Limits are the hub-wide bounds on a request's routing waits
// (docs/design/hub-request.md#waits).
type Limits struct {
	// MaxRoutingWait caps x-max-wait-ms, and is how long a request without
	// the header may take the timed waits its load balancer asks for.
	MaxRoutingWait time.Duration
	// MaxWaitSleep caps one wait. A waiting request is woken by the next
	// publication of its target that may give it room
	// (state.Store.PublishedAfter), not by polling; this bound only
	// guards against the changes that publish nothing or wake nobody (a
	// breaker's cool-down ending, a reservation that narrows the gap to
	// a locked estimate bucket; docs/design/hub-request.md#waits). 0 or
	// less means no bound.
	MaxWaitSleep time.Duration
}

// DefaultMaxWaitSleep is one second: what every backend's registration
// heartbeat already bounds by default, so the guard costs a waiting
// request at most one pass a second when nothing publishes.
const DefaultMaxWaitSleep = time.Second

// DefaultLimits are the hub's limits: a 60 s routing wait, each sleep
// bounded by DefaultMaxWaitSleep.
func DefaultLimits() Limits {
	return Limits{MaxRoutingWait: 60 * time.Second, MaxWaitSleep: DefaultMaxWaitSleep}
}

// Pass is one request's routing state, kept across its passes (waits and
// retries on other clusters). The caller owns it and
// sets Req.Excluded before each pass; Decide keeps the request's session
// classification in Req.
type Pass struct {
	// Route is the request's load balancer and its per-definition rules.
	Route lb.Route
	// Req is the request as the load balancer sees it. Req.ReceivedAt is
	// the request's start, from which the deadlines below count.
	Req routing.Request
	// WaitUntil ends the timed waits the load balancer asks for.
	WaitUntil time.Time
	// RepollUntil ends the untimed waits; zero when the request sent no
	// x-max-wait-ms, which allows none.
	RepollUntil time.Time
	// MaxWaitSleep caps one wait (Limits.MaxWaitSleep).
	MaxWaitSleep time.Duration
}

// NewPass starts the pass state of a request that began at
// req.ReceivedAt. hasMaxWait reports that it sent x-max-wait-ms, whose
// value is maxWait: the header then bounds every wait (capped by
// l.MaxRoutingWait) and allows untimed waits until it runs out; without
// it only the load balancer's timed waits happen, for up to
// l.MaxRoutingWait.
func NewPass(route lb.Route, req routing.Request, maxWait time.Duration, hasMaxWait bool, l Limits) Pass {
	p := Pass{Route: route, Req: req, MaxWaitSleep: l.MaxWaitSleep}
	start := req.ReceivedAt
	p.WaitUntil = start.Add(l.MaxRoutingWait)
	if hasMaxWait {
		p.RepollUntil = start.Add(min(maxWait, l.MaxRoutingWait))
		p.WaitUntil = p.RepollUntil
	}
	return p
}

// Kind is how a pass ended.
type Kind uint8

const (
	// Chosen means the load balancer chose Outcome.Decision.ClusterID.
	Chosen Kind = iota
	// Wait means nothing is chosen yet: pass again after Outcome.Wait,
	// or sooner, at the target's next waking publication.
	Wait
	// Rejected means input-work admission refused the request
	// (Outcome.Reason).
	Rejected
	// NoCandidates means the target has no cluster with an active backend.
	NoCandidates
	// Exhausted means every cluster of the target failed earlier in this
	// request and is excluded.
	Exhausted
	// Unavailable means some clusters are eligible, but the load balancer
	// can use none of them and no wait is left.
	Unavailable
)

var kindNames = [...]string{Chosen: "chosen", Wait: "wait", Rejected: "rejected", NoCandidates: "no_candidates",
	Exhausted: "exhausted", Unavailable: "unavailable"}

// String returns the kind's name, for logs and test output.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Outcome is what one pass decided.
type Outcome struct {
	Kind Kind
	// Decision is the load balancer's answer: the choice when Kind is
	// Chosen; its no-choice decision (with the wait it asked for) when
	// Kind is Wait or Unavailable; zero otherwise.
	Decision routing.Decision
	// Wait is the longest the request sleeps before its next pass (Kind
	// Wait); the caller wakes it sooner at its target's next waking
	// publication. Timed reports that it is a wait the load balancer
	// asked for; false means a wait for a change that only x-max-wait-ms
	// allows.
	Wait  time.Duration
	Timed bool
	// Reason is the admission rejection reason (Kind Rejected).
	Reason string
	// Candidates counts the snapshot's clusters, Eligible those the
	// request has not excluded.
	Candidates, Eligible int
	// Selection is the choice's class by rank (Kind Chosen):
	// SelectionPrimary for rank 1, else SelectionFallback.
	Selection string
	// SessionSelection is the choice's class by the session rules (Kind
	// Chosen, a route with last_cluster_affinity and a classified
	// request); "" otherwise.
	SessionSelection string
	// Escape is why that choice leaves the session's own cluster (one of
	// the Escape* reasons; Kind Chosen, a classified request); "" when it
	// stays. A choice after an attempt on that cluster failed is the
	// caller's to class (EscapeAfterFailure).
	Escape string
}

// Decide runs one routing pass for p on snap at now, in the order of
// docs/design/hub-request.md#routing-pass: count the eligible clusters,
// apply input-work admission, ask the load balancer, then choose the wait
// or the reason the request ends. It keeps the first session
// classification a decision reports in p.Req. rng serves the load
// balancer; it must not be nil.
func Decide(p *Pass, snap *routing.Snapshot, now time.Time, rng *rand.Rand) Outcome {
	var out Outcome
	out.Candidates, out.Eligible = count(snap, &p.Req)
	if out.Eligible == 0 {
		out.Kind = Exhausted
		if out.Candidates == 0 {
			out.Kind = NoCandidates
		}
		return out
	}
	if p.Route.HasInputWorkLimit {
		if reason := admit(&p.Route, &p.Req, snap); reason != "" {
			out.Kind, out.Reason = Rejected, reason
			return out
		}
	}
	dec, ok := p.Route.Picker.Pick(&p.Req, snap, now, rng)
	p.keepSession(&dec)
	out.Decision = dec
	if ok {
		out.Kind = Chosen
		out.Selection = rankSelection(dec.RankDepth)
		if p.Route.LastClusterAffinity && p.Req.Session != routing.SessionUnclassified {
			out.SessionSelection = sessionSelection(&p.Req, &dec)
			out.Escape = escape(&p.Req, &dec, snap, out.SessionSelection)
		}
		return out
	}
	out.Wait, out.Timed = p.wait(&dec, now)
	out.Kind = Wait
	if out.Wait <= 0 {
		out.Kind = Unavailable
	}
	return out
}

// count returns the snapshot's clusters and those req has not excluded.
func count(snap *routing.Snapshot, req *routing.Request) (candidates, eligible int) {
	if snap == nil {
		return 0, 0
	}
	candidates = len(snap.Clusters)
	if len(req.Excluded) == 0 {
		return candidates, candidates
	}
	for i := range snap.Clusters {
		if !req.IsExcluded(snap.Clusters[i].ClusterID) {
			eligible++
		}
	}
	return candidates, eligible
}

// wait chooses the wait after a pass without a choice: the load balancer's
// timed wait, capped by the wait deadline; else, when x-max-wait-ms leaves
// time, the rest of it, because a state change may free a cluster at any
// moment. Either is capped by MaxWaitSleep, and the caller ends it at the
// target's next waking publication. 0 means no wait is left.
func (p *Pass) wait(dec *routing.Decision, now time.Time) (time.Duration, bool) {
	switch {
	case dec.Wait > 0 && now.Before(p.WaitUntil):
		return p.sleep(min(dec.Wait, p.WaitUntil.Sub(now))), true
	case !p.RepollUntil.IsZero() && now.Before(p.RepollUntil):
		return p.sleep(p.RepollUntil.Sub(now)), false
	}
	return 0, false
}

// sleep caps d by MaxWaitSleep when it is set.
func (p *Pass) sleep(d time.Duration) time.Duration {
	if p.MaxWaitSleep > 0 {
		return min(d, p.MaxWaitSleep)
	}
	return d
}
