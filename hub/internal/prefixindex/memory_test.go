package prefixindex

import (
	"runtime"
	"testing"
)

// TestMemoryBound fills a small index past its node limit, with every
// holder slot in use (the worst case), and checks the heap it takes
// against Stats.Bytes and Config.MaxBytes: the bound the docs promise is
// the memory actually used, not an estimate that churn could outgrow.
func TestMemoryBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxNodes = 1 << 14
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x, _ := newIndex(t, cfg)
	ids := make([]string, cfg.MaxHoldersPerNode)
	for i := range ids {
		ids[i] = string(rune('a' + i))
	}
	// 1024 conversations of 64 one-block checkpoints each is four times
	// the limit: the index fills, then evicts for three quarters of the
	// run.
	for conv := range uint64(1024) {
		s := summary(conv, 64)
		for _, c := range ids {
			x.Mark("m", s, c)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	st := x.Stats()
	t.Logf("%d nodes, %d holders: heap %d B (%.1f B/node), Stats.Bytes %d, MaxBytes %d",
		st.Nodes, st.Holders, used, float64(used)/float64(st.Nodes), st.Bytes, cfg.MaxBytes())
	if st.Evictions.Capacity == 0 || st.Holders != st.Nodes*cfg.MaxHoldersPerNode {
		t.Fatalf("Stats %+v: want a full index of full nodes", st)
	}
	if st.Bytes > cfg.MaxBytes() {
		t.Fatalf("Stats.Bytes %d over MaxBytes %d", st.Bytes, cfg.MaxBytes())
	}
	// The heap also holds the clock, the slot table and the test's own
	// garbage-free state: a few KiB.
	if slack := int64(64 << 10); used > st.Bytes+slack || used < st.Bytes-slack {
		t.Fatalf("heap grew %d B, Stats.Bytes says %d", used, st.Bytes)
	}
	runtime.KeepAlive(x)
}
