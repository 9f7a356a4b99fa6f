package scaleout

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// TestHubLossLosesNoUnstartedRequest kills one of three hubs (SIGKILL)
// while three gateways run the sessions workload through them.
// Requests the dead hub was routing or waiting to route, whose answer had
// not started, must be retried by their gateway on another hub: no request
// may fail before its response head. Streams the dead hub was relaying
// are cut (the client sees the cut: an error after its 200). The hub is
// then restarted and must rejoin: its pylons reconnect and the gateways
// send it requests again.
func TestHubLossLosesNoUnstartedRequest(t *testing.T) {
	st := startStack(t, 3, 3)
	ep := st.Endpoints()
	victim, victimMetrics := ep.HubNames[1], ep.HubsMetrics[1]
	c := httpClient(t)

	wl := sessionsWorkload(t, 15)
	var recs []loadgen.Record
	var runErr error
	var wg sync.WaitGroup
	wg.Go(func() { recs, runErr = run(t.Context(), c, ep, wl, "loss") })
	// Kill the hub once it has finished some requests; with as many
	// clients as slots it is then holding others, some waiting for a
	// cluster.
	waitFor(t, func() bool {
		byStatus, err := routed(t.Context(), c, victimMetrics)
		return err == nil && sum(byStatus) >= 20
	}, "the victim hub to finish 20 requests")
	if err := st.Kill(victim); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if runErr != nil {
		t.Fatal(runErr)
	}

	var cut, skipped int
	for _, r := range failures(recs) {
		switch {
		case r.Outcome == loadgen.OutcomeSkipped:
			skipped++ // a later turn of a session whose cut turn ended it
		case r.Status == http.StatusOK:
			cut++ // the stream had started: relayed through the dead hub
		default:
			t.Errorf("request %d (session %q turn %d) failed before its answer started: status %d, %s",
				r.Index, r.Session, r.Turn, r.Status, r.Error)
		}
	}
	retried := map[string]float64{}
	for _, m := range ep.GatewaysMetrics {
		fams, err := promscrape.Scrape(t.Context(), c, m)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fams.CounterByLabel("llm_api_gateway_hub_retries_total", "reason") {
			retried[k] += v
		}
	}
	// The gateways must have met the dead hub: otherwise the test proved
	// nothing about retries.
	if sum(retried) == 0 {
		t.Errorf("no gateway retried a request on another hub after %s was killed", victim)
	}
	t.Logf("%d requests: %d ok, %d streams cut by the kill, %d later turns of those sessions not sent; gateway retries on another hub: %v",
		len(recs), len(recs)-len(failures(recs)), cut, skipped, retried)

	// The hub comes back on its old ports: pylons reconnect within their
	// backoff and gateways try it again once its backoff has passed.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	restarted := time.Now()
	if err := st.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := st.WaitRoutable(ctx, fleet().ClusterIDs()); err != nil {
		t.Fatal(err)
	}
	rejoined := time.Since(restarted)
	more := mustRun(t, ep, sessionsWorkload(t, 16), "rejoin")
	if bad := failures(more); len(bad) > 0 {
		t.Fatalf("after the restart %d of %d requests failed, first: %+v", len(bad), len(more), bad[0])
	}
	byStatus, err := routed(t.Context(), c, victimMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if sum(byStatus) == 0 {
		t.Errorf("%s was restarted and sees every cluster, but no gateway sent it any of %d requests", victim, len(more))
	}
	t.Logf("%s restarted and routable to every cluster after %.1f s; it then routed %.0f of %d requests", victim,
		rejoined.Seconds(), sum(byStatus), len(more))
}

// waitFor polls cond every 50 ms until it holds, failing the test after a
// minute.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
