package pwnw

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// campaign is upstream Stargate's published campaign settings on
// pulsar-wait-and-widen with last_cluster_affinity, a group of k and
// returning_prefers_last_cluster as given.
func campaign(k int, prefer bool) func(*Config) {
	return func(c *Config) {
		c.SelectionCount, c.InputTokensScale, c.AffinityWait = k, 0.1, 200*time.Millisecond
		c.N, c.MaxQueued = 2, 1
		c.LastClusterAffinity, c.ReturningPrefersLast = true, prefer
	}
}

// session plays a first turn without a hint and then follow-ups that each
// name the cluster the turn before went to, one seed per turn.
func session(t *testing.T, p *Picker, snap *routing.Snapshot, key string, followUps int) []routing.Decision {
	t.Helper()
	var out []routing.Decision
	last := ""
	for turn := range followUps + 1 {
		req := &routing.Request{ReceivedAt: t0, AffinityKey: key, InputTokens: 2000, LastClusterID: last}
		d, ok := pickSeed(t, p, req, snap, 0, uint64(turn))
		if !ok {
			t.Fatalf("turn %d: no choice (%+v)", turn, d)
		}
		if turn > 0 && req.Session != routing.SessionReturning {
			t.Fatalf("turn %d classified %v, want returning", turn, req.Session)
		}
		out = append(out, d)
		last = d.ClusterID
	}
	return out
}

func clusterIDs(ds []routing.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ClusterID
	}
	return out
}

func moves(ds []routing.Decision) int {
	n := 0
	for i := 1; i < len(ds); i++ {
		if ds[i].ClusterID != ds[i-1].ClusterID {
			n++
		}
	}
	return n
}

// On an idle three-cluster fleet a returning session's follow-ups stay on
// its last cluster, with k = 1 and k = 2. With the setting off and k = 2
// the promoted last cluster and rank 2 tie in the group (least queue, then
// utilisation, both idle) and the session hops between them.
func TestReturningSessionStaysOnLastCluster(t *testing.T) {
	snap := lbtest.Idle(3)
	for _, k := range []int{1, 2} {
		for _, prefer := range []bool{true, false} {
			t.Run(fmt.Sprintf("k=%d/prefer=%v", k, prefer), func(t *testing.T) {
				ds := session(t, mustNew(t, campaign(k, prefer)), snap, "session-7", 8)
				got := moves(ds)
				if prefer || k == 1 {
					if got != 0 {
						t.Fatalf("%d moves in 8 follow-ups, want 0: %v", got, clusterIDs(ds))
					}
					for i, d := range ds[1:] {
						if d.RankDepth != 1 {
							t.Fatalf("follow-up %d at rank %d, want the last cluster at rank 1", i+1, d.RankDepth)
						}
					}
					return
				}
				if got < 2 {
					t.Fatalf("reference behaviour: %d moves in 8 follow-ups, want the group's tie to move it: %v", got, clusterIDs(ds))
				}
			})
		}
	}
}

// A saturated last cluster lets the session move: to the other group member
// at once with k = 2, after the affinity wait with k = 1. A last cluster
// whose KV cache cannot hold the prompt (consider_kv_free_tokens) is passed
// over the same way.
func TestReturningSessionMovesWhenLastSaturated(t *testing.T) {
	idle := lbtest.Idle(3)
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			p := mustNew(t, campaign(k, true))
			last := session(t, p, idle, "session-7", 0)[0].ClusterID
			full := lbtest.Saturate(idle, last)
			req := &routing.Request{ReceivedAt: t0, AffinityKey: "session-7", InputTokens: 2000, LastClusterID: last}
			at := time.Duration(0)
			if k == 1 {
				if d, ok := pick(t, p, req, full, 0); ok || d.Wait != 200*time.Millisecond {
					t.Fatalf("k=1: %+v ok=%v, want the 200 ms affinity wait", d, ok)
				}
				at = 200 * time.Millisecond
			}
			if d, ok := pick(t, p, req, full, at); !ok || d.ClusterID == last || d.RankDepth < 2 {
				t.Fatalf("last cluster %s full: %+v ok=%v, want another cluster", last, d, ok)
			}
		})
	}
	t.Run("KV full", func(t *testing.T) {
		p := mustNew(t, func(c *Config) { campaign(2, true)(c); c.ConsiderKVFreeTokens = true })
		last := session(t, p, idle, "session-7", 0)[0].ClusterID
		kvFull := lbtest.With(idle, func(c *routing.ClusterView) { c.Stats.KVCacheFreeTokens = 10 }, last)
		req := &routing.Request{ReceivedAt: t0, AffinityKey: "session-7", InputTokens: 2000, LastClusterID: last}
		if d, ok := pick(t, p, req, kvFull, 0); !ok || d.ClusterID == last {
			t.Fatalf("last cluster's KV cache full: %+v ok=%v, want another cluster than %s", d, ok, last)
		}
	})
}

// farFirstKey is the first key whose RTT-blind rank 1 on snap is far.
func farFirstKey(t *testing.T, snap *routing.Snapshot) string {
	t.Helper()
	r := pulsar.NewRanker("", pulsar.WeightMaxInputTPS)
	for i := range 100 {
		key := fmt.Sprintf("key-%d", i)
		if strings.HasPrefix(snap.Clusters[r.Rank(&routing.Request{AffinityKey: key}, snap)[0].Index].ClusterID, "far-") {
			return key
		}
	}
	t.Fatal("no key ranks a far cluster first")
	return ""
}

// With RTT tiers a session whose RTT-blind rank 1 is far starts near while
// the near region has room; when it has none, the far region takes the
// overflow through the usual wait and band widening. Off, the ranking is
// pulsar's RTT-blind one and the session starts far.
func TestRTTTiersStartNearAndOverflowFar(t *testing.T) {
	snap := lbtest.Regions(2, 2, 2*time.Millisecond, 40*time.Millisecond)
	key := farFirstKey(t, snap)
	blind := pulsar.NewRanker("", pulsar.WeightMaxInputTPS).Rank(&routing.Request{AffinityKey: key}, snap)
	tiered := func(c *Config) { c.AffinityWait, c.RTTTier = 100*time.Millisecond, 10*time.Millisecond }
	p := mustNew(t, tiered)
	req := &routing.Request{ReceivedAt: t0, AffinityKey: key}
	d, ok := pick(t, p, req, snap, 0)
	if !ok || !strings.HasPrefix(d.ClusterID, "near-") || d.RankDepth != 1 {
		t.Fatalf("near has room: %+v ok=%v, want a near cluster at rank 1", d, ok)
	}
	nearFull := lbtest.Saturate(snap, "near-0", "near-1")
	if d, ok := pick(t, p, req, nearFull, 0); ok || d.Wait != 100*time.Millisecond {
		t.Fatalf("near full, inside the wait: %+v ok=%v, want the 100 ms affinity wait", d, ok)
	}
	// At the end of the wait the open set is ranks 1..3: both near and
	// the key's best far cluster, whose TTFT bucket is 38 ms slower than
	// the near ones and so unlocks 38 · 0.25 = 9.5 ms later.
	if d, ok := pick(t, p, req, nearFull, 100*time.Millisecond); ok || d.Wait != 9500*time.Microsecond {
		t.Fatalf("near full at the end of the wait: %+v ok=%v, want 9.5 ms for the far bucket", d, ok)
	}
	d, ok = pick(t, p, req, nearFull, 109500*time.Microsecond)
	if !ok || d.Cluster != blind[0].Index || d.RankDepth != 3 {
		t.Fatalf("near full after the wait: %+v ok=%v, want far %s at rank 3", d, ok, snap.Clusters[blind[0].Index].ClusterID)
	}
	// Off: rank 1 is the RTT-blind one, far.
	off := mustNew(t, func(c *Config) { tiered(c); c.RTTTier = 0 })
	if d, ok := pick(t, off, &routing.Request{ReceivedAt: t0, AffinityKey: key}, snap, 0); !ok || d.Cluster != blind[0].Index || d.RankDepth != 1 {
		t.Fatalf("tiers off: %+v ok=%v, want %s at rank 1", d, ok, snap.Clusters[blind[0].Index].ClusterID)
	}
	if got, want := rankIDs(snap, off.ranker.Rank(req, snap)), rankIDs(snap, blind); !slices.Equal(got, want) {
		t.Fatalf("tiers off: ranking %v, want pulsar's %v", got, want)
	}
}

func rankIDs(snap *routing.Snapshot, rs []pulsar.Ranked) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = snap.Clusters[r.Index].ClusterID
	}
	return out
}
