package state_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// The collector reports, per target and cluster, the mean RTT and the
// pending reservations with their tokens, and the backends a queue refusal
// marked full; a backend's next heartbeat and a cluster's departure show
// at the next scrape.
func TestCollector(t *testing.T) {
	s, _ := newStore()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector("stargate_"))
	s.Apply(backend("a", "c1"), one("m", protocol.ModelStats{}), 2*time.Millisecond, true)
	s.Apply(backend("b", "c1"), one("m", protocol.ModelStats{}), 4*time.Millisecond, true)
	s.Apply(backend("x", "c2"), one("m", protocol.ModelStats{}), 10*time.Millisecond, true)
	s.Reserve(target("m"), "c1", "a", 100, 0)
	s.Reserve(target("m"), "c1", "b", 20, 0)
	if !s.MarkFull(target("m"), "c1", "a", 40) {
		t.Fatal("MarkFull did not mark an active backend")
	}

	const header = `
# HELP stargate_cluster_pending_reservations Requests sent to a cluster that its backends' statistics do not show yet.
# TYPE stargate_cluster_pending_reservations gauge
`
	want := header + `stargate_cluster_pending_reservations{cluster_id="c1",model="m",routing_key="rk"} 2
stargate_cluster_pending_reservations{cluster_id="c2",model="m",routing_key="rk"} 0
# HELP stargate_cluster_refused_backends Backends of a cluster marked full by a queue_estimate_mismatch refusal until their next registration.
# TYPE stargate_cluster_refused_backends gauge
stargate_cluster_refused_backends{cluster_id="c1",model="m",routing_key="rk"} 1
stargate_cluster_refused_backends{cluster_id="c2",model="m",routing_key="rk"} 0
# HELP stargate_cluster_reserved_input_tokens Input tokens of the cluster's pending reservations, added to its queued input for routing.
# TYPE stargate_cluster_reserved_input_tokens gauge
stargate_cluster_reserved_input_tokens{cluster_id="c1",model="m",routing_key="rk"} 120
stargate_cluster_reserved_input_tokens{cluster_id="c2",model="m",routing_key="rk"} 0
# HELP stargate_cluster_rtt_seconds Mean tunnel round trip of a cluster's backends, as the load balancers see it.
# TYPE stargate_cluster_rtt_seconds gauge
stargate_cluster_rtt_seconds{cluster_id="c1",model="m",routing_key="rk"} 0.003
stargate_cluster_rtt_seconds{cluster_id="c2",model="m",routing_key="rk"} 0.01
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// a's heartbeat drops a's reservation and its mark; c2 leaves the
	// target.
	s.Apply(backend("a", "c1"), one("m", protocol.ModelStats{}), 2*time.Millisecond, true)
	s.Remove("x")
	want = header + `stargate_cluster_pending_reservations{cluster_id="c1",model="m",routing_key="rk"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stargate_cluster_pending_reservations"); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP stargate_cluster_refused_backends Backends of a cluster marked full by a queue_estimate_mismatch refusal until their next registration.
# TYPE stargate_cluster_refused_backends gauge
stargate_cluster_refused_backends{cluster_id="c1",model="m",routing_key="rk"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stargate_cluster_refused_backends"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(s.Collector("stargate_"), "stargate_cluster_reserved_input_tokens"); n != 1 {
		t.Fatalf("series after c2 left = %d, want 1", n)
	}
}
