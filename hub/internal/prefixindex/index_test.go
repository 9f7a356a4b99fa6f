package prefixindex

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"nodes too few", Config{MaxNodes: MinNodes - 1, MaxHoldersPerNode: 8, TTL: time.Minute}, "MaxNodes"},
		{"nodes too many", Config{MaxNodes: MaxNodesLimit + 1, MaxHoldersPerNode: 8, TTL: time.Minute}, "MaxNodes"},
		{"no holders", Config{MaxNodes: MinNodes, MaxHoldersPerNode: 0, TTL: time.Minute}, "MaxHoldersPerNode"},
		{"holders too many", Config{MaxNodes: MinNodes, MaxHoldersPerNode: MaxHoldersLimit + 1, TTL: time.Minute}, "MaxHoldersPerNode"},
		{"no ttl", Config{MaxNodes: MinNodes, MaxHoldersPerNode: 8}, "TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, clock.NewFake(epoch))
			if err == nil || !strings.Contains(err.Error(), "prefixindex: "+tc.field+" must be") {
				t.Fatalf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
			}
		})
	}
	if err := (Config{}).Validate(); err == nil || strings.Count(err.Error(), "must be") != 3 {
		t.Fatalf("zero Config: %v, want all three fields reported", err)
	}
}

// TestNodeSize keeps the figure the memory bound is computed from honest.
func TestNodeSize(t *testing.T) {
	if got := unsafe.Sizeof(node{}); got != nodeBytes {
		t.Fatalf("node is %d bytes, nodeBytes says %d", got, nodeBytes)
	}
	if got := DefaultConfig().MaxBytes(); got != 104<<20 {
		t.Fatalf("default MaxBytes = %d, the docs say 104 MiB", got)
	}
}

// TestMatchLongestPerCluster: each cluster is reported once, with the
// longest checkpoint of this prompt it holds, longest first, ties by id.
func TestMatchLongestPerCluster(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	// Turn 1 (100 blocks, stride 2) on c1; turn 2 (300 blocks, stride 8)
	// on c2 and c0; the same turn 1 on c3 too.
	x.Mark("m", summary(7, 100), "c1")
	x.Mark("m", summary(7, 300), "c2")
	x.Mark("m", summary(7, 300), "c0")
	x.Mark("m", summary(7, 100), "c3")
	// An unrelated conversation on c4 must not show up.
	x.Mark("m", summary(8, 500), "c4")

	// Turn 3 is 400 blocks at stride 8: its checkpoints are the multiples
	// of 8, so c0 and c2 match up to 296 (300 is not among them) and c1,
	// c3 up to 96.
	got := x.Match("m", summary(7, 400), nil)
	want := holders("c0", 296, "c2", 296, "c1", 96, "c3", 96)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Match = %v, want %v", got, want)
	}
	// A cluster holding both a deep and a shallow checkpoint is reported
	// once, with the deep one.
	x.Mark("m", summary(7, 100), "c2")
	if got := x.Match("m", summary(7, 400), nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("after re-marking c2 with turn 1: Match = %v, want %v", got, want)
	}
	// The shorter prompt of turn 1 finds everyone at its own length.
	got = x.Match("m", summary(7, 100), nil)
	want = holders("c1", 100, "c2", 100, "c3", 100, "c0", 96)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Match(turn 1) = %v, want %v", got, want)
	}
	if got := x.Match("m", summary(9, 400), nil); len(got) != 0 {
		t.Fatalf("unknown conversation matched %v", got)
	}
	st := x.Stats()
	if st.Marks != 6 || st.Matches != 4 || st.Hits != 3 {
		t.Fatalf("Stats marks/matches/hits = %d/%d/%d, want 6/4/3", st.Marks, st.Matches, st.Hits)
	}
	checkInvariants(t, x)
}

// TestMatchReusesDst: a Match into a slice with room does not allocate.
func TestMatchReusesDst(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	s := summary(1, 8192)
	for _, c := range []string{"a", "b", "c"} {
		x.Mark("m", s, c)
	}
	dst := make([]routing.PrefixHolder, 0, 8)
	if n := testing.AllocsPerRun(100, func() { dst = x.Match("m", s, dst) }); n != 0 {
		t.Fatalf("Match allocated %v times per call", n)
	}
	if len(dst) != 3 || dst[0].Blocks != 8192 {
		t.Fatalf("Match = %v", dst)
	}
}

func TestModelIsolation(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	s := summary(1, 64)
	x.Mark("llama", s, "c1")
	if got := x.Match("mistral", s, nil); len(got) != 0 {
		t.Fatalf("another model matched %v", got)
	}
	other := s
	other.BlockTokens = 32
	if got := x.Match("llama", other, nil); len(got) != 0 {
		t.Fatalf("another block size matched %v", got)
	}
	other = s
	other.Version = 2
	if got := x.Match("llama", other, nil); len(got) != 0 {
		t.Fatalf("another summary version matched %v", got)
	}
	if got := x.Match("llama", s, nil); !reflect.DeepEqual(got, holders("c1", 64)) {
		t.Fatalf("own model: %v", got)
	}
}

// TestUnusableSummaries: summaries that do not add up are neither stored
// nor matched, and a nil Index knows nothing.
func TestUnusableSummaries(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	good := summary(1, 100)
	bad := map[string]prefixhash.Summary{"empty": {}}
	s := good
	s.Hashes = s.Hashes[:len(s.Hashes)-1]
	bad["hash count off"] = s
	s = good
	s.Stride = 0
	bad["no stride"] = s
	s = good
	s.BlockTokens = 0
	bad["no block size"] = s
	for name, s := range bad {
		x.Mark("m", s, "c1")
		if got := x.Match("m", s, nil); len(got) != 0 {
			t.Fatalf("%s: matched %v", name, got)
		}
	}
	x.Mark("m", good, "")
	if st := x.Stats(); st.Nodes != 0 || st.Marks != 0 {
		t.Fatalf("unusable marks stored something: %+v", st)
	}
	var nilIndex *Index
	nilIndex.Mark("m", good, "c1")
	nilIndex.RemoveCluster("c1")
	nilIndex.Sweep()
	if got := nilIndex.Match("m", good, nil); len(got) != 0 || nilIndex.Stats() != (Stats{}) || nilIndex.Clusters() != nil {
		t.Fatal("nil Index knows something")
	}
}

// TestTTL: a holder is believed for TTL after its last mark, ignored by
// Match as soon as it is older, and freed by Sweep.
func TestTTL(t *testing.T) {
	cfg := DefaultConfig()
	x, clk := newIndex(t, cfg)
	a, b := summary(1, 64), summary(2, 64)
	x.Mark("m", a, "c1")
	x.Mark("m", b, "c1")
	clk.Advance(cfg.TTL / 2)
	// a is refreshed: it lives TTL from now, and its nodes move ahead of
	// b's, so Sweep (which stops at the first live node from the least
	// recently marked end) still reaches b's.
	x.Mark("m", a, "c1")
	clk.Advance(cfg.TTL / 2)
	if got := x.Match("m", b, nil); !reflect.DeepEqual(got, holders("c1", 64)) {
		t.Fatalf("at exactly TTL: %v, want still held", got)
	}
	clk.Advance(time.Microsecond)
	if got := x.Match("m", b, nil); len(got) != 0 {
		t.Fatalf("older than TTL, before Sweep: %v, want nothing", got)
	}
	if st := x.Stats(); st.Nodes != 128 {
		t.Fatalf("before Sweep: %d nodes, want 128 (Match frees nothing)", st.Nodes)
	}
	x.Sweep()
	st := x.Stats()
	if st.Nodes != 64 || st.Holders != 64 || st.Evictions.TTL != 64 || st.Blocks != 64 {
		t.Fatalf("after Sweep: %+v, want b's 64 nodes gone and a's kept", st)
	}
	if got := x.Match("m", a, nil); !reflect.DeepEqual(got, holders("c1", 64)) {
		t.Fatalf("refreshed summary: %v", got)
	}
	checkInvariants(t, x)
	clk.Advance(cfg.TTL)
	x.Sweep()
	if st := x.Stats(); st.Nodes != 0 || st.Holders != 0 || st.Blocks != 0 {
		t.Fatalf("after everything expired: %+v", st)
	}
	checkInvariants(t, x)
}

// TestCapacityEvictionKeepsHeads: a full shard evicts its least recently
// marked node, and a Mark leaves a prompt's shorter checkpoints more
// recent than its longer ones, so pressure eats prompts from the tail.
func TestCapacityEvictionKeepsHeads(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxNodes = MinNodes // 64 nodes a shard
	x, _ := newIndex(t, cfg)
	long := summary(1, 64) // stride 1: 64 checkpoints, blocks 1..64
	x.Mark("m", long, "c1")
	// One-block prompts of other conversations land in random shards,
	// each evicting the least recently marked node of a full shard.
	conv := uint64(100)
	remaining := func() int {
		n := 0
		for _, h := range long.Hashes {
			if x.has("m", long, h) {
				n++
			}
		}
		return n
	}
	for remaining() > 32 {
		x.Mark("m", summary(conv, 1), "c2")
		conv++
	}
	st := x.Stats()
	if st.Nodes > cfg.MaxNodes || st.Evictions.Capacity == 0 {
		t.Fatalf("Stats %+v: want at most MaxNodes and some evictions", st)
	}
	// In every shard, the survivors of the long prompt are its shortest
	// checkpoints there.
	shortestGone := map[int]int{}
	for i, h := range long.Hashes {
		sh := shardOf(nodeKey(modelSeed("m", long), h))
		if !x.has("m", long, h) {
			if _, ok := shortestGone[sh]; !ok {
				shortestGone[sh] = long.Blocks(i)
			}
			continue
		}
		if g, ok := shortestGone[sh]; ok {
			t.Fatalf("shard %d kept checkpoint %d after evicting the shorter %d", sh, long.Blocks(i), g)
		}
	}
	checkInvariants(t, x)
}

// has reports whether the index stores checkpoint i of s.
func (x *Index) has(model string, s prefixhash.Summary, h uint64) bool {
	key := nodeKey(modelSeed(model, s), h)
	d := &x.shard[shardOf(key)]
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, i := d.t.find(key, d.nodes)
	return i != nilNode
}

// TestRemoveClusterThenSlotReuse: a cluster that takes a departed
// cluster's slot sees none of its prefixes.
func TestRemoveClusterThenSlotReuse(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	a, b := summary(1, 64), summary(2, 64)
	x.Mark("m", a, "gone")
	x.Mark("m", b, "gone")
	x.Mark("m", b, "stays")
	old := x.slots.byID["gone"]

	x.RemoveCluster("gone")
	st := x.Stats()
	if st.Nodes != 64 || st.Holders != 64 || st.Evictions.ClusterLeft != 128 || st.Clusters != 1 {
		t.Fatalf("after RemoveCluster: %+v, want a's nodes gone, b's kept for the other cluster", st)
	}
	if got := x.Match("m", b, nil); !reflect.DeepEqual(got, holders("stays", 64)) {
		t.Fatalf("b: %v, want only the cluster that stayed", got)
	}
	x.Mark("m", summary(3, 8), "new")
	if x.slots.byID["new"] != old {
		t.Fatalf("new cluster got slot %d, want the freed %d (the test needs the reuse)", x.slots.byID["new"], old)
	}
	if got := x.Match("m", a, nil); len(got) != 0 {
		t.Fatalf("a after slot reuse: %v, want nothing", got)
	}
	if got := x.Match("m", b, nil); !reflect.DeepEqual(got, holders("stays", 64)) {
		t.Fatalf("b after slot reuse: %v", got)
	}
	// The departed id marking again starts afresh.
	x.Mark("m", b, "gone")
	if got := x.Match("m", a, nil); len(got) != 0 {
		t.Fatalf("a after the departed cluster came back: %v", got)
	}
	x.RemoveCluster("never-seen") // no-op
	if got := x.Clusters(); !reflect.DeepEqual(got, []string{"gone", "new", "stays"}) {
		t.Fatalf("Clusters = %v", got)
	}
	x.RemoveCluster("new")
	if got := x.Clusters(); !reflect.DeepEqual(got, []string{"gone", "stays"}) {
		t.Fatalf("Clusters after removing new = %v", got)
	}
	checkInvariants(t, x)
}

// TestHolderCap: a node keeps at most MaxHoldersPerNode holders and a new
// one replaces the holder marked longest ago.
func TestHolderCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxHoldersPerNode = 2
	x, clk := newIndex(t, cfg)
	s := summary(1, 4) // 4 checkpoints
	mark := func(c string) { x.Mark("m", s, c); clk.Advance(time.Second) }
	mark("c1")
	mark("c2")
	mark("c3") // replaces c1
	if got := x.Match("m", s, nil); !reflect.DeepEqual(got, holders("c2", 4, "c3", 4)) {
		t.Fatalf("after c3: %v", got)
	}
	mark("c2") // refresh: c3 is now the oldest
	mark("c4")
	if got := x.Match("m", s, nil); !reflect.DeepEqual(got, holders("c2", 4, "c4", 4)) {
		t.Fatalf("after c4: %v", got)
	}
	st := x.Stats()
	if st.Holders != 8 || st.Evictions.HolderCap != 8 {
		t.Fatalf("Stats %+v: want 2 holders on each of 4 nodes and 8 replaced", st)
	}
	checkInvariants(t, x)
}

// TestSlotTableFull: once every slot is taken, marks of new clusters are
// dropped and counted rather than growing the table.
func TestSlotTableFull(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	x.slots.ids = make([]string, maxSlots)
	for i := range x.slots.ids {
		x.slots.ids[i] = "filler"
	}
	x.Mark("m", summary(1, 8), "c1")
	if st := x.Stats(); st.DroppedMarks != 1 || st.Nodes != 0 {
		t.Fatalf("Stats %+v: want the mark dropped", st)
	}
}

// TestRemoveClusterFreesSlotLast: while RemoveCluster is still clearing
// shards, the departed cluster's slot is not free, so a cluster arriving
// meanwhile gets another slot.
func TestRemoveClusterFreesSlotLast(t *testing.T) {
	x, _ := newIndex(t, DefaultConfig())
	x.Mark("m", summary(1, 64), "gone")
	old := x.slots.byID["gone"]
	last := &x.shard[shardCount-1]
	last.mu.Lock() // RemoveCluster cannot finish its pass
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.RemoveCluster("gone")
	}()
	for unmapped := false; !unmapped; {
		x.slots.mu.RLock()
		_, mapped := x.slots.byID["gone"]
		x.slots.mu.RUnlock()
		unmapped = !mapped
		runtime.Gosched()
	}
	// Give a wrong implementation every chance to free the slot early.
	for range 1000 {
		runtime.Gosched()
	}
	if !x.slots.add("new") {
		t.Fatal("no slot")
	}
	x.slots.mu.RLock()
	got := x.slots.byID["new"]
	x.slots.mu.RUnlock()
	last.mu.Unlock()
	<-done
	if got == old {
		t.Fatalf("a cluster arriving during RemoveCluster got the departed cluster's slot %d", old)
	}
	checkInvariants(t, x)
}
