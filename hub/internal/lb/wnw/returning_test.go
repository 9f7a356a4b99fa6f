package wnw

import (
	"fmt"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// campaign is upstream Stargate's published wait-and-widen campaign
// settings with last_cluster_affinity, an affinity group of k and
// returning_prefers_last_cluster as given.
func campaign(k int, prefer bool) func(*Config) {
	return func(c *Config) {
		c.Comparator, c.SelectionCount, c.InputTokensScale = lb.ComparatorUtilization, k, 0.1
		c.AffinityWait, c.N, c.MaxQueued = 200*time.Millisecond, 2, 1
		c.LastClusterAffinity, c.ReturningPrefersLast = true, prefer
	}
}

// session plays one session's turns on snap, each at its own seed: a first
// request without a hint, then follow-ups that each name the cluster the
// turn before went to, as the gateway does. It returns the decisions.
func session(t *testing.T, p lb.Picker, snap *routing.Snapshot, key string, followUps int) []routing.Decision {
	t.Helper()
	var out []routing.Decision
	last := ""
	for turn := range followUps + 1 {
		req := &routing.Request{ReceivedAt: t0, AffinityKey: key, InputTokens: 2000, LastClusterID: last}
		d, ok := pick(t, p, req, snap, 0, uint64(turn))
		if !ok {
			t.Fatalf("turn %d: no choice (%+v)", turn, d)
		}
		if want := routing.SessionReturning; turn > 0 && req.Session != want {
			t.Fatalf("turn %d classified %v, want %v", turn, req.Session, want)
		}
		out = append(out, d)
		last = d.ClusterID
	}
	return out
}

// moves counts the turns served on another cluster than the turn before.
func moves(ds []routing.Decision) int {
	n := 0
	for i := 1; i < len(ds); i++ {
		if ds[i].ClusterID != ds[i-1].ClusterID {
			n++
		}
	}
	return n
}

// On an idle three-cluster fleet a returning session's eight follow-ups
// all stay on the cluster of its first turn, with k = 1 and k = 2. With
// returning_prefers_last_cluster off (upstream Stargate's behaviour) and
// k = 2, promotion only puts the last cluster into the group, the group's
// two idle members tie, and the session hops between them.
func TestReturningSessionStaysOnLastCluster(t *testing.T) {
	snap := lbtest.Idle(3)
	for _, k := range []int{1, 2} {
		for _, prefer := range []bool{true, false} {
			t.Run(fmt.Sprintf("k=%d/prefer=%v", k, prefer), func(t *testing.T) {
				ds := session(t, mustNew(t, campaign(k, prefer)), snap, "session-7", 8)
				got := moves(ds)
				switch {
				case prefer || k == 1:
					// A group of one is the last cluster already: k = 1
					// stayed put before this setting too.
					if got != 0 {
						t.Fatalf("%d moves in 8 follow-ups, want 0: %v", got, clusters(ds))
					}
					for i, d := range ds[1:] {
						if d.RankDepth != 1 || d.GroupSize != k {
							t.Fatalf("follow-up %d: rank %d group %d, want rank 1 of a group of %d", i+1, d.RankDepth, d.GroupSize, k)
						}
					}
				default:
					if got < 2 {
						t.Fatalf("reference behaviour: %d moves in 8 follow-ups, want the group's tie to move it: %v", got, clusters(ds))
					}
				}
			})
		}
	}
}

func clusters(ds []routing.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ClusterID
	}
	return out
}

// The preference ends where the last cluster has no room, by the same rule
// that makes a group of one wait and widen: with k = 2 the other group
// member takes the follow-up at once; with k = 1 the request waits the
// affinity wait and then widens to another cluster.
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
				if d, ok := pick(t, p, req, full, 0, 1); ok || d.Wait != 200*time.Millisecond {
					t.Fatalf("k=1, last cluster full: %+v ok=%v, want the 200 ms affinity wait", d, ok)
				}
				at = 200 * time.Millisecond
			}
			d, ok := pick(t, p, req, full, at, 1)
			if !ok || d.ClusterID == last || req.Session != routing.SessionReturning {
				t.Fatalf("last cluster %s full: %+v ok=%v session %v, want another cluster", last, d, ok, req.Session)
			}
			if wantRank := map[int]int{1: 2, 2: 1}[k]; d.RankDepth != wantRank {
				t.Fatalf("moved at rank %d, want %d", d.RankDepth, wantRank)
			}
			// A retry that excludes the last cluster moves too.
			retry := &routing.Request{ReceivedAt: t0, AffinityKey: "session-7", LastClusterID: last, Excluded: []string{last},
				Session: routing.SessionReturning}
			if d, ok := pick(t, p, retry, idle, 200*time.Millisecond, 1); !ok || d.ClusterID == last {
				t.Fatalf("retry excluding %s: %+v ok=%v", last, d, ok)
			}
		})
	}
}

// Admits is exactly Decide over the one-member set, across capacity, queue
// SLO, exclusion, unusable rates, ignore flags and the discount.
func TestAdmitsIsDecideOfOne(t *testing.T) {
	r := rng(5)
	for iter := range 4000 {
		c := cl("x", float64(r.IntN(50)), uint64(r.IntN(3)), uint64(r.IntN(4)))
		c.Stats.QueuedInputSize = uint64(r.IntN(3) * 400)
		if r.IntN(5) == 0 {
			c.Stats.LastMeanInputTPS = 0
		}
		snap := snapOf(c)
		req := &routing.Request{ReceivedAt: t0, InputTokens: uint64(r.IntN(3) * 500), SLO: time.Duration(r.IntN(2)) * time.Second}
		if r.IntN(6) == 0 {
			req.Excluded = []string{"x"}
		}
		cfg := DefaultConfig()
		cfg.QueueSLO, cfg.QueueFloorMs, cfg.QueueCeilMs = r.IntN(2) == 0, 100, 1000
		cfg.IgnoreQueueTime, cfg.IgnoreInputProcessingTime = r.IntN(2) == 0, r.IntN(2) == 0
		cfg.MaxQueued = uint64(r.IntN(2))
		sel := NewSelector(&cfg, cfg.MaxQueued)
		scale := float64(r.IntN(3)) / 2
		elapsed := time.Duration(r.IntN(1200)) * time.Millisecond
		want := sel.Decide(req, snap, []int{0}, scale, elapsed, elapsed, rng(uint64(iter))).Selected
		if got := sel.Admits(req, snap, 0, scale, elapsed); got != want {
			t.Fatalf("iteration %d: Admits %v, Decide selected %v (cluster %+v, request %+v, config %+v)", iter, got, want, c, req, cfg)
		}
	}
}
