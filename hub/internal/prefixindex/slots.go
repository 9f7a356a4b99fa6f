package prefixindex

import "sync"

// maxSlots is the number of distinct clusters the index can name at once:
// holders store a uint16 slot instead of the cluster id, which keeps a
// holder at 10 bytes and its comparison a single instruction.
const maxSlots = 1 << 16

// slotTable maps cluster ids to the small integers holders store.
//
// Its lock also orders marks against RemoveCluster: Mark and Match hold
// the read lock for their whole call, so once RemoveCluster has taken the
// write lock and unmapped a cluster, no call still in flight uses the
// cluster's slot, and no later Mark can find it. The slot is freed only
// after every shard has dropped it, so a cluster given the slot later
// never inherits a departed cluster's prefixes, and a Match never names
// the new cluster for the old one's prefixes.
type slotTable struct {
	mu   sync.RWMutex
	byID map[string]uint16
	// ids names each slot: "" for a free slot. A slot being removed keeps
	// its id until it is freed, so a Match that runs during the removal
	// still names the departed cluster (readers skip clusters that left).
	ids  []string
	free []uint16
}

func newSlotTable() *slotTable {
	return &slotTable{byID: map[string]uint16{}}
}

// add gives id a slot if it has none, and reports false when every slot is
// taken.
func (t *slotTable) add(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; ok {
		return true
	}
	var s uint16
	switch {
	case len(t.free) > 0:
		s = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.ids[s] = id
	case len(t.ids) < maxSlots:
		s = uint16(len(t.ids))
		t.ids = append(t.ids, id)
	default:
		return false
	}
	t.byID[id] = s
	return true
}

// unmap forgets id's mapping and returns its slot, which stays reserved
// until release.
func (t *slotTable) unmap(id string) (uint16, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[id]
	if ok {
		delete(t.byID, id)
	}
	return s, ok
}

// release returns an unmapped slot to the free list.
func (t *slotTable) release(s uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ids[s] = ""
	t.free = append(t.free, s)
}

// mapped returns the number of clusters with a slot.
func (t *slotTable) mapped() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}
