package state_test

import (
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newStore(opts ...state.Option) (*state.Store, *clock.Fake) {
	clk := clock.NewFake(t0)
	return state.New(clk, opts...), clk
}

func backend(id, clusterID string) state.Backend {
	return state.Backend{ID: id, ClusterID: clusterID, URL: "http://" + id + ":8000", RoutingKey: "rk"}
}

func target(model string) routing.Target { return routing.Target{RoutingKey: "rk", Model: model} }

// reg builds a registration from model → entry.
func reg(models map[string]protocol.ModelEntry) *protocol.Registration {
	return &protocol.Registration{V: protocol.Version, Models: models}
}

func active(s protocol.ModelStats) protocol.ModelEntry {
	return protocol.ModelEntry{Status: protocol.StatusActive, Stats: &s}
}

// one registers model m as active with stats s.
func one(m string, s protocol.ModelStats) *protocol.Registration {
	return reg(map[string]protocol.ModelEntry{m: active(s)})
}

// cluster returns the view of clusterID in the snapshot of t, failing the
// test when either is missing.
func cluster(t *testing.T, s *state.Store, tg routing.Target, clusterID string) routing.ClusterView {
	t.Helper()
	snap := s.Snapshot(tg)
	if snap == nil {
		t.Fatalf("no snapshot for %+v", tg)
	}
	for _, c := range snap.Clusters {
		if c.ClusterID == clusterID {
			return c
		}
	}
	t.Fatalf("no cluster %q in the snapshot of %+v", clusterID, tg)
	return routing.ClusterView{}
}
