package prefixindex

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// MaxMatchHolders bounds the clusters one Match reports: its scratch space
// lives on the stack so that a Match does not allocate. Far more clusters
// than serve one model; beyond it, further clusters are left out.
const MaxMatchHolders = 256

// Index is the hub's bounded memory of which clusters hold which prompt
// prefixes. It is safe for concurrent use. A nil *Index knows nothing:
// Match finds no holder and the other methods do nothing, so a hub with
// the feature off passes nil.
type Index struct {
	cfg   Config
	ttl   int64
	clk   clock.Clock
	base  time.Time
	slots *slotTable
	shard [shardCount]shard

	marks, dropped, matches, hits atomic.Uint64
}

// New returns an empty index, or the errors of cfg.Validate.
func New(cfg Config, clk clock.Clock) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x := &Index{cfg: cfg, ttl: cfg.TTL.Microseconds(), clk: clk, base: clk.Now(), slots: newSlotTable()}
	for i := range x.shard {
		x.shard[i].init(cfg.MaxNodes/shardCount, cfg.MaxHoldersPerNode)
	}
	return x, nil
}

// now is the time holders are stamped with, in microseconds: the clock's
// monotonic time since New, so a step of the wall clock never ages or
// revives a holder. It stops at the 48 bits a holder keeps.
func (x *Index) now() int64 {
	return min(max(x.clk.Since(x.base).Microseconds(), 0), 1<<48-1)
}

// plan is one summary's checkpoint keys, and their order of visit: grouped
// by shard so a call takes each shard's lock once, longest checkpoint
// first within a shard so a Mark leaves the shortest (the head shared by
// the most prompts) most recently used.
type plan struct {
	n     int
	keys  [prefixhash.MaxCheckpoints]uint64
	order [prefixhash.MaxCheckpoints]uint8
	start [shardCount + 1]uint8
}

func (p *plan) build(model string, s prefixhash.Summary) {
	seed := modelSeed(model, s)
	p.n = len(s.Hashes)
	var count [shardCount]uint8
	for i, h := range s.Hashes {
		p.keys[i] = nodeKey(seed, h)
		count[shardOf(p.keys[i])]++
	}
	p.start[0] = 0
	for sh := range shardCount {
		p.start[sh+1] = p.start[sh] + count[sh]
	}
	next := p.start
	for i := p.n - 1; i >= 0; i-- {
		sh := shardOf(p.keys[i])
		p.order[next[sh]] = uint8(i)
		next[sh]++
	}
}

// modelSeed keys a model's prefix tree apart from every other model's, and
// from summaries of another block size or hashing version, whose block
// counts and hashes mean something else.
func modelSeed(model string, s prefixhash.Summary) uint64 {
	return xxh3.HashString(model) ^ mix64(uint64(s.BlockTokens)<<32|uint64(uint32(s.Version)))
}

// nodeKey mixes a checkpoint hash with its model's seed. Mixing is a
// bijection, so two (model, hash) pairs share a key only if hash^seed
// collides, as likely as a 64-bit hash collision; it also spreads hashes
// a faulty caller sends (small integers) over every shard.
func nodeKey(seed, h uint64) uint64 { return mix64(h ^ seed) }

func shardOf(key uint64) int { return int(key >> (64 - shardBits)) }

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// usable reports whether s is a summary the index can store: at least one
// checkpoint, exactly as many as its TotalBlocks and Stride imply, and
// block counts that fit a node.
func usable(s prefixhash.Summary) bool {
	return len(s.Hashes) > 0 && len(s.Hashes) <= prefixhash.MaxCheckpoints &&
		s.BlockTokens > 0 && s.Stride > 0 && s.TotalBlocks <= 1<<31-1 &&
		len(s.Hashes) == prefixhash.Checkpoints(s.TotalBlocks, s.Stride)
}

// Mark records clusterID as holding every prefix s names, for model, as
// of now. The proxy calls it when the response headers of a request with
// this summary arrive from clusterID: the engine has then processed the
// prompt, so its cache holds it. Checkpoints already known are refreshed;
// unknown ones are created, evicting the least recently marked nodes when
// the index is full. A summary the index cannot use is ignored.
func (x *Index) Mark(model string, s prefixhash.Summary, clusterID string) {
	if x == nil || clusterID == "" || !usable(s) {
		return
	}
	slot, ok := x.rlockSlot(clusterID)
	if !ok {
		x.dropped.Add(1)
		return
	}
	defer x.slots.mu.RUnlock()
	x.marks.Add(1)
	var p plan
	p.build(model, s)
	now := x.now()
	h, expired := mkHolder(now, slot), expiry(now, x.ttl)
	for sh := range shardCount {
		lo, hi := p.start[sh], p.start[sh+1]
		if lo == hi {
			continue
		}
		d := &x.shard[sh]
		d.mu.Lock()
		for _, i := range p.order[lo:hi] {
			span := s.Blocks(int(i))
			if i > 0 {
				span -= s.Blocks(int(i) - 1)
			}
			d.mark(p.keys[i], int32(span), h, expired)
		}
		d.mu.Unlock()
	}
}

// rlockSlot read-locks the slot table with clusterID mapped, adding it if
// needed, and returns its slot; it reports false (unlocked) when no slot
// is free. It retries because a RemoveCluster may unmap the id between
// the add and the read lock; the third attempt gives up rather than spin
// against a cluster removed as fast as it marks.
func (x *Index) rlockSlot(clusterID string) (uint16, bool) {
	for range 3 {
		x.slots.mu.RLock()
		if slot, ok := x.slots.byID[clusterID]; ok {
			return slot, true
		}
		x.slots.mu.RUnlock()
		if !x.slots.add(clusterID) {
			return 0, false
		}
	}
	return 0, false
}

// found is one cluster a Match has seen so far.
type found struct {
	slot   uint16
	blocks int32
}

// Match appends to dst[:0] every cluster holding a prefix of the prompt s
// summarises, for model, with the longest prefix it holds, longest first
// and ties by ClusterID, and returns the result. A holder not marked
// within TTL counts as absent even before Sweep removes it. Match takes
// only read locks and does not allocate when dst has the capacity; it
// reports at most MaxMatchHolders clusters.
func (x *Index) Match(model string, s prefixhash.Summary, dst []routing.PrefixHolder) []routing.PrefixHolder {
	dst = dst[:0]
	if x == nil || !usable(s) {
		return dst
	}
	x.matches.Add(1)
	var p plan
	p.build(model, s)
	var seen [MaxMatchHolders]found
	n := 0
	expired := expiry(x.now(), x.ttl)
	x.slots.mu.RLock()
	defer x.slots.mu.RUnlock()
	for sh := range shardCount {
		lo, hi := p.start[sh], p.start[sh+1]
		if lo == hi {
			continue
		}
		d := &x.shard[sh]
		d.mu.RLock()
		for _, i := range p.order[lo:hi] {
			if _, idx := d.t.find(p.keys[i], d.nodes); idx != nilNode {
				n = d.collect(idx, int32(s.Blocks(int(i))), expired, seen[:], n)
			}
		}
		d.mu.RUnlock()
	}
	if n == 0 {
		return dst
	}
	x.hits.Add(1)
	for _, f := range seen[:n] {
		dst = append(dst, routing.PrefixHolder{ClusterID: x.slots.ids[f.slot], Blocks: int(f.blocks)})
	}
	slices.SortFunc(dst, func(a, b routing.PrefixHolder) int {
		if c := cmp.Compare(b.Blocks, a.Blocks); c != 0 {
			return c
		}
		return cmp.Compare(a.ClusterID, b.ClusterID)
	})
	return dst
}

// collect records, in seen[:n], each unexpired holder of node i as
// holding blocks, keeping each cluster's longest; it returns the new n.
func (s *shard) collect(i int32, blocks int32, expired holder, seen []found, n int) int {
	base := int(i) * s.h
	for _, h := range s.hold[base : base+int(s.nodes[i].n)] {
		if h < expired {
			continue
		}
		slot := h.slot()
		k := 0
		for k < n && seen[k].slot != slot {
			k++
		}
		switch {
		case k < n:
			seen[k].blocks = max(seen[k].blocks, blocks)
		case n < len(seen):
			seen[n] = found{slot: slot, blocks: blocks}
			n++
		}
	}
	return n
}

// RemoveCluster forgets clusterID. The owner calls it once the cluster
// has left: its holders would otherwise keep their slot and nodes until
// they age out, and a cluster that comes back may have lost its caches.
// It drops the cluster from every node (and the nodes left without a
// holder), then frees its slot, so a cluster that takes the slot later
// starts with nothing. A later Mark of the same id starts it afresh.
func (x *Index) RemoveCluster(clusterID string) {
	if x == nil {
		return
	}
	slot, ok := x.slots.unmap(clusterID)
	if !ok {
		return
	}
	for sh := range x.shard {
		d := &x.shard[sh]
		d.mu.Lock()
		d.dropSlot(slot)
		d.mu.Unlock()
	}
	x.slots.release(slot)
}

// Sweep frees the nodes whose every holder is older than TTL. Match
// already ignores expired holders, so Sweep only reclaims memory. It
// walks each shard from its least recently marked node and stops at the
// first live one, so it costs the nodes it frees; still, it takes each
// shard's write lock, so the owner calls it from a ticker, never on the
// request path (docs/design/prefix-index.md#expiry-and-sweep).
func (x *Index) Sweep() {
	if x == nil {
		return
	}
	expired := expiry(x.now(), x.ttl)
	for sh := range x.shard {
		d := &x.shard[sh]
		d.mu.Lock()
		d.sweep(expired)
		d.mu.Unlock()
	}
}

// Clusters returns the ids of the clusters the index can name (marked and
// not removed since), sorted. The owner compares them with the clusters
// it still routes to and removes the others: a cluster that left without
// anyone calling RemoveCluster would otherwise keep its slot and its
// nodes until they age out.
func (x *Index) Clusters() []string {
	if x == nil {
		return nil
	}
	x.slots.mu.RLock()
	ids := make([]string, 0, len(x.slots.byID))
	for id := range x.slots.byID {
		ids = append(ids, id)
	}
	x.slots.mu.RUnlock()
	slices.Sort(ids)
	return ids
}
