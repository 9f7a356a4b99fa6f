package olricnode_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/olric-data/olric"

	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// storage sums a DMap's storage over the node's partitions.
func storage(t *testing.T, n *olrictest.Node, dmap string) (tables, entries int) {
	t.Helper()
	st, err := n.Embedded().Stats(context.Background(), n.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		tables += p.DMaps[dmap].NumTables
		entries += p.DMaps[dmap].Length
	}
	return tables, entries
}

// waitStorage polls until the DMap holds at most maxTables tables and
// exactly entries entries, and fails after 20 s. Olric compacts and
// evicts on its own timers, which a test cannot replace with a fake
// clock, so the tests shorten the compaction interval and poll.
func waitStorage(t *testing.T, n *olrictest.Node, dmap string, maxTables, entries int, why string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		gotTables, gotEntries := storage(t, n, dmap)
		if gotTables <= maxTables && gotEntries == entries {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tables and %d entries 20 s after the writes, want at most %d and %d: %s",
				gotTables, gotEntries, maxTables, entries, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// compactingNode starts a node with one partition, 4 KiB tables and a
// compaction every 50 ms.
func compactingNode(t *testing.T) *olrictest.Node {
	cfg := olrictest.Config(nil)
	cfg.PartitionCount, cfg.TableSize, cfg.CompactionInterval = 1, 4<<10, 50*time.Millisecond
	return olrictest.StartWith(t, cfg)
}

// TestCompactionKeepsStorageToLiveEntries: 20 session entries rewritten
// 4,500 times, as last-cluster hints are on every turn, write about 45
// tables' worth. Olric v0.7.4's own compaction wedged on the table being
// written and kept all 45 (and stale copies of every key in each); the
// gateway's engine keeps one table with the 20 entries, each at its last
// value.
func TestCompactionKeepsStorageToLiveEntries(t *testing.T) {
	n := compactingNode(t)
	dm, err := n.Embedded().NewDMap("sessions")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const keys, writes = 20, 4500
	for i := range writes {
		if err := dm.Put(ctx, fmt.Sprintf("session-%02d", i%keys), fmt.Appendf(nil, "turn-%d", i/keys), olric.EX(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	waitStorage(t, n, "sessions", 1, keys, "compaction does not keep the storage to the live entries")
	for k := range keys {
		gr, err := dm.Get(ctx, fmt.Sprintf("session-%02d", k))
		if err != nil {
			t.Fatalf("session-%02d: %v", k, err)
		}
		if b, _ := gr.Byte(); string(b) != fmt.Sprintf("turn-%d", writes/keys-1) {
			t.Fatalf("session-%02d = %s after compaction, want its last value turn-%d", k, b, writes/keys-1)
		}
	}
}

// TestCompactionFreesEmptiedTables: keys overwritten many times and then
// expired, as rate-limit window counters are, fill table after table with
// garbage; once they are gone the fragment must shrink to one empty table.
// Olric v0.7.4's compaction kept the emptied tables (as recycled tables,
// for 15 minutes) or wedged on the table being written and kept them all.
func TestCompactionFreesEmptiedTables(t *testing.T) {
	n := compactingNode(t)
	dm, err := n.Embedded().NewDMap("windows")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// 20 windows x 100 overwrites of about 40 bytes: about 20 tables.
	for w := range 20 {
		for i := range 100 {
			if err := dm.Put(ctx, fmt.Sprintf("window-%02d", w), fmt.Appendf(nil, "%d", i), olric.PX(200*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitStorage(t, n, "windows", 1, 0, "tables of expired keys are kept")
}
