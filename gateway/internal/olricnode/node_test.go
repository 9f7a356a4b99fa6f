package olricnode_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/olric-data/olric"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// memberlist's Shutdown does not wait for a probe already waiting on its
// ack timeout; that goroutine ends by itself within the probe timeout.
// Olric's RESP server can miss its own shutdown when a failed start closes
// it in the instant before it serves (TestStartFailsOnPortInUse, rarely):
// Start then abandons the shutdown at its bound, leaving that server's two
// goroutines behind on purpose (see shutdownWithin).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/olric-data/olric/internal/server.(*Server).Shutdown"),
		goleak.IgnoreAnyFunction("github.com/olric-data/olric/internal/server.(*Server).ListenAndServe"))
}

// TestClusterSharesEntries: three nodes started one after another form one
// cluster; an entry put through one node is read through another, and the
// cluster client's Incr runs on the owner.
func TestClusterSharesEntries(t *testing.T) {
	nodes := olrictest.Cluster(t, 3)
	ctx := context.Background()
	for i, n := range nodes {
		m, err := n.Members(ctx)
		if err != nil || m != 3 {
			t.Fatalf("node %d sees %d members (%v), want 3", i, m, err)
		}
	}
	dm0, _ := nodes[0].Embedded().NewDMap("t")
	dm2, _ := nodes[2].Embedded().NewDMap("t")
	if err := dm0.Put(ctx, "k", []byte("v"), olric.EX(time.Minute)); err != nil {
		t.Fatal(err)
	}
	gr, err := dm2.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := gr.Byte(); string(b) != "v" {
		t.Fatalf("got %q", b)
	}
	if _, err := dm2.Get(ctx, "missing"); !errors.Is(err, olric.ErrKeyNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	c1, _ := nodes[1].Cluster().NewDMap("t")
	c2, _ := nodes[2].Cluster().NewDMap("t")
	if _, err := c1.Incr(ctx, "n", 5); err != nil {
		t.Fatal(err)
	}
	if v, err := c2.Incr(ctx, "n", 2); err != nil || v != 7 {
		t.Fatalf("incr = %d, %v; want 7", v, err)
	}
}

// TestCollector: the node's stats are exported under the olric_* names.
func TestCollector(t *testing.T) {
	n := olrictest.Start(t, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(olricnode.NewCollector(n.Node))
	got, err := testutil.GatherAndCount(reg, "olric_cluster_members", "olric_partitions_primary_owned", "olric_dmap_get_hits_total")
	if err != nil || got != 3 {
		t.Fatalf("gathered %d series (%v)", got, err)
	}
	// The storage gauges sum a DMap over every partition it touched.
	dm, _ := n.Embedded().NewDMap("sized")
	ctx := context.Background()
	for i := range 50 {
		if err := dm.Put(ctx, fmt.Sprintf("k%d", i), []byte("value"), olric.EX(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	storage := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "sized" {
				storage[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	if storage["olric_storage_entries"] != 50 || storage["olric_storage_tables"] < 1 ||
		storage["olric_storage_inuse_bytes"] < 50*float64(len("k0value")) || storage["olric_storage_allocated_bytes"] < storage["olric_storage_inuse_bytes"] {
		t.Fatalf("storage gauges of DMap sized: %v", storage)
	}
}

// TestStartFailsOnPortInUse: a taken port is an error, not a hang. It must
// stay the last test: a failed start leaves Olric's process-global
// startup checkpoints inconsistent, so no later node in this process would
// ever report Started (the binary exits on this error anyway).
func TestStartFailsOnPortInUse(t *testing.T) {
	n := olrictest.Start(t, nil)
	cfg := olrictest.Config(nil)
	cfg.BindPort = olrictest.FreePort(t)
	cfg.MemberlistBindPort = n.MemberlistPort()
	_, err := olricnode.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("start succeeded on a memberlist port in use")
	}
}
