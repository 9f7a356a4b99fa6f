package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// hub is the simulated hub: the hub's own state store, which the
// simulated pylons report to, the arm's route resolved by the hub's own
// lbconfig, and the hub's routing pass (hub/internal/dispatch), the same
// one the proxy runs. Only what the proxy does around a pass differs: it
// sleeps on a clock where the simulator schedules an event.
//
// The wake rule is the proxy's (docs/design/hub-request.md#waits): a
// request that waits passes again at the end of its wait or at its
// target's next waking publication, whichever is first. The simulator's
// waking publications are the reports it applies (a reservation wakes
// nobody, as in the hub); a report wakes every sleeper, in the order they
// went to sleep, all at the report's instant.
type hub struct {
	clk    *clock.Fake
	store  *state.Store
	target routing.Target
	route  lb.Route
	limits dispatch.Limits
	// prefix is the hub's prefix index, on the simulated clock; nil unless
	// the route reads prompt prefixes (the live hub's index stays empty
	// for other routes: it learns only from their decisions).
	prefix *prefixindex.Index

	// seen is the target's publication count read before the latest
	// pass's snapshot, as the proxy reads it.
	seen uint64
	// sleepers are the requests put to sleep since the last wake, in
	// order; asleep holds the current nap of each sleeping request: an
	// evDecide event of another nap is stale (the request was woken).
	sleepers []sleeper
	asleep   map[*reqState]uint64
	naps     uint64
}

// sleeper is one nap of a waiting request.
type sleeper struct {
	rs        *reqState
	seen, nap uint64
}

// newHub resolves the lb-config cfgText for model (no x-routing-method)
// and starts an empty hub at Epoch.
func newHub(cfgText []byte, model string, opts Options) (*hub, error) {
	cfg, err := lbconfig.Parse(cfgText)
	if err != nil {
		return nil, err
	}
	clk := clock.NewFake(Epoch)
	res, err := lbconfig.NewResolver(cfg, lbfactory.New, lbconfig.Options{Clock: clk})
	if err != nil {
		return nil, err
	}
	target := routing.Target{Model: model}
	route, rej := res.Resolve(target, "")
	if rej != nil {
		return nil, rej
	}
	opts = opts.withDefaults()
	h := &hub{clk: clk, store: state.New(clk, opts.State...), target: target, route: route,
		limits: dispatch.Limits{MaxRoutingWait: opts.MaxRoutingWait, MaxWaitSleep: opts.MaxWaitSleep},
		asleep: map[*reqState]uint64{}}
	if route.UsesPrefix {
		if h.prefix, err = prefixindex.New(opts.PrefixIndex, clk); err != nil {
			return nil, fmt.Errorf("prefix index: %w", err)
		}
	}
	return h, nil
}

// prefixRequest is the proxy's reading of x-stargate-prompt-prefix
// (hub/internal/proxy/prefix.go), for a request whose gateway summary is
// s: on a route that reads prefixes, it fills rr.Prefix with what the
// index knows of s now, once, before the first pass, and returns the key
// that chooses the backend and the engine inside the chosen cluster
// (prefixhash.InnerKey, as the proxy does).
func (h *hub) prefixRequest(rr *routing.Request, s prefixhash.Summary) string {
	if !h.route.UsesPrefix || s.Empty() {
		return rr.AffinityKey
	}
	rr.Prefix = routing.PrefixMatch{TotalBlocks: s.TotalBlocks, BlockTokens: s.BlockTokens, Stride: s.Stride,
		Holders: h.prefix.Match(h.target.Model, s, nil)}
	return prefixhash.InnerKey(rr.AffinityKey, s)
}

// markPrefix is the proxy's mark when a 2xx's headers arrive from the
// chosen cluster: the decision asked for it (Decision.PrefixMark), and
// the request carried a summary.
func (h *hub) markPrefix(s prefixhash.Summary, clusterID string) {
	if h.prefix != nil && !s.Empty() {
		h.prefix.Mark(h.target.Model, s, clusterID)
	}
}

// newPass starts the pass state of a request that arrives now. The
// gateway sends no x-max-wait-ms, so the request takes the timed waits its
// load balancer asks for, up to the routing deadline, and no untimed
// waits.
func (h *hub) newPass(req routing.Request) dispatch.Pass {
	return dispatch.NewPass(h.route, req, 0, false, h.limits)
}

// pass runs one routing pass on the store's current snapshot. A choice
// reserves load on the backend the store gives for key (the request's
// inner key, prefixRequest), as the proxy's first attempt does; ok is
// false only if the chosen cluster has no backend, which a snapshot never
// publishes.
func (h *hub) pass(p *dispatch.Pass, key string, now time.Time, rng *rand.Rand) (out dispatch.Outcome, b state.Backend, ok bool) {
	h.seen = h.store.Publications(h.target)
	out = dispatch.Decide(p, h.store.Snapshot(h.target), now, rng)
	if out.Kind != dispatch.Chosen {
		return out, state.Backend{}, true
	}
	b, ok = h.store.NextBackend(h.target, out.Decision.ClusterID, key, nil)
	if !ok {
		return out, b, false
	}
	h.store.Reserve(h.target, out.Decision.ClusterID, b.ID, p.Req.InputTokens, p.Req.Priority)
	return out, b, true
}

// armError names the arm in a hub construction error.
func armError(arm string, err error) error { return fmt.Errorf("arm %s: %w", arm, err) }

// sleep puts rs to sleep after a pass that waits d: its next pass is d
// from now, unless a waking publication comes first (wake).
func (r *runner) sleep(rs *reqState, d time.Duration) {
	h := r.hub
	h.naps++
	h.asleep[rs] = h.naps
	h.sleepers = append(h.sleepers, sleeper{rs: rs, seen: h.seen, nap: h.naps})
	r.schedule(r.now+int64(d), event{kind: evDecide, r: rs, n: h.naps})
}

// wake runs after the hub applied a report: every sleeper whose target
// has had a waking publication since its pass read the count passes
// again now, in the order they went to sleep. Their pending wait events
// go stale.
func (r *runner) wake() {
	h := r.hub
	now := h.store.Publications(h.target)
	kept := h.sleepers[:0]
	for _, s := range h.sleepers {
		if h.asleep[s.rs] != s.nap {
			continue // already passed again at its wait's end
		}
		if s.seen == now {
			kept = append(kept, s)
			continue
		}
		h.naps++
		h.asleep[s.rs] = h.naps
		r.schedule(r.now, event{kind: evDecide, r: s.rs, n: h.naps})
	}
	clear(h.sleepers[len(kept):])
	h.sleepers = kept
}

// awake reports whether an evDecide event of nap n for rs is due: false
// when rs was woken since and the event is stale. The greedy arm has no
// hub and no naps.
func (h *hub) awake(rs *reqState, n uint64) bool {
	if h == nil {
		return true
	}
	if h.asleep[rs] != n {
		return false
	}
	delete(h.asleep, rs)
	return true
}
