package pulsar

// fifo is a bounded, insertion-ordered map from key to ranking: O(1) lookup,
// append, removal of any key and removal of the oldest key, with all node
// storage allocated once. It serves both the ranking cache (evicted oldest
// first) and the probation list (whose members leave from the middle when a
// second miss admits them).
//
// fifo is not safe for concurrent use; Ranker guards it.
type fifo struct {
	limit int
	index map[string]int32 // key → node
	nodes []fifoNode       // grows up to limit, then reused via free
	head  int32            // oldest node, nilNode when empty
	tail  int32            // newest node, nilNode when empty
	free  int32            // first reusable node, nilNode when none
}

type fifoNode struct {
	key        string
	ranking    []Ranked
	prev, next int32
}

const nilNode = -1

func newFIFO(limit int) fifo {
	return fifo{limit: limit, index: make(map[string]int32), head: nilNode, tail: nilNode, free: nilNode}
}

// len is the number of keys held.
func (f *fifo) len() int { return len(f.index) }

// full reports whether the fifo holds limit keys, so that pushBack needs a
// popFront first.
func (f *fifo) full() bool { return len(f.index) >= f.limit }

// get returns key's ranking.
func (f *fifo) get(key string) ([]Ranked, bool) {
	i, ok := f.index[key]
	if !ok {
		return nil, false
	}
	return f.nodes[i].ranking, true
}

// has reports whether key is held.
func (f *fifo) has(key string) bool {
	_, ok := f.index[key]
	return ok
}

// pushBack adds key as the newest entry. The caller ensures key is absent
// and the fifo is not full: what to do when it is full (evict, or refuse)
// is the caller's policy.
func (f *fifo) pushBack(key string, ranking []Ranked) {
	var i int32
	if f.free != nilNode {
		i = f.free
		f.free = f.nodes[i].next
	} else {
		i = int32(len(f.nodes))
		f.nodes = append(f.nodes, fifoNode{})
	}
	f.nodes[i] = fifoNode{key: key, ranking: ranking, prev: f.tail, next: nilNode}
	if f.tail != nilNode {
		f.nodes[f.tail].next = i
	} else {
		f.head = i
	}
	f.tail = i
	f.index[key] = i
}

// popFront removes the oldest entry, if any.
func (f *fifo) popFront() {
	if f.head != nilNode {
		f.unlink(f.head)
	}
}

// remove removes key and reports whether it was held.
func (f *fifo) remove(key string) bool {
	i, ok := f.index[key]
	if ok {
		f.unlink(i)
	}
	return ok
}

func (f *fifo) unlink(i int32) {
	n := &f.nodes[i]
	if n.prev != nilNode {
		f.nodes[n.prev].next = n.next
	} else {
		f.head = n.next
	}
	if n.next != nilNode {
		f.nodes[n.next].prev = n.prev
	} else {
		f.tail = n.prev
	}
	delete(f.index, n.key)
	// Drop the references so an evicted ranking and key can be collected.
	*n = fifoNode{next: f.free}
	f.free = i
}

// reset empties the fifo, keeping its storage for reuse.
func (f *fifo) reset() {
	clear(f.index)
	clear(f.nodes)
	f.nodes = f.nodes[:0]
	f.head, f.tail, f.free = nilNode, nilNode, nilNode
}
