package prefixindex

import (
	"fmt"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// chain stands for the chain hash after the first blocks blocks of
// conversation conv: every prompt of one conversation shares it, and
// different conversations do not.
func chain(conv uint64, blocks int) uint64 {
	return mix64(conv*0x9e3779b97f4a7c15 ^ uint64(blocks)*0xc2b2ae3d27d4eb4f)
}

// summary is the Summary the gateway would send for a prompt of blocks
// full blocks of conversation conv, at the stride it would choose.
func summary(conv uint64, blocks int) prefixhash.Summary {
	s := prefixhash.Summary{Version: 1, BlockTokens: 16, TotalBlocks: blocks, Stride: prefixhash.StrideFor(blocks)}
	s.Hashes = make([]uint64, prefixhash.Checkpoints(blocks, s.Stride))
	for i := range s.Hashes {
		s.Hashes[i] = chain(conv, s.Blocks(i))
	}
	return s
}

func newIndex(t testing.TB, cfg Config) (*Index, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	x, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	return x, clk
}

func holders(hs ...any) []routing.PrefixHolder {
	out := []routing.PrefixHolder{}
	for i := 0; i < len(hs); i += 2 {
		out = append(out, routing.PrefixHolder{ClusterID: hs[i].(string), Blocks: hs[i+1].(int)})
	}
	return out
}

// checkInvariants walks every shard and reports any inconsistency between
// the map, the LRU list, the free list, the holder slabs, the slot table
// and the counters Stats reads. It must run while nothing else uses x.
func checkInvariants(t testing.TB, x *Index) {
	t.Helper()
	if err := invariants(x); err != nil {
		t.Fatal(err)
	}
}

func invariants(x *Index) error {
	inUse := map[uint16]bool{}
	for _, s := range x.slots.byID {
		inUse[s] = true
	}
	nodes := 0
	for sh := range x.shard {
		d := &x.shard[sh]
		if err := d.invariants(sh, inUse); err != nil {
			return fmt.Errorf("shard %d: %w", sh, err)
		}
		nodes += d.live
	}
	st := x.Stats()
	if st.Nodes != nodes || st.Nodes > x.cfg.MaxNodes {
		return fmt.Errorf("Stats.Nodes %d, walked %d, MaxNodes %d", st.Nodes, nodes, x.cfg.MaxNodes)
	}
	if st.Bytes > x.cfg.MaxBytes() {
		return fmt.Errorf("Stats.Bytes %d over MaxBytes %d", st.Bytes, x.cfg.MaxBytes())
	}
	return nil
}

func (d *shard) invariants(sh int, inUse map[uint16]bool) error {
	entries := 0
	for _, e := range d.t.slots {
		if e != 0 {
			entries++
		}
	}
	if entries != d.live || 2*entries > len(d.t.slots) && len(d.t.slots) < d.t.max || len(d.t.slots) > d.t.max {
		return fmt.Errorf("table has %d entries in %d slots (max %d), live %d", entries, len(d.t.slots), d.t.max, d.live)
	}
	if cap(d.nodes) > d.limit || cap(d.hold) > d.limit*d.h {
		return fmt.Errorf("arena capacity %d over limit %d", cap(d.nodes), d.limit)
	}
	seen, holders, blocks := 0, 0, int64(0)
	prev := int32(nilNode)
	for i := d.head; i != nilNode; i = d.nodes[i].next {
		nd := d.nodes[i]
		if nd.prev != prev {
			return fmt.Errorf("node %d: prev %d, want %d", i, nd.prev, prev)
		}
		if _, j := d.t.find(nd.key, d.nodes); j != i || shardOf(nd.key) != sh {
			return fmt.Errorf("node %d: key %x maps to %d, shard %d", i, nd.key, j, shardOf(nd.key))
		}
		if nd.n == 0 || int(nd.n) > d.h {
			return fmt.Errorf("node %d has %d holders", i, nd.n)
		}
		slots := map[uint16]bool{}
		for _, h := range d.hold[int(i)*d.h : int(i)*d.h+int(nd.n)] {
			if slots[h.slot()] || !inUse[h.slot()] {
				return fmt.Errorf("node %d: slot %d repeated or not in use", i, h.slot())
			}
			slots[h.slot()] = true
		}
		seen++
		holders += int(nd.n)
		blocks += int64(nd.span)
		prev = i
		if seen > d.live {
			return fmt.Errorf("LRU list longer than live %d", d.live)
		}
	}
	if prev != d.tail || seen != d.live {
		return fmt.Errorf("LRU list: %d nodes ending at %d, live %d tail %d", seen, prev, d.live, d.tail)
	}
	free := 0
	for i := d.free; i != nilNode; i = d.nodes[i].next {
		free++
	}
	if free+d.live != len(d.nodes) || len(d.hold) != len(d.nodes)*d.h {
		return fmt.Errorf("%d free + %d live != %d allocated (slab %d)", free, d.live, len(d.nodes), len(d.hold))
	}
	if holders != d.holders || blocks != d.blocks {
		return fmt.Errorf("counted %d holders and %d blocks, counters say %d and %d", holders, blocks, d.holders, d.blocks)
	}
	return nil
}

// expiredTails counts the shards whose least recently marked node has no
// holder within the TTL: none is left after a Sweep.
func expiredTails(x *Index) int {
	expired := expiry(x.now(), x.ttl)
	n := 0
	for sh := range x.shard {
		d := &x.shard[sh]
		if d.tail != nilNode && d.newest(d.tail) < expired {
			n++
		}
	}
	return n
}
