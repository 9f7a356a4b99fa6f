package wnw

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// cl is a cluster whose bucket TTFT is exactly rttMs for a request with no
// tokens and no queue; mec/running set its capacity.
func cl(id string, rttMs float64, mec, running uint64) routing.ClusterView {
	return routing.ClusterView{
		ClusterID:      id,
		RTT:            time.Duration(rttMs * float64(time.Millisecond)),
		ActiveBackends: 1,
		Stats: protocol.ModelStats{LastMeanInputTPS: 1000, MaxInputTPS: 1000,
			MaxEngineConcurrency: mec, NumRunningQueries: running},
	}
}

func snapOf(cs ...routing.ClusterView) *routing.Snapshot {
	s := &routing.Snapshot{Target: routing.Target{RoutingKey: "rk", Model: "m"}, Version: 1, Generation: 1}
	s.Clusters = append(s.Clusters, cs...)
	slices.SortFunc(s.Clusters, func(a, b routing.ClusterView) int {
		switch {
		case a.ClusterID < b.ClusterID:
			return -1
		case a.ClusterID > b.ClusterID:
			return 1
		}
		return 0
	})
	return s
}

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }

func mustNew(t testing.TB, mut func(*Config)) *Picker {
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

func pick(t testing.TB, p lb.Picker, req *routing.Request, snap *routing.Snapshot, at time.Duration, seed uint64) (routing.Decision, bool) {
	t.Helper()
	before := *req
	d, ok := p.Pick(req, snap, t0.Add(at), rng(seed))
	keepSession(t, req, before, d)
	if ok && snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
		t.Fatalf("decision index %d names %s, cluster is %s", d.Cluster, d.ClusterID, snap.Clusters[d.Cluster].ClusterID)
	}
	if ok && req.IsExcluded(d.ClusterID) {
		t.Fatalf("chose excluded cluster %s", d.ClusterID)
	}
	return d, ok
}

// keepSession checks that Pick left the request alone, then keeps the
// decision's session classification in it the way the routing pass
// (hub/internal/dispatch) does: set once, so the next pick of the same
// request reuses it.
func keepSession(t testing.TB, req *routing.Request, before routing.Request, d routing.Decision) {
	t.Helper()
	if req.Session != before.Session || req.SessionPromoted != before.SessionPromoted {
		t.Fatalf("Pick wrote the request's session to %v (promoted %v)", req.Session, req.SessionPromoted)
	}
	if req.Session == routing.SessionUnclassified {
		req.Session, req.SessionPromoted = d.Session, d.SessionPromoted
	}
}

func TestBucketWalk(t *testing.T) {
	// Bucket TTFTs 10, 25 | 100: B=20 keeps 10 and 25 together (25−10 ≤ 20);
	// 100 needs (100−10)·0.25 = 22.5 ms of waiting.
	tests := []struct {
		name     string
		a, b, c  uint64 // running on a (10 ms), b (25 ms), c (100 ms); mec 1
		elapsed  time.Duration
		want     []string // any of these
		wantWait time.Duration
	}{
		{name: "fast bucket with room", want: []string{"a", "b"}},
		{name: "second in bucket when first full", a: 1, want: []string{"b"}},
		{name: "fast bucket full: wait for c", a: 1, b: 1, wantWait: 22500 * time.Microsecond},
		{name: "fast bucket full, partly waited", a: 1, b: 1, elapsed: 20 * time.Millisecond, wantWait: 2500 * time.Microsecond},
		{name: "c unlocks at 22.5 ms", a: 1, b: 1, elapsed: 22500 * time.Microsecond, want: []string{"c"}},
		{name: "everything full: no wait", a: 1, b: 1, c: 1},
		{name: "unlocked c is still never preferred over room in a", elapsed: time.Second, want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, nil)
			snap := snapOf(cl("a", 10, 1, tt.a), cl("b", 25, 1, tt.b), cl("c", 100, 1, tt.c))
			req := &routing.Request{ReceivedAt: t0}
			for seed := range uint64(20) {
				d, ok := pick(t, p, req, snap, tt.elapsed, seed)
				if len(tt.want) == 0 {
					if ok {
						t.Fatalf("chose %s, want no choice", d.ClusterID)
					}
					if d.Wait != tt.wantWait {
						t.Fatalf("wait %v, want %v", d.Wait, tt.wantWait)
					}
					continue
				}
				if !ok || !slices.Contains(tt.want, d.ClusterID) {
					t.Fatalf("seed %d: got %q ok=%v, want one of %v", seed, d.ClusterID, ok, tt.want)
				}
				if d.RankDepth != 1 {
					t.Fatalf("rank depth %d", d.RankDepth)
				}
			}
		})
	}
}

func TestBucketBudgetIsShared(t *testing.T) {
	// 0 | 40 | 80: unlocking 40 costs 10 ms, then 80 (40 past its bucket
	// start) another 10: c needs 20 ms in total, not 20 from a's start·f.
	p := mustNew(t, func(c *Config) { c.N = 1 })
	snap := snapOf(cl("a", 0, 1, 1), cl("b", 40, 1, 1), cl("c", 80, 1, 0))
	req := &routing.Request{ReceivedAt: t0}
	if d, ok := pick(t, p, req, snap, 19*time.Millisecond, 1); ok || d.Wait != time.Millisecond {
		t.Fatalf("at 19 ms: ok=%v wait=%v, want a 1 ms wait", ok, d.Wait)
	}
	if d, ok := pick(t, p, req, snap, 20*time.Millisecond, 1); !ok || d.ClusterID != "c" {
		t.Fatalf("at 20 ms: %q ok=%v, want c", d.ClusterID, ok)
	}
}

func TestQueueSLO(t *testing.T) {
	// a has 500 ms of queue, b 50 ms. floor 100, ceil 1000 over a 1 s SLO:
	// at 0 the limit is 100 (a filtered), at 500 ms it is 550 (a allowed).
	mk := func() *routing.Snapshot {
		a, b := cl("a", 1, 0, 0), cl("b", 1, 0, 0)
		a.Stats.QueuedInputSize = 500
		b.Stats.QueuedInputSize = 50
		return snapOf(a, b)
	}
	p := mustNew(t, func(c *Config) {
		c.QueueSLO, c.QueueFloorMs, c.QueueCeilMs = true, 100, 1000
		c.BucketMs, c.N, c.Comparator = 1e6, 1, lb.ComparatorTTFT
	})
	req := &routing.Request{ReceivedAt: t0, SLO: time.Second}
	seen := map[string]bool{}
	for seed := range uint64(40) {
		d, ok := pick(t, p, req, mk(), 0, seed)
		if !ok || d.ClusterID != "b" {
			t.Fatalf("at 0: %q ok=%v, want b only", d.ClusterID, ok)
		}
		d, ok = pick(t, p, req, mk(), 500*time.Millisecond, seed)
		if !ok {
			t.Fatal("no choice at 500 ms")
		}
		seen[d.ClusterID] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("at 500 ms with n=1 both should be drawn, saw %v", seen)
	}
	if got, ok := p.cfg.MaxQueueMs(&routing.Request{SLO: time.Second}, 250*time.Millisecond); !ok || got != 325 {
		t.Fatalf("MaxQueueMs at 25%% = %v, want 325", got)
	}
	if got, _ := p.cfg.MaxQueueMs(&routing.Request{}, 0); got != 1000 {
		t.Fatalf("MaxQueueMs without an SLO = %v, want the ceiling", got)
	}
}

func TestNComparesSampledMembers(t *testing.T) {
	// One bucket of 8; n = 8 always finds the least TTFT.
	var cs []routing.ClusterView
	for i := range 8 {
		cs = append(cs, cl(fmt.Sprintf("c%d", i), float64(10-i), 0, 0))
	}
	snap := snapOf(cs...)
	p := mustNew(t, func(c *Config) { c.N = 8 })
	for seed := range uint64(30) {
		if d, _ := pick(t, p, &routing.Request{ReceivedAt: t0}, snap, 0, seed); d.ClusterID != "c7" {
			t.Fatalf("n=8 chose %s, want c7", d.ClusterID)
		}
	}
	// n = 1 spreads over the bucket.
	p = mustNew(t, func(c *Config) { c.N = 1 })
	seen := map[string]bool{}
	for seed := range uint64(200) {
		d, _ := pick(t, p, &routing.Request{ReceivedAt: t0}, snap, 0, seed)
		seen[d.ClusterID] = true
	}
	if len(seen) != 8 {
		t.Fatalf("n=1 drew %d distinct clusters of 8", len(seen))
	}
}

func TestExclusionsNeverChosen(t *testing.T) {
	r := rng(99)
	for iter := range 500 {
		n := 1 + r.IntN(12)
		var cs []routing.ClusterView
		for i := range n {
			cs = append(cs, cl(fmt.Sprintf("c%02d", i), float64(r.IntN(60)), uint64(r.IntN(3)), uint64(r.IntN(4))))
		}
		snap := snapOf(cs...)
		req := &routing.Request{ReceivedAt: t0, AffinityKey: fmt.Sprintf("k%d", r.IntN(5))}
		for range r.IntN(n + 1) {
			req.Excluded = append(req.Excluded, snap.Clusters[r.IntN(n)].ClusterID)
		}
		p := mustNew(t, func(c *Config) {
			c.SelectionCount = r.IntN(4)
			c.IgnoreQueueTime = r.IntN(2) == 0
			c.N = 1 + r.IntN(3)
		})
		pick(t, p, req, snap, time.Duration(r.IntN(100))*time.Millisecond, uint64(iter))
	}
}

func TestRingHashLayout(t *testing.T) {
	// The prefix and tags byte for byte (docs/design/algorithms.md#hashing).
	got := appendPrefix(nil, "s", routing.Target{RoutingKey: "", Model: "m"})
	var want []byte
	want = append(want, 0x01)
	for _, f := range [][2]string{{"seed", "s"}, {"routing_key", ""}, {"model_id", "m"}} {
		want = append(want, f[0]...)
		want = append(want, 0xFF)
		want = binary.LittleEndian.AppendUint64(want, uint64(len(f[1])))
		want = append(want, f[1]...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("prefix\n got %x\nwant %x", got, want)
	}
	_, h := vnodeHash(nil, got, "c1", 3)
	vn := slices.Clone(want)
	vn = append(vn, "cluster_id"...)
	vn = append(vn, 0xFF)
	vn = binary.LittleEndian.AppendUint64(vn, 2)
	vn = append(vn, "c1"...)
	vn = append(vn, "virtual_node"...)
	vn = append(vn, 0xFF)
	vn = binary.LittleEndian.AppendUint64(vn, 8)
	vn = binary.LittleEndian.AppendUint64(vn, 3)
	if h != xxh3.Hash(vn) {
		t.Fatalf("virtual node hash %x, want %x", h, xxh3.Hash(vn))
	}
}

func TestRingGroups(t *testing.T) {
	var cs []routing.ClusterView
	for i := range 6 {
		cs = append(cs, cl(fmt.Sprintf("c%d", i), 1, 0, 0))
	}
	snap := snapOf(cs...)
	r := buildRing("", snap, 150)
	if len(r.nodes) != 6*150 {
		t.Fatalf("%d virtual nodes", len(r.nodes))
	}
	owners := map[int]int{}
	for k := range 3000 {
		g := r.selectGroup(nil, fmt.Sprintf("key-%d", k), 2, &routing.Request{})
		if len(g) != 2 || g[0] == g[1] {
			t.Fatalf("group %v", g)
		}
		owners[g[0]]++
		// Excluding the first member replaces it with the ring successor:
		// the group is the next two distinct clusters after it.
		ex := r.selectGroup(nil, fmt.Sprintf("key-%d", k), 2, &routing.Request{Excluded: []string{snap.Clusters[g[0]].ClusterID}})
		if len(ex) != 2 || ex[0] != g[1] || slices.Contains(ex, g[0]) {
			t.Fatalf("excluding %d of %v gave %v", g[0], g, ex)
		}
	}
	for i := range 6 {
		if owners[i] < 250 || owners[i] > 750 {
			t.Fatalf("ring balance: cluster %d owns %d of 3000 keys", i, owners[i])
		}
	}
	// k larger than the cluster count means every cluster.
	if g := r.selectGroup(nil, "x", 10, &routing.Request{}); len(g) != 6 {
		t.Fatalf("k=10 over 6 clusters gave %v", g)
	}
}

func TestGroupCacheMatchesRing(t *testing.T) {
	var cs []routing.ClusterView
	for i := range 9 {
		cs = append(cs, cl(fmt.Sprintf("c%d", i), 1, 0, 0))
	}
	snap := snapOf(cs...)
	a := affinity{seed: "s", virtualNodes: 20, k: 3}
	for round := range 3 {
		ring := buildRing("s", snap, 20)
		for k := range 5000 { // more keys than the cache holds: eviction runs
			req := &routing.Request{AffinityKey: fmt.Sprintf("key-%d", k%4500)}
			got := a.group(nil, snap, req)
			want := ring.selectGroup(nil, req.AffinityKey, 3, req)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d key %s: cached %v, ring %v", round, req.AffinityKey, got, want)
			}
		}
		// A new cluster list rebuilds the ring and drops the cache.
		snap = snapOf(append(slices.Clone(snap.Clusters), cl(fmt.Sprintf("n%d", round), 1, 0, 0))...)
		snap.Version = uint64(round + 2)
	}
	if len(a.groups) > maxCachedGroups {
		t.Fatalf("cache holds %d groups", len(a.groups))
	}
}

// affinitySetup is two clusters where key "k"'s group (k=1) is ring-owned
// by one of them; it returns the snapshot and the owner's and the other's
// ids.
func affinitySetup(t *testing.T, p *Picker) (*routing.Snapshot, string, string) {
	t.Helper()
	snap := snapOf(cl("a", 5, 1, 0), cl("b", 5, 1, 0))
	g := p.affinity.group(nil, snap, &routing.Request{AffinityKey: "k"})
	if len(g) != 1 {
		t.Fatalf("group %v", g)
	}
	home := snap.Clusters[g[0]].ClusterID
	other := "a"
	if home == "a" {
		other = "b"
	}
	return snap, home, other
}

func withRunning(snap *routing.Snapshot, id string, running uint64) *routing.Snapshot {
	s := *snap
	s.Clusters = slices.Clone(snap.Clusters)
	for i := range s.Clusters {
		if s.Clusters[i].ClusterID == id {
			s.Clusters[i].Stats.NumRunningQueries = running
		}
	}
	s.Version++
	return &s
}

func TestAffinityWaitThenGlobal(t *testing.T) {
	p := mustNew(t, func(c *Config) { c.SelectionCount = 1; c.AffinityWait = 100 * time.Millisecond })
	snap, home, other := affinitySetup(t, p)
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.ClusterID != home || d.RankDepth != 1 || d.GroupSize != 1 {
		t.Fatalf("home has room: %+v ok=%v, want %s at rank 1", d, ok, home)
	}
	full := withRunning(snap, home, 1)
	if d, ok := pick(t, p, req, full, 30*time.Millisecond, 1); ok || d.Wait != 70*time.Millisecond {
		t.Fatalf("home full at 30 ms: ok=%v wait=%v, want a 70 ms wait", ok, d.Wait)
	}
	d, ok := pick(t, p, req, full, 100*time.Millisecond, 1)
	if !ok || d.ClusterID != other || d.RankDepth != 2 {
		t.Fatalf("after the wait: %+v ok=%v, want %s at rank 2", d, ok, other)
	}
	// Without the wait, the same request overflows at once.
	p0 := mustNew(t, func(c *Config) { c.SelectionCount = 1 })
	if d, ok := pick(t, p0, &routing.Request{ReceivedAt: t0, AffinityKey: "k"}, full, 0, 1); !ok || d.ClusterID != other {
		t.Fatalf("no wait: %+v ok=%v", d, ok)
	}
}

func TestDiscountAppliesToGroupOnly(t *testing.T) {
	// Group {x}, 1000 tokens: x at 100 tps (10 s prefill) vs y at 10000 tps.
	// Bucket 20 ms: with no discount x is locked behind y; scale 0 makes
	// x's prefill 0 so it wins inside its group.
	mk := func(scale float64) (*Picker, *routing.Snapshot, string) {
		p := mustNew(t, func(c *Config) { c.SelectionCount = 1; c.InputTokensScale = scale; c.AffinityWait = time.Second })
		snap := snapOf(cl("x", 1, 0, 0), cl("y", 1, 0, 0))
		home := snap.Clusters[p.affinity.group(nil, snap, &routing.Request{AffinityKey: "k"})[0]].ClusterID
		for i := range snap.Clusters {
			if snap.Clusters[i].ClusterID == home {
				snap.Clusters[i].Stats.LastMeanInputTPS = 100
			} else {
				snap.Clusters[i].Stats.LastMeanInputTPS = 10000
			}
		}
		return p, snap, home
	}
	p, snap, home := mk(0)
	if d, ok := pick(t, p, &routing.Request{ReceivedAt: t0, AffinityKey: "k", InputTokens: 1000}, snap, 0, 1); !ok || d.ClusterID != home {
		t.Fatalf("scale 0: %+v ok=%v, want the home cluster %s", d, ok, home)
	}
}

func TestSessionClassification(t *testing.T) {
	cfg := func(on bool) func(*Config) {
		return func(c *Config) {
			c.SelectionCount, c.AffinityWait, c.InputTokensScale, c.LastClusterAffinity = 1, 200*time.Millisecond, 0.5, on
		}
	}
	p := mustNew(t, cfg(true))
	snap, home, other := affinitySetup(t, p)
	full := withRunning(snap, home, 1)

	// New: no hint, no wait: the home cluster is full, so it overflows now.
	req := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
	if d, ok := pick(t, p, req, full, 0, 1); !ok || d.ClusterID != other || req.Session != routing.SessionNew {
		t.Fatalf("new: %+v ok=%v session=%v", d, ok, req.Session)
	}
	// Stale: a hint outside the candidates routes like new.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: "gone"}
	if d, ok := pick(t, p, req, full, 0, 1); !ok || d.ClusterID != other || req.Session != routing.SessionStale {
		t.Fatalf("stale: %+v ok=%v session=%v", d, ok, req.Session)
	}
	// Returning to the other cluster: promoted into the group (k stays 1),
	// so it is served there at rank 1 even though home has room.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: other}
	if d, ok := pick(t, p, req, snap, 0, 1); !ok || d.ClusterID != other || d.RankDepth != 1 ||
		req.Session != routing.SessionReturning || !req.SessionPromoted {
		t.Fatalf("returning: %+v ok=%v session=%v promoted=%v", d, ok, req.Session, req.SessionPromoted)
	}
	// Returning to a full last cluster waits the configured wait.
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: home}
	if d, ok := pick(t, p, req, full, 0, 1); ok || d.Wait != 200*time.Millisecond || req.SessionPromoted {
		t.Fatalf("returning to a full home: %+v ok=%v promoted=%v", d, ok, req.SessionPromoted)
	}
	// The classification is kept: the same request, now with its last
	// cluster gone, stays returning (configured wait) and is not reclassified.
	gone := snapOf(full.Clusters[0], full.Clusters[1], cl("z", 5, 1, 0))
	gone.Clusters = slices.DeleteFunc(gone.Clusters, func(c routing.ClusterView) bool { return c.ClusterID == home })
	if _, _ = pick(t, p, req, gone, 10*time.Millisecond, 1); req.Session != routing.SessionReturning {
		t.Fatalf("reclassified as %v", req.Session)
	}
	// Flag off: nothing is classified, the hint is ignored.
	off := mustNew(t, cfg(false))
	req = &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: other}
	if d, ok := pick(t, off, req, snap, 0, 1); !ok || d.ClusterID != home || req.Session != routing.SessionUnclassified {
		t.Fatalf("flag off: %+v ok=%v session=%v", d, ok, req.Session)
	}
	// No affinity key: never classified.
	req = &routing.Request{ReceivedAt: t0, LastClusterID: other}
	pick(t, p, req, snap, 0, 1)
	if req.Session != routing.SessionUnclassified {
		t.Fatalf("keyless request classified %v", req.Session)
	}
}

func TestPromote(t *testing.T) {
	tests := []struct {
		order   []int
		last    int
		missing Missing
		want    []int
	}{
		{[]int{0, 1}, 1, InsertAndTruncate, []int{1, 0}},
		{[]int{0, 1}, 2, InsertAndTruncate, []int{2, 0}},
		{[]int{0}, 1, InsertAndTruncate, []int{1}},
		{[]int{0, 1, 2, 3, 4}, 3, Keep, []int{3, 0, 1, 2, 4}},
		{[]int{0, 1}, 0, Keep, []int{0, 1}},
		{[]int{0, 1}, 5, Keep, []int{0, 1}},
	}
	for _, tt := range tests {
		got := promote(slices.Clone(tt.order), tt.last, tt.missing)
		if !slices.Equal(got, tt.want) {
			t.Errorf("promote(%v, %d, %v) = %v, want %v", tt.order, tt.last, tt.missing, got, tt.want)
		}
	}
}

// TestCacheThrashRegression is the case last_cluster_affinity exists for:
// a session's home cluster A is saturated once, so its request overflows to
// B and warms B's cache. With the flag on, the gateway's hint keeps the next
// ten requests on B; with it off they go back to A and miss.
func TestCacheThrashRegression(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("last_cluster_affinity=%v", on), func(t *testing.T) {
			p := mustNew(t, func(c *Config) {
				c.SelectionCount, c.AffinityWait, c.LastClusterAffinity = 1, 50*time.Millisecond, on
			})
			snap, a, b := affinitySetup(t, p)
			// With the flag on the first request is a new session: no
			// wait, it overflows at once. Off, it waits the affinity wait.
			first := &routing.Request{ReceivedAt: t0, AffinityKey: "k"}
			at := time.Duration(0)
			if !on {
				if _, ok := pick(t, p, first, withRunning(snap, a, 1), 0, 1); ok {
					t.Fatal("flag off: the saturated home must be waited for")
				}
				at = 50 * time.Millisecond
			}
			d, ok := pick(t, p, first, withRunning(snap, a, 1), at, 1)
			if !ok || d.ClusterID != b {
				t.Fatalf("overflow went to %q ok=%v, want %s", d.ClusterID, ok, b)
			}
			for i := range 10 {
				req := &routing.Request{ReceivedAt: t0, AffinityKey: "k", LastClusterID: d.ClusterID}
				got, ok := pick(t, p, req, snap, 0, uint64(i))
				want := a
				if on {
					want = b
				}
				if !ok || got.ClusterID != want {
					t.Fatalf("follow-up %d went to %q, want %s", i, got.ClusterID, want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.VirtualNodes = 0 }, "wait-and-widen cache_affinity_virtual_nodes must be at least 1, got 0"},
		{func(c *Config) { c.N = 0 }, "wait-and-widen n must be at least 1, got 0"},
		{func(c *Config) { c.InputTokensScale = 1.5 }, "wait-and-widen cache_affinity_input_tokens_scale must be between 0.0 and 1.0, got 1.5"},
		{func(c *Config) { c.BucketMs = -1 }, "wait-and-widen ttft_bucket_size_ms must be a finite number ≥ 0, got -1"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mut(&c)
		_, err := New(c)
		if err == nil || err.Error() != tt.want {
			t.Errorf("got %v, want %q", err, tt.want)
		}
	}
}
