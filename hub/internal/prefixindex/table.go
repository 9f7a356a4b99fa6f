package prefixindex

// table is a shard's hash table from node key to arena index: open
// addressing with linear probing and backward-shift deletion, so it has
// no tombstones and its size depends only on how many nodes it ever held.
// A Go map would not do: under the steady delete-and-insert of a full
// index its tombstones make it grow past its load factor (to 47 bytes an
// entry measured, against 24 when grown by inserts alone), which would
// leave the index's memory without a bound.
//
// An entry is one word: the key's low 32 bits above the node index plus
// one (0 marks an empty slot). The low bits give an entry's home slot
// without reading the arena, which deletion needs for every entry it
// shifts, and tell most colliding keys apart before the arena is read.
// The table doubles while more than half full, up to the first power of
// two holding twice the shard's node limit, so a probe is short at any
// fill.
type table struct {
	slots []uint64
	mask  uint64
	max   int
}

// minTableSlots is a new table's size: small, so an idle model or shard
// costs 1 KiB.
const minTableSlots = 128

// tableSlots returns the largest table a shard of limit nodes uses.
func tableSlots(limit int) int {
	n := minTableSlots
	for n < 2*limit {
		n *= 2
	}
	return n
}

func (t *table) init(limit int) {
	t.max = tableSlots(limit)
	t.slots = make([]uint64, min(minTableSlots, t.max))
	t.mask = uint64(len(t.slots) - 1)
}

func entry(key uint64, i int32) uint64 { return key<<32 | uint64(i+1) }
func entryIndex(e uint64) int32        { return int32(uint32(e)) - 1 }

// find returns the slot holding key and its node index, or -1.
func (t *table) find(key uint64, nodes []node) (uint64, int32) {
	tag := key << 32
	for p := key & t.mask; ; p = (p + 1) & t.mask {
		e := t.slots[p]
		if e == 0 {
			return 0, nilNode
		}
		if e&^(1<<32-1) == tag {
			if i := entryIndex(e); nodes[i].key == key {
				return p, i
			}
		}
	}
}

// insert adds key at node index i; key must be absent. live is the number
// of keys after the insert.
func (t *table) insert(key uint64, i int32, live int) {
	if 2*live > len(t.slots) && len(t.slots) < t.max {
		t.rehash(2 * len(t.slots))
	}
	t.place(entry(key, i))
}

func (t *table) place(e uint64) {
	p := (e >> 32) & t.mask
	for t.slots[p] != 0 {
		p = (p + 1) & t.mask
	}
	t.slots[p] = e
}

func (t *table) rehash(n int) {
	old := t.slots
	t.slots = make([]uint64, n)
	t.mask = uint64(n - 1)
	for _, e := range old {
		if e != 0 {
			t.place(e)
		}
	}
}

// deleteAt empties slot p and shifts back the entries after it that
// probed past it, so every key stays reachable from its home slot.
func (t *table) deleteAt(p uint64) {
	hole := p
	for q := (p + 1) & t.mask; t.slots[q] != 0; q = (q + 1) & t.mask {
		home := (t.slots[q] >> 32) & t.mask
		// The entry at q may fill the hole unless its home lies
		// cyclically in (hole, q].
		if (q-home)&t.mask >= (q-hole)&t.mask {
			t.slots[hole] = t.slots[q]
			hole = q
		}
	}
	t.slots[hole] = 0
}
