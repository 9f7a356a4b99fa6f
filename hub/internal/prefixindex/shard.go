package prefixindex

import "sync"

// shardBits selects a shard from the top bits of a node key. Sixteen
// shards let Marks of different prompts (whose checkpoints spread over
// every shard) mostly take different locks, at 16 lock pairs per call at
// worst.
const (
	shardBits  = 4
	shardCount = 1 << shardBits
)

// nilNode ends the LRU list and the free list.
const nilNode = -1

// reason is why holder entries left the index; Stats counts each.
type reason uint8

const (
	reasonTTL reason = iota
	reasonCapacity
	reasonClusterLeft
	reasonHolderCap
	reasonCount
)

// node is one checkpoint: a prefix of some prompt, named by its chain
// hash (mixed with its model into key). Its parent in the prefix tree is
// the previous checkpoint of the summaries that marked it; matching never
// walks the tree, so no parent link is stored, and neither is the prefix
// length, which the request's own summary gives. It is 24 bytes
// (nodeBytes) and holds no pointer, so the garbage collector never scans
// the arena.
type node struct {
	key uint64
	// prev and next link the shard's LRU list (prev towards the most
	// recently marked end); next also links the free list.
	prev, next int32
	// span is the blocks the prefix adds to the previous checkpoint of
	// the summary that created the node: the sum of spans is the number
	// of distinct prompt blocks the index can name.
	span int32
	// n is the number of holders in use.
	n uint8
}

// shard is one sixteenth of the index. Nodes live in an arena of
// pointer-free structs indexed by int32; node i's holders live at
// [i*h, i*h+n) of the holder slab.
type shard struct {
	// mu guards every field. Match takes it for reading; Mark, Sweep and
	// RemoveCluster for writing, for one pass over their nodes in this
	// shard.
	mu    sync.RWMutex
	t     table
	nodes []node
	hold  []holder
	// head is the most recently marked node, tail the least: the next
	// evicted, and the first to expire.
	head, tail int32
	free       int32
	limit      int
	h          int
	// Counters for Stats, kept as nodes change so Stats costs one lock
	// per shard.
	live, holders int
	blocks        int64
	evicted       [reasonCount]uint64
	// Keep the next shard's lock off this shard's cache lines.
	_ [64]byte
}

// holder is one cluster holding a node's prefix, in one word: the
// microseconds from the index's creation to the cluster's last mark,
// shifted left 16, or'ed with the cluster's slot. One word is a single
// memory access per holder, and comparing words compares mark times, so
// finding the oldest holder or an expired one needs no unpacking.
// Microseconds in 48 bits last 8.9 years of uptime.
type holder uint64

func mkHolder(us int64, slot uint16) holder { return holder(uint64(us)<<16 | uint64(slot)) }

func (h holder) slot() uint16 { return uint16(h) }

// expiry is the smallest holder word still within the TTL at now (in
// microseconds): holders below it were last marked more than TTL ago.
func expiry(now, ttl int64) holder {
	if now <= ttl {
		return 0
	}
	return mkHolder(now-ttl, 0)
}

func (s *shard) init(limit, holdersPerNode int) {
	s.t.init(limit)
	s.head, s.tail, s.free = nilNode, nilNode, nilNode
	s.limit, s.h = limit, holdersPerNode
}

// mark makes h a holder of the node key, creating the node (evicting the
// least recently marked one when the shard is full) and making it the
// most recently marked.
func (s *shard) mark(key uint64, span int32, h, expired holder) {
	if _, i := s.t.find(key, s.nodes); i != nilNode {
		if i != s.head {
			s.unlink(i)
			s.pushFront(i)
		}
		s.addHolder(i, h, expired)
		return
	}
	i := s.alloc()
	s.nodes[i] = node{key: key, span: span}
	s.live++
	s.t.insert(key, i, s.live)
	s.blocks += int64(span)
	s.pushFront(i)
	s.addHolder(i, h, expired)
}

// addHolder refreshes h's cluster on node i, or adds it, replacing the
// holder marked longest ago when the node is full. Holders it finds
// expired on the way are dropped, so a node's holder count stays close
// to its live holders without a sweep visiting it.
func (s *shard) addHolder(i int32, h, expired holder) {
	nd := &s.nodes[i]
	base := int(i) * s.h
	hs := s.hold[base : base+int(nd.n)]
	found, oldest := false, -1
	for j := 0; j < len(hs); {
		switch {
		case hs[j].slot() == h.slot():
			hs[j], found = h, true
			j++
		case hs[j] < expired:
			hs[j] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
			s.holders--
			s.evicted[reasonTTL]++
		default:
			if oldest < 0 || hs[j] < hs[oldest] {
				oldest = j
			}
			j++
		}
	}
	nd.n = uint8(len(hs))
	switch {
	case found:
	case len(hs) < s.h:
		s.hold[base+len(hs)] = h
		nd.n++
		s.holders++
	default:
		hs[oldest] = h
		s.evicted[reasonHolderCap]++
	}
}

// newest is node i's most recent holder word.
func (s *shard) newest(i int32) holder {
	base := int(i) * s.h
	var m holder
	for _, h := range s.hold[base : base+int(s.nodes[i].n)] {
		m = max(m, h)
	}
	return m
}

// alloc returns a free node index: from the free list, from new arena
// room, or by evicting the tail.
func (s *shard) alloc() int32 {
	if s.free == nilNode && len(s.nodes) == s.limit {
		s.remove(s.tail, reasonCapacity)
	}
	if i := s.free; i != nilNode {
		s.free = s.nodes[i].next
		return i
	}
	s.grow()
	i := int32(len(s.nodes))
	s.nodes = s.nodes[:i+1]
	s.hold = s.hold[:len(s.hold)+s.h]
	return i
}

// grow makes room for one more node, doubling the arena but never past
// limit, so the arena's capacity (and the memory Stats reports) stays
// within the bound.
func (s *shard) grow() {
	if len(s.nodes) < cap(s.nodes) {
		return
	}
	c := min(max(2*cap(s.nodes), 64), s.limit)
	nodes := make([]node, len(s.nodes), c)
	copy(nodes, s.nodes)
	hold := make([]holder, len(s.hold), c*s.h)
	copy(hold, s.hold)
	s.nodes, s.hold = nodes, hold
}

// remove drops node i and its holders, counting them under r.
func (s *shard) remove(i int32, r reason) {
	nd := &s.nodes[i]
	s.evicted[r] += uint64(nd.n)
	s.holders -= int(nd.n)
	s.blocks -= int64(nd.span)
	s.live--
	p, _ := s.t.find(nd.key, s.nodes)
	s.t.deleteAt(p)
	s.unlink(i)
	*nd = node{next: s.free}
	s.free = i
}

// sweep removes nodes from the tail while their newest holder is expired.
// Every mark moves its node to the head, so the tail is the node marked
// longest ago and the first live one ends the pass: a sweep costs the
// nodes it frees, not the nodes the shard holds. A live node may still
// carry expired holders; Match ignores them and the node's next mark
// drops them.
func (s *shard) sweep(expired holder) {
	for s.tail != nilNode && s.newest(s.tail) < expired {
		s.remove(s.tail, reasonTTL)
	}
}

// dropSlot removes slot from every node, counting it under
// reasonClusterLeft, and removes the nodes left without a holder. It
// walks the LRU list, which links exactly the live nodes.
func (s *shard) dropSlot(slot uint16) {
	for i := s.head; i != nilNode; {
		next := s.nodes[i].next
		nd := &s.nodes[i]
		base := int(i) * s.h
		for j := base; j < base+int(nd.n); j++ {
			if s.hold[j].slot() == slot {
				s.hold[j] = s.hold[base+int(nd.n)-1]
				nd.n--
				s.holders--
				s.evicted[reasonClusterLeft]++
				break
			}
		}
		if nd.n == 0 {
			s.remove(i, reasonClusterLeft)
		}
		i = next
	}
}

func (s *shard) unlink(i int32) {
	nd := &s.nodes[i]
	if nd.prev != nilNode {
		s.nodes[nd.prev].next = nd.next
	} else {
		s.head = nd.next
	}
	if nd.next != nilNode {
		s.nodes[nd.next].prev = nd.prev
	} else {
		s.tail = nd.prev
	}
	nd.prev, nd.next = nilNode, nilNode
}

func (s *shard) pushFront(i int32) {
	nd := &s.nodes[i]
	nd.prev, nd.next = nilNode, s.head
	if s.head != nilNode {
		s.nodes[s.head].prev = i
	} else {
		s.tail = i
	}
	s.head = i
}

// bytes is the shard's storage: the arenas at their capacity and the
// table. None of them shrinks, so this is the shard's high-water mark.
func (s *shard) bytes() int64 {
	return int64(cap(s.nodes))*nodeBytes + int64(cap(s.hold))*holderBytes + int64(len(s.t.slots))*8
}
