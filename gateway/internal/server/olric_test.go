package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// TestThreeGatewaysShareLastCluster: three gateways, each on its own
// embedded Olric node of one cluster, in front of one hub. A session
// served through gateway 1 carries the hint when its next turn enters
// gateway 2. After node 3 leaves, every request through gateways 1 and 2
// still succeeds and every lookup finishes within its deadline.
func TestThreeGatewaysShareLastCluster(t *testing.T) {
	nodes := olrictest.Cluster(t, 3)
	hub := newFakeHub(t)
	var gws []*harness
	for _, n := range nodes {
		dm, err := n.Embedded().NewDMap("stargate-last-cluster")
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, newHarness(t, opts{hub: hub, store: lastcluster.Olric{DM: dm}, timeout: 20 * time.Millisecond}))
	}
	turn := func(gw *harness, sess string) string {
		t.Helper()
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":%q}`, sess)
		resp, b := gw.post("/v1/chat/completions", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		gw.tracker.Wait(context.Background())
		req, _ := hub.last()
		return req.Header.Get("x-stargate-last-cluster-id")
	}
	if got := turn(gws[0], "conv-1"); got != "" {
		t.Fatalf("first turn hint %q", got)
	}
	if got := turn(gws[1], "conv-1"); got != "cluster-a" {
		t.Fatalf("turn 2 via gateway 2: hint %q, want cluster-a", got)
	}
	hub.mu.Lock()
	hub.cluster = "cluster-b"
	hub.mu.Unlock()
	turn(gws[2], "conv-1")
	if got := turn(gws[0], "conv-1"); got != "cluster-b" {
		t.Fatalf("turn 4 via gateway 1: hint %q, want cluster-b (written by gateway 3)", got)
	}

	if err := nodes[2].Shutdown(context.Background()); err != nil {
		t.Logf("node 3 leave: %v", err)
	}
	for i := range 40 {
		turn(gws[i%2], fmt.Sprintf("after-loss-%d", i%10))
	}
	for i, gw := range gws[:2] {
		// Every lookup landed in a bucket at or below the 30 ms bucket
		// (20 ms deadline plus scheduling).
		var over float64
		mfs, _ := gw.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "llm_api_gateway_last_cluster_lookup_duration_seconds" {
				continue
			}
			hist := mf.GetMetric()[0].GetHistogram()
			for _, b := range hist.GetBucket() {
				if b.GetUpperBound() == 0.05 {
					over = float64(hist.GetSampleCount() - b.GetCumulativeCount())
				}
			}
		}
		if over > 0 {
			t.Errorf("gateway %d: %v lookups took over 50 ms", i+1, over)
		}
		t.Logf("gateway %d lookups: hit=%v miss=%v timeout=%v error=%v", i+1,
			testutil.ToFloat64(gw.m.LastClusterLookup.WithLabelValues("hit")), testutil.ToFloat64(gw.m.LastClusterLookup.WithLabelValues("miss")),
			testutil.ToFloat64(gw.m.LastClusterLookup.WithLabelValues("timeout")), testutil.ToFloat64(gw.m.LastClusterLookup.WithLabelValues("error")))
	}
}
