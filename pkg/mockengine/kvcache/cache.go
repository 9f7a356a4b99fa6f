package kvcache

import (
	"fmt"
	"sync"
)

// block is one cached block. Blocks form a forest through parent; a block is
// reachable only while its whole ancestor chain is stored, which eviction
// preserves by only ever removing leaves.
type block struct {
	hash     uint64
	parent   *block // nil for a first block
	children int32  // stored blocks whose parent is this one
	pins     int32  // leases holding this block

	// prev and next link the block into the evictable list while it is an
	// unpinned leaf; both are nil otherwise. next also chains the free list.
	prev, next *block
}

// Eviction counts what one Commit evicted to make room, for the
// x-kv-cache-evicted-entries and x-kv-cache-evicted-tokens response headers.
type Eviction struct {
	// Blocks is the number of blocks evicted.
	Blocks int
	// Tokens is Blocks times BlockTokens.
	Tokens int64
}

// Stats is a snapshot of the cache's size and counters since New or Reset.
type Stats struct {
	// CapacityTokens is the configured bound; UsedTokens never exceeds it.
	CapacityTokens int64
	// UsedTokens is Blocks times BlockTokens.
	UsedTokens int64
	// Blocks is the number of stored blocks (cache entries).
	Blocks int64
	// PinnedBlocks counts stored blocks held by at least one open lease;
	// it returns to 0 once every lease is released.
	PinnedBlocks int64
	// HitCount counts lookups that found at least one block; MissCount the
	// rest, including every lookup while caching is disabled.
	HitCount  int64
	MissCount int64
	// QueryTokens sums the prompt tokens looked up and HitTokens the cached
	// tokens found, so HitTokens/QueryTokens is the token hit rate.
	QueryTokens int64
	HitTokens   int64
	// EvictedBlocks and EvictedTokens count LRU evictions.
	EvictedBlocks int64
	EvictedTokens int64
	// RejectedBlocks counts full blocks that were not stored because
	// everything evictable was pinned, including the output blocks of a
	// request whose prompt could not be stored completely.
	RejectedBlocks int64
}

// Cache is a content-addressed prefix cache with vLLM's semantics. It is safe
// for concurrent use; one mutex guards everything because every operation is
// a short walk over one request's blocks.
type Cache struct {
	cfg     Config
	geom    geometry
	enabled bool

	mu     sync.Mutex
	gen    uint64 // bumped by Reset so leases from before it become no-ops
	blocks map[uint64]*block
	// lru is the sentinel of the circular list of unpinned leaves: lru.next
	// is the most recently used, lru.prev the next to evict. Interior and
	// pinned blocks stay off the list, so eviction never scans past them.
	lru   block
	free  *block // evicted blocks kept for reuse, chained through next
	stats Stats
}

// New returns an empty cache. Zero BlockTokens and CharsPerToken take their
// defaults; any other invalid field is an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Cache, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new kv cache: %w", err)
	}
	c := &Cache{
		cfg:     cfg,
		geom:    newGeometry(cfg),
		enabled: cfg.CapacityTokens > 0,
		blocks:  make(map[uint64]*block),
	}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.stats.CapacityTokens = cfg.CapacityTokens
	return c, nil
}

// Config returns the configuration in effect, defaults applied.
func (c *Cache) Config() Config { return c.cfg }

// NewSequence cuts content into blocks using this cache's geometry. It runs
// without the lock, so callers should build sequences outside any critical
// section of their own: hashing dominates the cost of a lookup.
func (c *Cache) NewSequence(content []byte) Sequence { return newSequence(c.geom, content) }

// Lookup finds the longest cached prefix of seq's full blocks, pins it for the
// lifetime of the returned lease and counts the query in Stats. The lease is
// never nil. It panics if seq was built for a different geometry, because
// such a lookup would silently never hit.
func (c *Cache) Lookup(seq Sequence) *Lease {
	if seq.geom != c.geom {
		panic("kvcache: Lookup with a Sequence built for a different Config")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &Lease{c: c, seq: seq, gen: c.gen}
	for _, h := range seq.hashes {
		b, ok := c.blocks[h]
		// The parent check turns a 64-bit hash collision into a miss
		// instead of a wrong hit.
		if !ok || b.parent != l.tip {
			break
		}
		c.pin(b)
		l.tip = b
		l.depth++
	}
	l.matched = l.depth
	cached := int64(l.matched * c.cfg.BlockTokens)
	c.stats.QueryTokens += int64(seq.tokens)
	c.stats.HitTokens += cached
	if cached > 0 {
		c.stats.HitCount++
	} else {
		c.stats.MissCount++
	}
	return l
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// AppendBlockHashes appends the chain hash of every stored block to dst, in
// no particular order, and returns it. A chain hash names its block's
// whole prefix, so comparing the sets of two caches tells how many of
// them hold the same prefix block: the routing simulator counts copies of
// a block across clusters this way. It changes nothing, not even the LRU
// order.
func (c *Cache) AppendBlockHashes(dst []uint64) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.blocks {
		dst = append(dst, h)
	}
	return dst
}

// Reset drops every block and zeroes the counters. Leases taken before it
// stay safe to use but do nothing, so a test can reset between runs while
// requests are still in flight.
func (c *Cache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.blocks)
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.free = nil
	c.stats = Stats{CapacityTokens: c.cfg.CapacityTokens}
}

// Lease is one request's hold on the cache, from Lookup to Release. Leases
// come only from Lookup; their methods are safe to call concurrently and on a
// nil *Lease.
type Lease struct {
	c   *Cache
	seq Sequence
	gen uint64

	// tip is the deepest block this lease pins; the lease pins exactly the
	// depth blocks on the path from a first block down to tip, so tracking
	// the tip is enough to release them without a per-block slice.
	tip     *block
	depth   int
	matched int // depth after Lookup; never changes afterwards

	committed bool
	released  bool
}

// CachedTokens is the number of prompt tokens found in the cache at Lookup:
// whole matched blocks only, so it never exceeds the sequence's Tokens.
func (l *Lease) CachedTokens() int {
	if l == nil {
		return 0
	}
	return l.matched * l.seq.geom.blockTokens
}

// Commit publishes the prompt's remaining full blocks once the modelled
// prefill is done, which is the earliest point a real engine could share
// them: two identical requests in flight together therefore both miss. Blocks
// another request inserted meanwhile are reused, and everything is pinned
// until Release. If nothing evictable is left, insertion stops and the stored
// prefix stays valid. Commit reports what it evicted; calls after the first,
// after Release or after Reset do nothing.
func (l *Lease) Commit() Eviction {
	if l == nil || l.c == nil {
		return Eviction{}
	}
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.committed || l.released || l.gen != c.gen || !c.enabled {
		return Eviction{}
	}
	l.committed = true
	before := c.stats.EvictedBlocks
	hashes := l.seq.hashes
	for i := l.depth; i < len(hashes); i++ {
		b := c.insert(l.tip, hashes[i], true)
		if b == nil {
			c.stats.RejectedBlocks += int64(len(hashes) - i)
			break
		}
		l.tip = b
		l.depth++
	}
	n := int(c.stats.EvictedBlocks - before)
	return Eviction{Blocks: n, Tokens: int64(n * c.cfg.BlockTokens)}
}

// Release ends the lease: it unpins every block exactly once and, if the
// prompt was committed in full, stores the full blocks of prompt||output as
// the most recently used, so the next turn that re-sends output hits them.
// Pass nil output for a failed request and the partial output for a
// cancelled one. Later calls do nothing.
func (l *Lease) Release(output []byte) {
	if l == nil || l.c == nil {
		return
	}
	c := l.c
	var outHashes []uint64
	if len(output) > 0 && c.enabled {
		// Hash before taking the lock; the lease's sequence is immutable.
		g := l.seq.geom
		outHashes, _ = appendBlocks(g, make([]uint64, 0, (len(l.seq.tail)+len(output))/g.blockBytes), l.seq.lastHash(), l.seq.tail, output)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.released {
		return
	}
	l.released = true
	if l.gen != c.gen {
		return
	}
	if l.committed && len(outHashes) > 0 {
		if l.depth < len(l.seq.hashes) {
			c.stats.RejectedBlocks += int64(len(outHashes))
		} else {
			// Insert while the prompt chain is still pinned so making room
			// for the output can never evict the chain it hangs from.
			parent := l.tip
			for i, h := range outHashes {
				b := c.insert(parent, h, false)
				if b == nil {
					c.stats.RejectedBlocks += int64(len(outHashes) - i)
					break
				}
				parent = b
			}
		}
	}
	for b := l.tip; b != nil; b = b.parent {
		c.unpin(b)
	}
	l.tip, l.depth = nil, 0
}

// insert returns the stored child of parent (nil for a first block) with hash
// h, storing it if needed, or nil if no room can be made. A new block is
// pinned when pin is set and otherwise becomes the most recently used leaf;
// an existing one is pinned or refreshed the same way. Callers hold c.mu.
func (c *Cache) insert(parent *block, h uint64, pin bool) *block {
	if b, ok := c.blocks[h]; ok {
		if b.parent != parent {
			return nil // hash collision: storing it would corrupt the chain
		}
		if pin {
			c.pin(b)
		} else if b.next != nil {
			c.listRemove(b)
			c.pushFront(b)
		}
		return b
	}
	// Hold parent while evicting: it may be an unpinned leaf, or become one
	// when a sibling is evicted, and must not be evicted from under us.
	if parent != nil {
		c.pin(parent)
	}
	bt := int64(c.cfg.BlockTokens)
	ok := true
	for c.stats.UsedTokens+bt > c.cfg.CapacityTokens {
		if !c.evictOne() {
			ok = false
			break
		}
	}
	var b *block
	if ok {
		b = c.alloc()
		b.hash, b.parent = h, parent
		c.blocks[h] = b
		c.stats.Blocks++
		c.stats.UsedTokens += bt
		if parent != nil {
			parent.children++
		}
		if pin {
			c.pin(b)
		} else {
			c.pushFront(b)
		}
	}
	if parent != nil {
		c.unpin(parent)
	}
	return b
}

// evictOne evicts the least recently used unpinned leaf and reports whether
// there was one. A parent left childless goes to the evict-next end: a prefix
// nobody extends any more is not fresh just because its child was.
func (c *Cache) evictOne() bool {
	v := c.lru.prev
	if v == &c.lru {
		return false
	}
	c.listRemove(v)
	delete(c.blocks, v.hash)
	bt := int64(c.cfg.BlockTokens)
	c.stats.Blocks--
	c.stats.UsedTokens -= bt
	c.stats.EvictedBlocks++
	c.stats.EvictedTokens += bt
	if p := v.parent; p != nil {
		p.children--
		if p.children == 0 && p.pins == 0 {
			c.pushBack(p)
		}
	}
	*v = block{next: c.free}
	c.free = v
	return true
}

func (c *Cache) alloc() *block {
	if b := c.free; b != nil {
		c.free = b.next
		b.next = nil
		return b
	}
	return &block{}
}

func (c *Cache) pin(b *block) {
	if b.pins == 0 {
		c.stats.PinnedBlocks++
		if b.next != nil {
			c.listRemove(b)
		}
	}
	b.pins++
}

// unpin drops one pin; a block left unpinned and childless has just been
// used, so it becomes the most recently used evictable leaf.
func (c *Cache) unpin(b *block) {
	b.pins--
	if b.pins == 0 {
		c.stats.PinnedBlocks--
		if b.children == 0 {
			c.pushFront(b)
		}
	}
}

func (c *Cache) pushFront(b *block) {
	b.prev, b.next = &c.lru, c.lru.next
	c.lru.next.prev = b
	c.lru.next = b
}

func (c *Cache) pushBack(b *block) {
	b.prev, b.next = c.lru.prev, &c.lru
	c.lru.prev.next = b
	c.lru.prev = b
}

func (c *Cache) listRemove(b *block) {
	b.prev.next = b.next
	b.next.prev = b.prev
	b.prev, b.next = nil, nil
}
