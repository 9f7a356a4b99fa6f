package pwnw

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fleet is n equal clusters c0..c(n-1), each with room for one request.
func fleet(n int) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{RoutingKey: "rk", Model: "m"}, Version: 1}
	for i := range n {
		s.Clusters = append(s.Clusters, routing.ClusterView{
			ClusterID: fmt.Sprintf("c%d", i), RTT: 2 * time.Millisecond, ActiveBackends: 1,
			Stats: protocol.ModelStats{LastMeanInputTPS: 1000, MaxInputTPS: 1000, MaxEngineConcurrency: 1,
				KVCacheCapacityTokens: 10000, KVCacheFreeTokens: 10000},
		})
	}
	return s
}

// ranking is the pulsar order of snap's clusters for key, as indices.
func ranking(snap *routing.Snapshot, key string) []int {
	var out []int
	for _, r := range pulsar.NewRanker("", pulsar.WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: key}, snap) {
		out = append(out, r.Index)
	}
	return out
}

// full marks the clusters at the given indices saturated; it returns a new
// snapshot.
func full(snap *routing.Snapshot, idx ...int) *routing.Snapshot {
	s := *snap
	s.Clusters = slices.Clone(snap.Clusters)
	for _, i := range idx {
		s.Clusters[i].Stats.NumRunningQueries = 1
	}
	s.Version++
	return &s
}

func mustNew(t *testing.T, mut func(*Config)) *Picker {
	t.Helper()
	c := DefaultConfig()
	if mut != nil {
		mut(&c)
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pick(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot, at time.Duration) (routing.Decision, bool) {
	t.Helper()
	return pickSeed(t, p, req, snap, at, 0)
}

// pickSeed is pick with the random stream numbered seed (pick's is 0).
func pickSeed(t *testing.T, p *Picker, req *routing.Request, snap *routing.Snapshot, at time.Duration, seed uint64) (routing.Decision, bool) {
	t.Helper()
	before := *req
	d, ok := p.Pick(req, snap, t0.Add(at), rand.New(rand.NewPCG(1, 2+seed)))
	// Pick never writes its request; the routing pass keeps the first
	// classification (set once), which this helper does in its place.
	if req.Session != before.Session || req.SessionPromoted != before.SessionPromoted {
		t.Fatalf("Pick wrote the request's session to %v (promoted %v)", req.Session, req.SessionPromoted)
	}
	if req.Session == routing.SessionUnclassified {
		req.Session, req.SessionPromoted = d.Session, d.SessionPromoted
	}
	if ok && snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
		t.Fatalf("index %d is %s, decision says %s", d.Cluster, snap.Clusters[d.Cluster].ClusterID, d.ClusterID)
	}
	return d, ok
}

// Rank 1 has no shortcut: a saturated primary is waited for, then passed
// over, even without a queue SLO
// (docs/design/algorithms.md#pulsar-wait-and-widen).
func TestNoEligiblePrimaryShortcut(t *testing.T) {
	snap := fleet(4)
	r := ranking(snap, "k")
	p := mustNew(t, func(c *Config) { c.AffinityWait = 100 * time.Millisecond })
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	if d, ok := pick(t, p, req, snap, 0); !ok || d.Cluster != r[0] || d.RankDepth != 1 || d.GroupSize != 1 {
		t.Fatalf("free primary: %+v ok=%v, want rank 1 %s", d, ok, snap.Clusters[r[0]].ClusterID)
	}
	busy := full(snap, r[0])
	if d, ok := pick(t, p, req, busy, 40*time.Millisecond); ok || d.Wait != 60*time.Millisecond {
		t.Fatalf("full primary inside the wait: %+v ok=%v, want a 60ms wait", d, ok)
	}
	d, ok := pick(t, p, req, busy, 100*time.Millisecond)
	if !ok || d.Cluster == r[0] || d.RankDepth < 2 || d.RankDepth > 3 {
		t.Fatalf("after the wait: %+v ok=%v, want rank 2 or 3", d, ok)
	}
}

// The open set grows by one band per interval: ranks 1..3 at X, 1..7 at
// X+S, everything at X+2S; each wait is the time to the next band.
func TestTimedBandWidening(t *testing.T) {
	snap := fleet(8)
	r := ranking(snap, "k")
	busy := full(snap, r[:7]...) // only the last-ranked cluster has room
	p := mustNew(t, func(c *Config) {
		c.AffinityWait, c.BandWidenInterval, c.BandWidenSet = 100*time.Millisecond, 50*time.Millisecond, true
	})
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	for _, step := range []struct {
		at   time.Duration
		wait time.Duration
	}{
		{0, 100 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond},
		{120 * time.Millisecond, 30 * time.Millisecond},
		{150 * time.Millisecond, 50 * time.Millisecond},
	} {
		if d, ok := pick(t, p, req, busy, step.at); ok || d.Wait != step.wait {
			t.Fatalf("at %v: %+v ok=%v, want a %v wait", step.at, d, ok, step.wait)
		}
	}
	d, ok := pick(t, p, req, busy, 200*time.Millisecond)
	if !ok || d.Cluster != r[7] || d.RankDepth != 8 {
		t.Fatalf("at X+2S: %+v ok=%v, want rank 8", d, ok)
	}
	// Band interval 0 opens everything at X.
	p0 := mustNew(t, func(c *Config) { c.AffinityWait, c.BandWidenSet = 100*time.Millisecond, true })
	if d, ok := pick(t, p0, req, busy, 100*time.Millisecond); !ok || d.Cluster != r[7] {
		t.Fatalf("S=0 at X: %+v ok=%v", d, ok)
	}
	// Unset, the interval follows the affinity wait.
	pu := mustNew(t, func(c *Config) { c.AffinityWait = 100 * time.Millisecond })
	if d, ok := pick(t, pu, req, busy, 150*time.Millisecond); ok || d.Wait != 50*time.Millisecond {
		t.Fatalf("S unset at X+50: %+v ok=%v, want a 50ms wait to X+S", d, ok)
	}
}

func TestKVSkip(t *testing.T) {
	snap := fleet(4)
	r := ranking(snap, "k")
	snap.Clusters[r[0]].Stats.KVCacheFreeTokens = 10
	p := mustNew(t, func(c *Config) { c.ConsiderKVFreeTokens = true })
	d, ok := pick(t, p, &routing.Request{ReceivedAt: t0, AffinityKey: "k", InputTokens: 100}, snap, 0)
	if !ok || d.Cluster == r[0] || !d.SelectedAfterKVFreeTokensSkip || d.RankDepth < 2 {
		t.Fatalf("%+v ok=%v, want a KV-skip fallback below rank 1", d, ok)
	}
}

func TestSessions(t *testing.T) {
	snap := fleet(6)
	r := ranking(snap, "k")
	cfg := func(on bool) func(*Config) {
		return func(c *Config) { c.AffinityWait, c.LastClusterAffinity = 200*time.Millisecond, on }
	}
	p := mustNew(t, cfg(true))
	// Returning to rank 4: promoted to rank 1 for this request.
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[3]].ClusterID}
	d, ok := pick(t, p, req, snap, 0)
	if !ok || d.Cluster != r[3] || d.RankDepth != 1 || req.Session != routing.SessionReturning || !req.SessionPromoted {
		t.Fatalf("returning: %+v ok=%v session=%v promoted=%v", d, ok, req.Session, req.SessionPromoted)
	}
	// The cached ranking keeps its original order.
	if got := ranking(snap, "k"); !slices.Equal(got, r) {
		t.Fatalf("ranking changed to %v from %v", got, r)
	}
	// New: no wait, and the band interval follows that zero wait, so with
	// rank 1 full it overflows now to any ranked cluster with room.
	busy := full(snap, r[0])
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	if d, ok := pick(t, p, req, busy, 0); !ok || d.Cluster == r[0] || req.Session != routing.SessionNew {
		t.Fatalf("new: %+v ok=%v session=%v", d, ok, req.Session)
	}
	// Every band opens at once for a new session (interval follows the
	// effective wait, 0): only the last rank has room and it is chosen.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: "gone"}
	if d, ok := pick(t, p, req, full(snap, r[:5]...), 0); !ok || d.Cluster != r[5] || req.Session != routing.SessionStale {
		t.Fatalf("stale: %+v ok=%v session=%v", d, ok, req.Session)
	}
	// Returning to a full last cluster waits the configured wait.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[2]].ClusterID}
	if d, ok := pick(t, p, req, full(snap, r[2]), 0); ok || d.Wait != 200*time.Millisecond {
		t.Fatalf("returning to a full cluster: %+v ok=%v", d, ok)
	}
	// Flag off: the hint changes nothing.
	off := mustNew(t, cfg(false))
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[3]].ClusterID}
	if d, ok := pick(t, off, req, snap, 0); !ok || d.Cluster != r[0] || req.Session != routing.SessionUnclassified {
		t.Fatalf("flag off: %+v ok=%v session=%v", d, ok, req.Session)
	}
}

// TestCacheThrashRegression: the session's rank-1 cluster A is saturated
// once, so the request overflows to B; with the flag on, the next ten
// requests (carrying the hint B) stay on B; off, they return to A.
func TestCacheThrashRegression(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("last_cluster_affinity=%v", on), func(t *testing.T) {
			snap := fleet(4)
			r := ranking(snap, "k")
			a := r[0]
			p := mustNew(t, func(c *Config) { c.AffinityWait, c.LastClusterAffinity = 50*time.Millisecond, on })
			first := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
			at := time.Duration(0)
			if !on {
				at = 50 * time.Millisecond // flag off: the configured wait runs first
			}
			d, ok := pick(t, p, first, full(snap, a), at)
			if !ok || d.Cluster == a {
				t.Fatalf("overflow: %+v ok=%v", d, ok)
			}
			b := d.Cluster
			for i := range 10 {
				req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[b].ClusterID}
				got, ok := pick(t, p, req, snap, 0)
				want := a
				if on {
					want = b
				}
				if !ok || got.Cluster != want {
					t.Fatalf("follow-up %d went to %s, want %s", i, got.ClusterID, snap.Clusters[want].ClusterID)
				}
			}
		})
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	snap := fleet(64)
	p := mustNew(t, func(c *Config) { c.LastClusterAffinity = true; c.AffinityWait = time.Second })
	r := ranking(snap, "k")
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: snap.Clusters[r[5]].ClusterID}
	rng := rand.New(rand.NewPCG(1, 2))
	p.Pick(req, snap, t0, rng)
	if n := testing.AllocsPerRun(200, func() {
		req.Session = routing.SessionUnclassified
		p.Pick(req, snap, t0, rng)
	}); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}
