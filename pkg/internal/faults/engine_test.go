package faults

import (
	"strconv"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// Bounds of TestEngineFaultsMoveTrafficAway. They are the hub's backend
// breaker's (hub/internal/breaker.DefaultConfig: open after 5 failures of
// the last 20, first probe after 5 s) plus what is already in flight when
// it opens.
const (
	breakerFailures = 5
	faultWorkers    = 4
	faultRequests   = 60
	// maxToBroken bounds the requests of one fault phase that reach the
	// broken engine: the failures that open the breaker, one in flight
	// per worker when it opens, and two probes.
	maxToBroken = breakerFailures + faultWorkers + 2
	// recoveryBound bounds how long the cluster stays avoided once the
	// fault is gone: the longest cool-down a phase can reach (its probes
	// failing at 5 s, then 10 s) plus the probe itself.
	recoveryBound = 30 * time.Second
	// headTimeout is the hub's --tunnel-request-timeout-ms here: how long a
	// hung engine holds an attempt before the hub retries elsewhere.
	headTimeout = 2 * time.Second
)

// TestEngineFaultsMoveTrafficAway: two clusters; b's engine answers 500,
// hangs, or drops streams after 2 tokens, one fault at a time, under 60
// requests from 4 clients.
//
// Bounds, per fault: at most maxToBroken of the 60 requests reach b's
// engine (without a breaker about half do: a failing engine looks idle
// to the load balancer); at most as many requests fail for the client,
// and only with a typed error or an error event the client sees; none
// hangs. Once the fault is cleared, b serves again within recoveryBound.
func TestEngineFaultsMoveTrafficAway(t *testing.T) {
	st := startStack(t, stack.Options{Fleet: fleet(2), ExtraArgs: map[string][]string{
		"hub": {"--tunnel-request-timeout-ms", strconv.FormatInt(headTimeout.Milliseconds(), 10)},
	}})
	ep := st.Endpoints()
	hc := httpClient(t)
	cl := newClient(hc, ep.APIKey)
	bad := ep.Engines["b"]

	for _, f := range []struct{ name, fault string }{
		{"status_500", `{"mode":"status","status":500}`},
		{"hang", `{"mode":"hang"}`},
		{"drop_after_2_tokens", `{"mode":"drop","after_tokens":2}`},
	} {
		t.Run(f.name, func(t *testing.T) {
			if err := put(t.Context(), hc, bad+"/test-control/fault", f.fault); err != nil {
				t.Fatal(err)
			}
			before := readControl(t, hc, bad).chats()
			rs := runN(faultRequests, faultWorkers, func(int) result { return cl.chat(t.Context(), ep.Gateway, "", 20) })
			toBroken := readControl(t, hc, bad).chats() - before
			failed := filter(rs, func(r result) bool { return r.outcome != complete })
			t.Logf("%d requests (%s); %d reached b's engine (bound %d); %d failed for the client",
				len(rs), tally(rs), toBroken, maxToBroken, len(failed))
			if toBroken > maxToBroken {
				t.Errorf("%d of %d requests reached the broken engine (bound %d): traffic did not move away", toBroken, len(rs), maxToBroken)
			}
			if len(failed) > maxToBroken {
				t.Errorf("%d requests failed for the client (bound %d)", len(failed), maxToBroken)
			}
			for _, r := range failed {
				if r.outcome != typedError && r.outcome != errorEvent && r.outcome != broken {
					t.Errorf("request %d ended %v: a client must see a typed error or an error event", r.seq, r.outcome)
				}
			}

			if err := put(t.Context(), hc, bad+"/test-control/fault", `{"mode":"none"}`); err != nil {
				t.Fatal(err)
			}
			served := readControl(t, hc, bad).chats()
			took := eventually(t, recoveryBound, "b serves again after the fault cleared", func() bool {
				r := cl.chat(t.Context(), ep.Gateway, "", 5)
				return r.engine == "b" && r.outcome == complete && readControl(t, hc, bad).chats() > served
			})
			t.Logf("b served again %v after the fault cleared (bound %v)", took.Round(100*time.Millisecond), recoveryBound)
		})
	}
}
