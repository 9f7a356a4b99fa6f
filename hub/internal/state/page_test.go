package state_test

import (
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/protocol"
)

func TestClusterViews(t *testing.T) {
	s, _ := newStore()
	a1, a2 := backend("a1", "ca"), backend("a2", "ca")
	a2.Region = "eu-west"
	s.Apply(a1, one("m", protocol.ModelStats{NumRunningQueries: 3, MaxEngineConcurrency: 8, QueuedInputSize: 100,
		KVCacheUsedTokens: 10, KVCacheCapacityTokens: 50, LastMeanInputTPS: 1000}), 2*time.Millisecond, true)
	s.Apply(a2, one("m", protocol.ModelStats{NumRunningQueries: 1, MaxEngineConcurrency: 8, QueuedInputSize: 20,
		KVCacheUsedTokens: 5, KVCacheCapacityTokens: 50, LastMeanInputTPS: 500}), 4*time.Millisecond, true)
	s.Apply(backend("b1", "cb"), one("m", protocol.ModelStats{}), 40*time.Millisecond, true)
	s.Reserve(target("m"), "ca", "a1", 700, 0)
	views := s.ClusterViews()
	if len(views) != 2 {
		t.Fatalf("views %+v", views)
	}
	byID := map[string]int{views[0].ClusterID: 0, views[1].ClusterID: 1}
	ca, cb := views[byID["ca"]], views[byID["cb"]]
	if ca.Region != "eu-west" || cb.Region != "" {
		t.Fatalf("regions %q %q: a cluster takes its first labelled backend's region", ca.Region, cb.Region)
	}
	if ca.Backends != 2 || ca.Running != 4 || ca.MaxConcurrency != 16 || ca.QueuedInputTokens != 120 ||
		ca.KVUsedTokens != 15 || ca.KVCapacityTokens != 100 || ca.Reservations != 1 || ca.ReservedTokens != 700 ||
		ca.Target != target("m") || ca.RTT <= 0 || ca.UpdatedAt.IsZero() {
		t.Fatalf("ca %+v", ca)
	}
}
