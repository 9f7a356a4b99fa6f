package prefixindex

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap drives a table through random inserts and deletes,
// with keys crowded onto a few home slots near the end of the table so
// probes wrap around and deletions shift entries back across the wrap,
// and checks every key against a Go map after each step.
func TestTableAgainstMap(t *testing.T) {
	const limit = 256 // grows from 128 to 512 slots
	rng := rand.New(rand.NewPCG(7, 7))
	var tb table
	tb.init(limit)
	nodes := make([]node, limit)
	want := map[uint64]int32{}
	var free []int32
	for i := range int32(limit) {
		free = append(free, i)
	}
	key := func() uint64 {
		// Homes 120..127 and 0..3 of the 128-slot table, 504..511 and
		// 0..3 once grown, with distinct high bits.
		return rng.Uint64()&^0xffffffff | uint64(504+rng.IntN(12))&511 | uint64(rng.IntN(4))<<16
	}
	for step := range 12000 {
		// Fill and drain in waves, so the table grows and empties.
		fill := 3
		if step%4000 >= 2000 {
			fill = 7
		}
		if len(free) > 0 && (len(want) == 0 || rng.IntN(10) >= fill) {
			k := key()
			if _, dup := want[k]; dup {
				continue
			}
			i := free[len(free)-1]
			free = free[:len(free)-1]
			nodes[i] = node{key: k}
			want[k] = i
			tb.insert(k, i, len(want))
		} else {
			for k, i := range want {
				p, got := tb.find(k, nodes)
				if got != i {
					t.Fatalf("step %d: find(%x) = %d before delete, want %d", step, k, got, i)
				}
				tb.deleteAt(p)
				delete(want, k)
				nodes[i] = node{}
				free = append(free, i)
				break
			}
		}
		for k, i := range want {
			if _, got := tb.find(k, nodes); got != i {
				t.Fatalf("step %d: find(%x) = %d, want %d", step, k, got, i)
			}
		}
		if k := key(); want[k] == 0 {
			if _, got := tb.find(k, nodes); got != nilNode && nodes[got].key != k {
				t.Fatalf("step %d: find(%x) returned node %d of key %x", step, k, got, nodes[got].key)
			}
		}
	}
	if len(tb.slots) != tableSlots(limit) {
		t.Fatalf("table has %d slots, want it grown to %d", len(tb.slots), tableSlots(limit))
	}
}
