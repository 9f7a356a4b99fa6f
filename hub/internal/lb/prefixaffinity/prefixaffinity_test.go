package prefixaffinity

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/lbtest"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// slots is every test cluster's engine concurrency: with ten slots the
// default guard (utilisation < 0.8) admits up to 7 running requests while
// room lasts up to 9, so the guard and room can be told apart.
const slots = 10

// fleet is n idle clusters c0…c(n-1) with slots engine slots each.
func fleet(n int) *routing.Snapshot {
	return lbtest.With(lbtest.Idle(n), func(c *routing.ClusterView) { c.Stats.MaxEngineConcurrency = slots }, ids(n)...)
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%d", i)
	}
	return out
}

// running returns snap with the named cluster running r requests.
func running(snap *routing.Snapshot, id string, r uint64) *routing.Snapshot {
	return lbtest.With(snap, func(c *routing.ClusterView) { c.Stats.NumRunningQueries = r }, id)
}

// load sets several clusters' running counts: id → running.
func load(snap *routing.Snapshot, rs map[string]uint64) *routing.Snapshot {
	for id, r := range rs {
		snap = running(snap, id, r)
	}
	return snap
}

// prefix is a summary of total blocks held by the given holders (id,
// blocks, …), sorted as the prefix index sorts them.
func prefix(total int, holders ...any) routing.PrefixMatch {
	m := routing.PrefixMatch{TotalBlocks: total, BlockTokens: 16, Stride: prefixhash.StrideFor(total)}
	for i := 0; i < len(holders); i += 2 {
		m.Holders = append(m.Holders, routing.PrefixHolder{ClusterID: holders[i].(string), Blocks: holders[i+1].(int)})
	}
	slices.SortFunc(m.Holders, func(a, b routing.PrefixHolder) int {
		if a.Blocks != b.Blocks {
			return b.Blocks - a.Blocks
		}
		return strings.Compare(a.ClusterID, b.ClusterID)
	})
	return m
}

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }

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

// pick runs one decision, checks the picker left req alone and never
// chose an excluded cluster, and keeps the session classification in req
// as the routing pass does.
func pick(t testing.TB, p lb.Picker, req *routing.Request, snap *routing.Snapshot, seed uint64) (routing.Decision, bool) {
	t.Helper()
	before := *req
	d, ok := p.Pick(req, snap, time.Time{}, rng(seed))
	if req.Session != before.Session || req.SessionPromoted != before.SessionPromoted || req.LastClusterID != before.LastClusterID {
		t.Fatal("Pick wrote the request")
	}
	if ok {
		if snap.Clusters[d.Cluster].ClusterID != d.ClusterID {
			t.Fatalf("decision index %d names %s", d.Cluster, d.ClusterID)
		}
		if req.IsExcluded(d.ClusterID) {
			t.Fatalf("chose excluded %s", d.ClusterID)
		}
	}
	if req.Session == routing.SessionUnclassified {
		req.Session, req.SessionPromoted = d.Session, d.SessionPromoted
	}
	return d, ok
}

// TestTiers reaches every tier and checks its cluster, rank depth and
// marking wish.
func TestTiers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snap     *routing.Snapshot
		prefix   routing.PrefixMatch
		excluded []string
		guard    float64 // 0: the default
		queue    bool    // queue_on_saturated_holders (the default is true; most cases set it off to reach the reference tiers)
		want     string
		tier     routing.PrefixTier
		rank     int
		mark     bool
	}{
		{name: "no summary: load, nothing to record",
			snap: load(fleet(3), map[string]uint64{"c0": 5, "c2": 3}), want: "c1", tier: routing.PrefixTierLoad, rank: 1},
		{name: "summary, no holder: load and mark",
			snap: load(fleet(3), map[string]uint64{"c0": 5, "c1": 2}), prefix: prefix(40),
			want: "c2", tier: routing.PrefixTierLoad, rank: 1, mark: true},
		{name: "holder with room: cache even when busier than the rest",
			snap: load(fleet(3), map[string]uint64{"c1": 8}), prefix: prefix(40, "c1", 40),
			want: "c1", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "longest holder wins over a less loaded shorter one",
			snap: load(fleet(3), map[string]uint64{"c0": 6}), prefix: prefix(40, "c0", 40, "c2", 20),
			want: "c0", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "a holder one checkpoint short shares the band: least loaded wins",
			snap: load(fleet(3), map[string]uint64{"c0": 6}), prefix: prefix(40, "c0", 40, "c2", 39),
			want: "c2", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "two checkpoints short is out of the band",
			snap: load(fleet(3), map[string]uint64{"c0": 6}), prefix: prefix(40, "c0", 40, "c2", 38),
			want: "c0", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "the band follows the stride of long prompts (256 blocks: stride 4)",
			snap: load(fleet(3), map[string]uint64{"c0": 6}), prefix: prefix(256, "c0", 256, "c2", 252),
			want: "c2", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "full longest holder, a band member with room takes it",
			snap: load(fleet(3), map[string]uint64{"c0": slots, "c2": 9}), prefix: prefix(40, "c0", 40, "c2", 39),
			want: "c2", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "every holder full: split to the least loaded under the guard",
			snap: load(fleet(4), map[string]uint64{"c0": slots, "c1": 7, "c2": 5, "c3": 6}), prefix: prefix(40, "c0", 40),
			want: "c2", tier: routing.PrefixTierSplit, rank: 2, mark: true},
		{name: "a holder of a much shorter prefix is a split candidate, not a cache hit",
			snap: load(fleet(3), map[string]uint64{"c0": slots, "c1": 9, "c2": 2}), prefix: prefix(40, "c0", 40, "c1", 2),
			want: "c2", tier: routing.PrefixTierSplit, rank: 2, mark: true},
		{name: "nothing under the guard: queue on the least-loaded holder (the default)", queue: true,
			snap: load(fleet(4), map[string]uint64{"c0": slots, "c1": slots + 3, "c2": 9, "c3": 8}), prefix: prefix(40, "c1", 40, "c0", 39),
			want: "c0", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "everything full: queue on the holder, never a refusal", queue: true,
			snap: load(fleet(3), map[string]uint64{"c0": 30, "c1": 20, "c2": 25}), prefix: prefix(40, "c0", 40),
			want: "c0", tier: routing.PrefixTierCache, rank: 1, mark: true},
		{name: "nothing under the guard: overflow to the least loaded, no mark",
			snap: load(fleet(3), map[string]uint64{"c0": slots, "c1": 9, "c2": 8}), prefix: prefix(40, "c0", 40),
			want: "c2", tier: routing.PrefixTierOverflow, rank: 3},
		{name: "overflow when everything is full, never a refusal",
			snap: load(fleet(3), map[string]uint64{"c0": 30, "c1": 20, "c2": 25}), prefix: prefix(40, "c0", 40),
			want: "c1", tier: routing.PrefixTierOverflow, rank: 3},
		{name: "split_guard 0 takes any cluster with room",
			snap: load(fleet(2), map[string]uint64{"c0": slots, "c1": 9}), prefix: prefix(40, "c0", 40), guard: -1,
			want: "c1", tier: routing.PrefixTierSplit, rank: 2, mark: true},
		{name: "split_guard 1 never splits",
			snap: load(fleet(2), map[string]uint64{"c0": slots}), prefix: prefix(40, "c0", 40), guard: 1,
			want: "c1", tier: routing.PrefixTierOverflow, rank: 3},
		{name: "an excluded holder is no holder: load",
			snap: load(fleet(3), map[string]uint64{"c1": 3, "c2": 1}), prefix: prefix(40, "c0", 40), excluded: []string{"c0"},
			want: "c2", tier: routing.PrefixTierLoad, rank: 1, mark: true},
		{name: "a holder outside the snapshot is ignored",
			snap: load(fleet(3), map[string]uint64{"c0": 2, "c2": 1}), prefix: prefix(40, "gone", 40, "c0", 10),
			want: "c0", tier: routing.PrefixTierCache, rank: 1, mark: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, func(c *Config) {
				c.QueueOnSaturatedHolders = tc.queue
				switch {
				case tc.guard < 0:
					c.SplitGuard = 0
				case tc.guard > 0:
					c.SplitGuard = tc.guard
				}
			})
			req := &routing.Request{InputTokens: 1000, Prefix: tc.prefix, Excluded: tc.excluded}
			for seed := range uint64(20) {
				d, ok := pick(t, p, req, tc.snap, seed)
				if !ok {
					t.Fatal("no choice")
				}
				if d.ClusterID != tc.want || d.PrefixTier != tc.tier || d.RankDepth != tc.rank || d.PrefixMark != tc.mark || d.GroupSize != 1 {
					t.Fatalf("seed %d: %s tier %v rank %d mark %v group %d; want %s %v rank %d mark %v",
						seed, d.ClusterID, d.PrefixTier, d.RankDepth, d.PrefixMark, d.GroupSize, tc.want, tc.tier, tc.rank, tc.mark)
				}
				if d.Session != routing.SessionUnclassified {
					t.Fatalf("classified without last_cluster_affinity: %v", d.Session)
				}
			}
		})
	}
}

// Ties break uniformly: three idle band members each take about a third.
func TestTiesBreakUniformly(t *testing.T) {
	p := mustNew(t, nil)
	snap := fleet(4)
	req := &routing.Request{Prefix: prefix(40, "c0", 40, "c1", 40, "c2", 39, "c3", 10)}
	counts := map[string]int{}
	r := rng(3)
	for range 3000 {
		d, ok := p.Pick(req, snap, time.Time{}, r)
		if !ok {
			t.Fatal("no choice")
		}
		counts[d.ClusterID]++
	}
	for _, id := range []string{"c0", "c1", "c2"} {
		if n := counts[id]; n < 900 || n > 1100 {
			t.Errorf("%s chosen %d of 3000: %v", id, n, counts)
		}
	}
	if counts["c3"] != 0 {
		t.Errorf("c3 is not in the band but was chosen %d times", counts["c3"])
	}
}

func TestNoChoice(t *testing.T) {
	p := mustNew(t, nil)
	req := &routing.Request{Prefix: prefix(40, "c0", 40)}
	for name, snap := range map[string]*routing.Snapshot{"nil": nil, "empty": {}} {
		if _, ok := p.Pick(req, snap, time.Time{}, rng(1)); ok {
			t.Errorf("%s snapshot: got a decision", name)
		}
	}
	req.Excluded = ids(3)
	if _, ok := p.Pick(req, fleet(3), time.Time{}, rng(1)); ok {
		t.Error("every cluster excluded: got a decision")
	}
}

// On random fleets, holders, hints and exclusions the picker never
// refuses while a cluster is selectable, never chooses an excluded one,
// and its tier matches what the fleet offers.
func TestRandomFleetsNeverRefuse(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, mode := range []struct{ prefer, queue bool }{{true, true}, {false, true}, {true, false}, {false, false}} {
		p := mustNew(t, func(c *Config) {
			c.LastClusterAffinity, c.PreferLastCluster, c.QueueOnSaturatedHolders = true, mode.prefer, mode.queue
		})
		for iter := range 3000 {
			n := 1 + r.IntN(8)
			snap := fleet(n)
			for i := range n {
				snap = running(snap, fmt.Sprintf("c%d", i), uint64(r.IntN(14)))
			}
			var holders []any
			for i := range n + 2 { // two of them may be outside the snapshot
				if r.IntN(2) == 0 {
					holders = append(holders, fmt.Sprintf("c%d", i), 1+r.IntN(40))
				}
			}
			req := &routing.Request{AffinityKey: "k", Prefix: prefix(40, holders...)}
			if r.IntN(2) == 0 {
				req.LastClusterID = fmt.Sprintf("c%d", r.IntN(n+1))
			}
			for i := range n {
				if r.IntN(3) == 0 {
					req.Excluded = append(req.Excluded, fmt.Sprintf("c%d", i))
				}
			}
			d, ok := pick(t, p, req, snap, uint64(iter))
			if ok != (len(req.Excluded) < n) {
				t.Fatalf("iter %d: ok = %v with %d of %d excluded", iter, ok, len(req.Excluded), n)
			}
			if !ok {
				continue
			}
			v := &snap.Clusters[d.Cluster]
			switch d.PrefixTier {
			case routing.PrefixTierCache:
				// Queueing on a saturated holder is the one cache choice
				// without room, and only when no other cluster clears the
				// guard.
				if !HasRoom(v) && (!mode.queue || anyUnderGuard(req, snap, d.ClusterID)) {
					t.Fatalf("iter %d: cache tier on a full cluster %s", iter, d.ClusterID)
				}
			case routing.PrefixTierSplit:
				if lb.Utilization(&v.Stats) >= 0.8 {
					t.Fatalf("iter %d: split over the guard on %s", iter, d.ClusterID)
				}
			case routing.PrefixTierOverflow, routing.PrefixTierLoad:
			default:
				t.Fatalf("iter %d: no tier", iter)
			}
			if d.PrefixMark == (d.PrefixTier == routing.PrefixTierOverflow) {
				t.Fatalf("iter %d: tier %v mark %v", iter, d.PrefixTier, d.PrefixMark)
			}
		}
	}
}

// TestSessionClassification: only with last_cluster_affinity and an
// affinity key; new without a hint, stale for a cluster outside the
// snapshot, returning otherwise; an earlier classification is kept.
func TestSessionClassification(t *testing.T) {
	snap := fleet(3)
	on := mustNew(t, func(c *Config) { c.LastClusterAffinity = true })
	off := mustNew(t, nil)
	for _, tc := range []struct {
		name     string
		p        *Picker
		key      string
		hint     string
		earlier  routing.SessionState
		want     routing.SessionState
		promoted bool
	}{
		{"feature off", off, "k", "c1", 0, routing.SessionUnclassified, false},
		{"no affinity key", on, "", "c1", 0, routing.SessionUnclassified, false},
		{"new", on, "k", "", 0, routing.SessionNew, false},
		{"stale", on, "k", "gone", 0, routing.SessionStale, false},
		{"returning", on, "k", "c1", 0, routing.SessionReturning, true},
		{"kept: stale stays stale", on, "k", "c1", routing.SessionStale, routing.SessionStale, false},
		{"kept: returning stays returning", on, "k", "gone", routing.SessionReturning, routing.SessionReturning, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &routing.Request{AffinityKey: tc.key, LastClusterID: tc.hint, Session: tc.earlier, Prefix: prefix(40, "c0", 40)}
			d, ok := pick(t, tc.p, req, snap, 1)
			if !ok || d.Session != tc.want || d.SessionPromoted != tc.promoted {
				t.Fatalf("ok %v session %v promoted %v; want %v %v", ok, d.Session, d.SessionPromoted, tc.want, tc.promoted)
			}
		})
	}
}

// TestHintAndTree pins the one order in which the last-cluster hint and
// the prefix index combine, with returning_prefers_last_cluster on and
// off.
func TestHintAndTree(t *testing.T) {
	base := load(fleet(4), map[string]uint64{"c0": 1, "c3": 4})
	tree := prefix(40, "c0", 40)
	for _, tc := range []struct {
		name   string
		prefer bool
		snap   *routing.Snapshot
		hint   string
		prefix routing.PrefixMatch
		want   string
		tier   routing.PrefixTier
	}{
		{"hint wins over a longer holder while it has room", true, base, "c3", tree, "c3", routing.PrefixTierCache},
		{"the tree alone decides with the setting off", false, base, "c3", tree, "c0", routing.PrefixTierCache},
		{"a full last cluster hands over to the tree's holders", true, running(base, "c3", slots), "c3", tree, "c0", routing.PrefixTierCache},
		{"a full last cluster and no other holder: split, not load", true,
			load(base, map[string]uint64{"c3": slots, "c0": 9, "c1": 9, "c2": 2}), "c3", prefix(40), "c2", routing.PrefixTierSplit},
		{"with the setting off the same request is a load decision", false,
			load(base, map[string]uint64{"c3": slots, "c0": 9, "c1": 9, "c2": 2}), "c3", prefix(40), "c2", routing.PrefixTierLoad},
		{"the hint works without a summary", true, base, "c3", routing.PrefixMatch{}, "c3", routing.PrefixTierCache},
		{"a stale hint is ignored", true, base, "gone", tree, "c0", routing.PrefixTierCache},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, func(c *Config) { c.LastClusterAffinity, c.PreferLastCluster = true, tc.prefer })
			for seed := range uint64(10) {
				req := &routing.Request{AffinityKey: "k", LastClusterID: tc.hint, Prefix: tc.prefix}
				d, ok := pick(t, p, req, tc.snap, seed)
				if !ok || d.ClusterID != tc.want || d.PrefixTier != tc.tier {
					t.Fatalf("seed %d: %s %v, want %s %v", seed, d.ClusterID, d.PrefixTier, tc.want, tc.tier)
				}
				if d.PrefixMark != tc.prefix.Known() {
					t.Fatalf("mark %v with summary %v", d.PrefixMark, tc.prefix.Known())
				}
			}
		})
	}

	// An excluded last cluster (a failed attempt) is never chosen; the
	// request stays returning.
	p := mustNew(t, func(c *Config) { c.LastClusterAffinity = true })
	req := &routing.Request{AffinityKey: "k", LastClusterID: "c3", Session: routing.SessionReturning, Excluded: []string{"c3"}, Prefix: tree}
	if d, ok := pick(t, p, req, base, 1); !ok || d.ClusterID != "c0" || d.Session != routing.SessionReturning {
		t.Fatalf("excluded last cluster: %+v", d)
	}
}

// A returning session of eight turns stays on its cluster on an idle
// fleet, and moves once, to a holder of its prefix, when that cluster
// fills up.
func TestReturningSessionFollowsItsCache(t *testing.T) {
	p := mustNew(t, func(c *Config) { c.LastClusterAffinity = true })
	snap := fleet(4)
	last := ""
	held := map[string]int{} // what a proxy would have marked
	for turn := range 8 {
		if turn == 4 {
			snap = running(snap, last, slots)
		}
		blocks := 10 * (turn + 1)
		var holders []any
		for id, b := range held {
			holders = append(holders, id, min(b, blocks))
		}
		req := &routing.Request{AffinityKey: "s", LastClusterID: last, InputTokens: uint64(16 * blocks), Prefix: prefix(blocks, holders...)}
		d, ok := pick(t, p, req, snap, uint64(turn))
		if !ok {
			t.Fatal("no choice")
		}
		switch {
		case turn == 0:
		case turn == 4:
			if d.ClusterID == last || d.PrefixTier != routing.PrefixTierSplit {
				t.Fatalf("turn 4: %s %v after %s filled up", d.ClusterID, d.PrefixTier, last)
			}
		case d.ClusterID != last || d.PrefixTier != routing.PrefixTierCache:
			t.Fatalf("turn %d moved from %s to %s (%v)", turn, last, d.ClusterID, d.PrefixTier)
		}
		if d.PrefixMark {
			held[d.ClusterID] = blocks
		}
		last = d.ClusterID
	}
}

func TestBand(t *testing.T) {
	snap := fleet(5)
	for _, tc := range []struct {
		name     string
		prefix   routing.PrefixMatch
		excluded []string
		want     []string
	}{
		{"no summary", routing.PrefixMatch{Holders: []routing.PrefixHolder{{ClusterID: "c0", Blocks: 3}}}, nil, nil},
		{"no holders", prefix(40), nil, nil},
		{"longest and one checkpoint short", prefix(40, "c3", 40, "c1", 39, "c0", 38), nil, []string{"c3", "c1"}},
		{"the longest selectable sets the band", prefix(40, "c3", 40, "c1", 39, "c0", 38), []string{"c3"}, []string{"c1", "c0"}},
		{"outside the snapshot", prefix(40, "x", 40, "c2", 12, "c4", 11), nil, []string{"c2", "c4"}},
		{"stride 2 (100 blocks)", prefix(100, "c0", 100, "c1", 98, "c2", 96), nil, []string{"c0", "c1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &routing.Request{Prefix: tc.prefix, Excluded: tc.excluded}
			var got []string
			for _, i := range Band(nil, req, snap) {
				got = append(got, snap.Clusters[i].ClusterID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("band %v, want %v", got, tc.want)
			}
		})
	}
	if s := Stride(&routing.PrefixMatch{TotalBlocks: 64, Stride: 1}); s != 1 {
		t.Errorf("stride of 64 blocks = %d, want 1", s)
	}
	if s := Stride(&routing.PrefixMatch{TotalBlocks: 65, Stride: 2}); s != 2 {
		t.Errorf("stride of 65 blocks = %d, want 2", s)
	}
	if s := Stride(&routing.PrefixMatch{TotalBlocks: 65}); s != 1 {
		t.Errorf("stride missing = %d, want 1", s)
	}
	if s := Stride(&routing.PrefixMatch{}); s != 1 {
		t.Errorf("stride without a summary = %d, want 1", s)
	}
}

func TestPromote(t *testing.T) {
	for _, tc := range []struct {
		name   string
		order  []int
		band   []int
		from   int
		insert bool
		want   []int
	}{
		{"no band", []int{4, 5, 6}, nil, 0, true, []int{4, 5, 6}},
		{"members move up in the order's sequence", []int{4, 5, 6, 7}, []int{7, 5}, 0, false, []int{5, 7, 4, 6}},
		{"behind a promoted last cluster", []int{9, 4, 5, 6}, []int{6}, 1, false, []int{9, 6, 4, 5}},
		{"the lead is not moved even when it holds", []int{9, 4, 5}, []int{9, 5}, 1, true, []int{9, 5, 4}},
		{"keep mode leaves out what the order lacks", []int{4, 5, 6}, []int{8, 6}, 0, false, []int{6, 4, 5}},
		{"insert mode inserts and keeps the size", []int{4, 5, 6}, []int{8, 6}, 0, true, []int{6, 8, 4}},
		{"insert mode truncates a long band", []int{4, 5}, []int{8, 7, 6}, 0, true, []int{8, 7}},
		{"a band everywhere leaves the order alone", []int{6, 4, 5}, []int{4, 5, 6}, 0, true, []int{6, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order := slices.Clone(tc.order)
			got := Promote(order, tc.band, tc.from, tc.insert)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Promote = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMark(t *testing.T) {
	d := routing.Decision{ClusterID: "c1"}
	if got := Mark(d, &routing.PrefixMatch{}); got != d {
		t.Errorf("no summary changed the decision: %+v", got)
	}
	m := prefix(40, "c1", 3)
	if got := Mark(d, &m); !got.PrefixMark || got.PrefixTier != routing.PrefixTierCache {
		t.Errorf("holder: %+v", got)
	}
	m = prefix(40, "c2", 40)
	if got := Mark(d, &m); !got.PrefixMark || got.PrefixTier != routing.PrefixTierLoad {
		t.Errorf("non-holder: %+v", got)
	}
}

func TestHasRoom(t *testing.T) {
	c := lbtest.Cluster("c", time.Millisecond)
	for _, tc := range []struct {
		mec, running uint64
		want         bool
	}{{4, 3, true}, {4, 4, false}, {4, 9, false}, {0, 0, true}, {0, 1000, true}} {
		c.Stats.MaxEngineConcurrency, c.Stats.NumRunningQueries = tc.mec, tc.running
		if got := HasRoom(&c); got != tc.want {
			t.Errorf("mec %d running %d: room %v", tc.mec, tc.running, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
		msg   string
	}{
		{DefaultConfig(), "", ""},
		{Config{Comparator: lb.ComparatorTTFT, SplitGuard: 0}, "", ""},
		{Config{Comparator: lb.ComparatorTTFT, SplitGuard: 1}, "", ""},
		{Config{SplitGuard: -0.1}, "split_guard", "prefix-affinity split_guard must be between 0.0 and 1.0, got -0.1"},
		{Config{SplitGuard: 1.5}, "split_guard", "prefix-affinity split_guard must be between 0.0 and 1.0, got 1.5"},
		{Config{SplitGuard: math.NaN()}, "split_guard", "prefix-affinity split_guard must be between 0.0 and 1.0, got NaN"},
		{Config{Comparator: lb.Comparator(42), SplitGuard: 0.2}, "comparator", "prefix-affinity comparator must be one of"},
	} {
		_, err := New(tc.cfg)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		var fe *lb.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Algorithm != Name || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%+v: %v, want a FieldError on %s starting %q", tc.cfg, err, tc.field, tc.msg)
		}
	}
	d := DefaultConfig()
	if d.Comparator != lb.ComparatorUtilization || d.SplitGuard != 0.2 || d.LastClusterAffinity || !d.PreferLastCluster {
		t.Errorf("DefaultConfig = %+v", d)
	}
	if p := mustNew(t, nil); p.String() != "prefix-affinity" || p.Config() != d {
		t.Errorf("accessors: %s %+v", p, p.Config())
	}
}

// promoteRef is Promote written plainly: the order's prefix, then the band
// members in the order's sequence, then (insert mode) the missing ones in
// band order, then everyone else, cut to the order's length.
func promoteRef(order, band []int, from int, insert bool) []int {
	if len(band) == 0 || from >= len(order) {
		return order
	}
	out := slices.Clone(order[:from])
	for _, i := range order[from:] {
		if slices.Contains(band, i) {
			out = append(out, i)
		}
	}
	if insert {
		for _, i := range band {
			if !slices.Contains(out, i) && !slices.Contains(order, i) {
				out = append(out, i)
			}
		}
	}
	for _, i := range order[from:] {
		if !slices.Contains(band, i) {
			out = append(out, i)
		}
	}
	return out[:len(order)]
}

// Promote rearranges in place; on random orders and bands it agrees with
// the plain reference.
func TestPromoteMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for iter := range 20000 {
		n := r.IntN(20)
		order := r.Perm(30)[:n]
		band := r.Perm(30)[:r.IntN(12)]
		from := 0
		if n > 0 && r.IntN(2) == 0 {
			from = 1
		}
		insert := r.IntN(2) == 0
		want := promoteRef(slices.Clone(order), band, from, insert)
		got := Promote(slices.Clone(order), band, from, insert)
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d: Promote(%v, %v, %d, %v) = %v, want %v", iter, order, band, from, insert, got, want)
		}
	}
}

// anyUnderGuard reports whether a selectable cluster other than chosen is
// under the default split guard.
func anyUnderGuard(req *routing.Request, snap *routing.Snapshot, chosen string) bool {
	for i := range snap.Clusters {
		v := &snap.Clusters[i]
		if v.ClusterID != chosen && !req.IsExcluded(v.ClusterID) && lb.Utilization(&v.Stats) < 1-DefaultSplitGuard {
			return true
		}
	}
	return false
}
