package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
)

// hub is the simulated hub: the hub's own state store, which the
// simulated pylons report to, the arm's route resolved by the hub's own
// lbconfig, and the hub's routing pass (hub/internal/dispatch), the same
// one the proxy runs. Only what the proxy does around a pass differs: it
// sleeps on a clock where the simulator schedules an event.
type hub struct {
	clk    *clock.Fake
	store  *state.Store
	target routing.Target
	route  lb.Route
	limits dispatch.Limits
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
	return &hub{clk: clk, store: state.New(clk), target: target, route: route,
		limits: dispatch.Limits{MaxRoutingWait: opts.MaxRoutingWait, MaxWaitPoll: opts.MaxWaitPoll}}, nil
}

// newPass starts the pass state of a request that arrives now. The
// gateway sends no x-max-wait-ms, so the request takes the timed waits its
// load balancer asks for, up to the routing deadline, and no untimed
// re-polls.
func (h *hub) newPass(req routing.Request) dispatch.Pass {
	return dispatch.NewPass(h.route, req, 0, false, h.limits)
}

// pass runs one routing pass on the store's current snapshot. A choice
// reserves load on the backend the store's round robin gives, as the
// proxy's first attempt does; ok is false only if the chosen cluster has
// no backend, which a snapshot never publishes.
func (h *hub) pass(p *dispatch.Pass, now time.Time, rng *rand.Rand) (out dispatch.Outcome, b state.Backend, ok bool) {
	out = dispatch.Decide(p, h.store.Snapshot(h.target), now, rng)
	if out.Kind != dispatch.Chosen {
		return out, state.Backend{}, true
	}
	b, ok = h.store.NextBackend(h.target, out.Decision.ClusterID, nil)
	if !ok {
		return out, b, false
	}
	h.store.Reserve(h.target, out.Decision.ClusterID, b.ID, p.Req.InputTokens, p.Req.Priority)
	return out, b, true
}

// armError names the arm in a hub construction error.
func armError(arm string, err error) error { return fmt.Errorf("arm %s: %w", arm, err) }
