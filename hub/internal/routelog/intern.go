package routelog

import (
	"sync"
	"sync/atomic"
)

// MaxInterned bounds each intern table (routes, clusters): past it, new
// strings read back as Overflow. With maxInternBytes per string a table
// holds at most about 2.5 MB.
const MaxInterned = 4096

// maxInternBytes caps one interned string (a route counts its three
// parts together); longer ones read back as Overflow.
const maxInternBytes = 600

// Overflow is what a string reads back as when its table was full or it
// was too long to keep.
const Overflow = "(other)"

// noString is the id of "": a cluster that is not there, no escape.
const noString = 0

// overflowID is the id of Overflow in every table.
const overflowID = 1

// interner maps values to small ids and back. Lookups read an immutable
// map through an atomic pointer, so id is lock-free and allocation-free
// for a value seen before; the first sight of a value copies the map
// under the mutex (at most limit times in the table's life).
type interner[K comparable] struct {
	ids   atomic.Pointer[map[K]uint32]
	mu    sync.Mutex
	vals  []K // by id; 0 is the zero value, 1 is overflow
	limit int
	size  func(K) int
}

func newInterner[K comparable](limit int, size func(K) int, overflow K) *interner[K] {
	var zero K
	t := &interner[K]{vals: []K{zero, overflow}, limit: limit + 2, size: size}
	t.ids.Store(&map[K]uint32{})
	return t
}

// id returns v's id, overflowID when the table is full or v too long.
func (t *interner[K]) id(v K) uint32 {
	if id, ok := (*t.ids.Load())[v]; ok {
		return id
	}
	if t.size(v) > maxInternBytes {
		return overflowID
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.ids.Load()
	if id, ok := old[v]; ok {
		return id
	}
	if len(t.vals) >= t.limit {
		return overflowID
	}
	id := uint32(len(t.vals)) //nolint:gosec // bounded by limit
	t.vals = append(t.vals, v)
	next := make(map[K]uint32, len(old)+1)
	for k, i := range old {
		next[k] = i
	}
	next[v] = id
	t.ids.Store(&next)
	return id
}

// values returns the table by id. Values are only ever appended, so the
// slice stays valid after the lock is released.
func (t *interner[K]) values() []K {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.vals[:len(t.vals):len(t.vals)]
}

// lookup returns the value of id in vals (from values), the zero value
// for an id it does not hold.
func lookup[K comparable](vals []K, id uint32) K {
	if int(id) < len(vals) {
		return vals[id]
	}
	var zero K
	return zero
}
