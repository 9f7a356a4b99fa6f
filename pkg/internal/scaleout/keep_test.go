package scaleout

import (
	"context"
	"flag"
	"hash/fnv"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/workload"
)

// clients is how many closed-loop clients the sessions workload runs: by
// default as many as the fleet has engine slots (16), a full fleet where
// some turns overflow. docs/reliability.md#several-hubs has what 24 (past
// capacity) measures.
var clients = flag.Int("clients", 16, "closed-loop clients of the sessions workload (the fleet has 16 engine slots)")

// sessionsWorkload is the sessions suite sized to keep the fleet of
// fleet() busy: -clients clients, 72 sessions of 4 turns (a tenth of the
// requests anonymous), short replies.
func sessionsWorkload(t *testing.T, seed uint64) *workload.Workload {
	t.Helper()
	wl, err := workload.Generate(workload.SuiteSessions, workload.SuiteParams{Seed: seed, Model: fleet().Model,
		Workers: *clients, Sessions: 72, Turns: 4, OutputTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

// run replays wl through every gateway of ep, streamed, without client
// retries: each turn of a session goes to the next gateway (so a session's
// hint is written by one gateway and read by another) and each gateway
// spreads its requests over the hubs.
// It may run outside the test's goroutine: it reports errors, never
// fails the test itself.
func run(ctx context.Context, hc *http.Client, ep stack.Endpoints, wl *workload.Workload, salt string) ([]loadgen.Record, error) {
	clk := clock.Real{}
	clients := make([]loadgen.Client, len(ep.Gateways))
	for i, g := range ep.Gateways {
		clients[i] = loadgen.Client{HTTP: hc, BaseURL: g, Target: loadgen.TargetGateway, APIKey: ep.APIKey,
			Model: wl.Header.Model, Stream: true, Clock: clk}
	}
	send := func(ctx context.Context, j *loadgen.Job) loadgen.Result {
		h := fnv.New32a()
		_, _ = h.Write([]byte(j.Session))
		return clients[(int(h.Sum32())+j.Request.Turn)%len(clients)].Do(ctx, j)
	}
	out, err := loadgen.NewRunner(loadgen.Config{Clock: clk, Timeout: 60 * time.Second, Salt: salt}, send).Run(ctx, wl)
	if err != nil {
		return nil, err
	}
	return out.Records, nil
}

// mustRun is run on the test's goroutine.
func mustRun(t *testing.T, ep stack.Endpoints, wl *workload.Workload, salt string) []loadgen.Record {
	t.Helper()
	recs, err := run(t.Context(), httpClient(t), ep, wl, salt)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// stay counts the later turns of sessions whose previous turn's cluster is
// known: how many of them, and how many ran on that same cluster.
func stay(recs []loadgen.Record) (later, same int) {
	bySession := map[string][]loadgen.Record{}
	for _, r := range recs {
		if r.Session != "" && r.Outcome == loadgen.OutcomeOK && r.Cluster != "" {
			bySession[r.Session] = append(bySession[r.Session], r)
		}
	}
	for _, turns := range bySession {
		slices.SortFunc(turns, func(a, b loadgen.Record) int { return a.Turn - b.Turn })
		for i := 1; i < len(turns); i++ {
			if turns[i].Turn != turns[i-1].Turn+1 {
				continue
			}
			later++
			if turns[i].Cluster == turns[i-1].Cluster {
				same++
			}
		}
	}
	return later, same
}

// failures lists the records that did not succeed.
func failures(recs []loadgen.Record) []loadgen.Record {
	var out []loadgen.Record
	for _, r := range recs {
		if r.Outcome != loadgen.OutcomeOK {
			out = append(out, r)
		}
	}
	return out
}

// TestSessionsKeepTheirClusterAcrossHubs replays one sessions workload on
// one hub and then on three (three gateways each, every turn of a session
// through the next gateway, each gateway spreading over the hubs): a
// session's later turns must land on its previous turn's cluster at least
// as often with three hubs as with one, give or take two points, the
// run-to-run spread of one hub (94.0 to 96.8 % over eight runs; see
// docs/reliability.md#several-hubs).
func TestSessionsKeepTheirClusterAcrossHubs(t *testing.T) {
	wl := sessionsWorkload(t, 14)
	share := map[int]float64{}
	for _, hubs := range []int{1, 3} {
		st := startStack(t, hubs, 3)
		ep := st.Endpoints()
		recs := mustRun(t, ep, wl, "keep")
		if bad := failures(recs); len(bad) > 0 {
			t.Fatalf("%d hub(s): %d of %d requests failed, first: %+v", hubs, len(bad), len(recs), bad[0])
		}
		later, same := stay(recs)
		if later < 150 {
			t.Fatalf("%d hub(s): only %d later turns with a known cluster", hubs, later)
		}
		share[hubs] = float64(same) / float64(later)
		var counts []float64
		for _, m := range ep.HubsMetrics {
			byStatus, err := routed(t.Context(), httpClient(t), m)
			if err != nil {
				t.Fatal(err)
			}
			counts = append(counts, sum(byStatus))
		}
		retries, returning, err := hubCounters(t.Context(), httpClient(t), ep.HubsMetrics)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d hub(s): %d of %d later turns on their previous turn's cluster (%.1f %%); requests per hub: %s; "+
			"hub retries %v; returning selections %v",
			hubs, same, later, 100*share[hubs], describe(ep.HubNames, counts), retries, returning)
		if hubs > 1 {
			for i, n := range counts {
				if n < float64(len(recs))/float64(3*hubs) {
					t.Errorf("%s routed %.0f of %d requests: the gateways do not spread over the hubs", ep.HubNames[i], n, len(recs))
				}
			}
		}
		st.Stop()
	}
	if share[3] < share[1]-0.02 {
		t.Errorf("later turns kept their cluster %.1f %% of the time with three hubs, %.1f %% with one",
			100*share[3], 100*share[1])
	}
}
