package sim

import (
	"math"
	"time"

	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// copySampleInterval is how often a run counts the copies of every cached
// block (virtual time). A count walks every engine's cache (65k blocks on
// the benchmark fleet), so it is sparse: per second it would take most of
// a long run's time, and the copies change slowly.
const copySampleInterval = 10 * time.Second

// PrefixResult is what content-prefix affinity did in one arm's run, and
// what it cost in cache space.
type PrefixResult struct {
	// Tiers counts the completed requests that carried a prompt summary by
	// the prefix tier of the decision that served them, as
	// stargate_prefix_routed_total would; all zero for an arm whose
	// algorithm does not read prefixes.
	Tiers PrefixTiers `json:"tiers"`
	// Index is the hub's prefix index at the end of the run; nil for an
	// arm whose algorithm does not read prefixes (its index stays empty).
	Index *IndexStats `json:"index,omitempty"`
	// Copies is how many clusters held each cached block.
	Copies BlockCopies `json:"copies_per_block"`
	// CacheTier is how far the index's word held up on the cache tier's
	// answered requests.
	CacheTier IndexHeld `json:"cache_tier"`
}

// IndexHeld compares, over a tier's answered requests, the prompt tokens
// the prefix index said the chosen cluster held when the request was
// routed with the tokens of those the engine that ran it found cached.
// The difference is cache the index cannot see: the cluster's pylon sent
// the request to another engine than the one holding the prompt, or the
// engine evicted it, or the prompt's first request was still in
// prefill. It is only the simulator's view; the hub sees none of it.
type IndexHeld struct {
	// HeldTokens is the prompt tokens the index said the chosen
	// clusters held, summed.
	HeldTokens int64 `json:"held_tokens"`
	// FoundTokens is how many of those the engines found cached.
	FoundTokens int64 `json:"found_tokens"`
}

// add counts one answered request: held tokens by the index, cached by
// its engine.
func (x *IndexHeld) add(held, cached int) {
	x.HeldTokens += int64(held)
	x.FoundTokens += int64(min(held, cached))
}

// heldTokens is the prompt tokens the index said cluster held when req was
// routed (a returning session's last cluster that the index does not
// name counts 0).
func heldTokens(req *routing.Request, cluster string) int {
	m := &req.Prefix
	held := m.HeldBlocks(cluster) * max(m.BlockTokens, 0)
	return min(held, int(min(req.InputTokens, uint64(math.MaxInt)))) //nolint:gosec // clamped to MaxInt
}

// PrefixTiers counts decisions by routing.PrefixTier.
type PrefixTiers struct {
	Cache    int `json:"cache"`
	Split    int `json:"split"`
	Overflow int `json:"overflow"`
	Load     int `json:"load"`
}

// count adds one decision of tier t; PrefixTierNone counts nowhere.
func (p *PrefixTiers) count(t routing.PrefixTier) {
	switch t {
	case routing.PrefixTierCache:
		p.Cache++
	case routing.PrefixTierSplit:
		p.Split++
	case routing.PrefixTierOverflow:
		p.Overflow++
	case routing.PrefixTierLoad:
		p.Load++
	}
}

// byName is the counts under their metric label values.
func (p PrefixTiers) byName() map[string]int {
	return map[string]int{"cache": p.Cache, "split": p.Split, "overflow": p.Overflow, "load": p.Load}
}

// IndexStats is prefixindex.Stats under the names of the hub's
// stargate_prefix_index_* metrics.
type IndexStats struct {
	Nodes   int    `json:"nodes"`
	Holders int    `json:"holders"`
	Blocks  int64  `json:"blocks"`
	Bytes   int64  `json:"bytes"`
	Marks   uint64 `json:"marks"`
	Lookups uint64 `json:"lookups"`
	Hits    uint64 `json:"hits"`
	// Evicted counts holder entries that left the index (TTL, capacity
	// and holder cap together; clusters never leave a simulated fleet).
	Evicted uint64 `json:"evicted"`
}

func indexStats(st prefixindex.Stats) *IndexStats {
	ev := st.Evictions
	return &IndexStats{Nodes: st.Nodes, Holders: st.Holders, Blocks: st.Blocks, Bytes: st.Bytes, Marks: st.Marks,
		Lookups: st.Matches, Hits: st.Hits, Evicted: ev.TTL + ev.Capacity + ev.ClusterLeft + ev.HolderCap}
}

// BlockCopies is how many copies of each cached prompt block the fleet
// keeps: for every distinct block held by any engine (a chain hash, which
// names the block's whole prefix), the number of clusters, and of
// engines, holding it. A copy on a second cluster is what a prefix-aware
// router spends to spread a hot prefix's load, and cache space another
// prefix cannot use.
type BlockCopies struct {
	// Clusters and Engines are the mean copies per block over the samples
	// taken every 10 s of virtual time while requests ran (a sample with
	// no cached block counts nowhere): each sample is the sum over
	// clusters (engines) of the distinct blocks each holds, over the
	// distinct blocks the fleet holds.
	Clusters float64 `json:"clusters"`
	Engines  float64 `json:"engines"`
	// EndClusters and EndEngines are the same ratios at the end of the
	// run, when every request has finished and the caches hold what the
	// run left behind.
	EndClusters float64 `json:"end_clusters"`
	EndEngines  float64 `json:"end_engines"`
	// Samples is the number of samples averaged.
	Samples int `json:"samples"`
}

// copySampler accumulates BlockCopies samples.
type copySampler struct {
	samples                 int
	sumClusters, sumEngines float64
	set                     blockSet
	// buf is scratch for one engine's hashes.
	buf []uint64
}

// sample counts the copies of every block cached in clusters now and adds
// the sample to the mean.
func (s *copySampler) sample(clusters []*simCluster) {
	c, e, ok := s.count(clusters)
	if !ok {
		return
	}
	s.samples++
	s.sumClusters += c
	s.sumEngines += e
}

// count returns the copies per block across clusters and across engines;
// ok is false when no engine caches anything.
func (s *copySampler) count(clusters []*simCluster) (perCluster, perEngine float64, ok bool) {
	total := 0
	for _, c := range clusters {
		for _, e := range c.engines {
			total += int(e.kv.Stats().Blocks)
		}
	}
	if total == 0 {
		return 0, 0, false
	}
	s.set.reset(total)
	for ci, c := range clusters {
		for _, e := range c.engines {
			s.buf = e.kv.AppendBlockHashes(s.buf[:0])
			for _, h := range s.buf {
				s.set.add(h, int32(ci))
			}
		}
	}
	n := float64(s.set.distinct)
	return float64(s.set.clusterCopies) / n, float64(total) / n, true
}

// blockSet counts distinct block hashes, and distinct (block, cluster)
// pairs when each cluster's blocks are added together: an open-addressing
// table indexed by the hash's low bits (chain hashes are uniform) whose
// slots are emptied by bumping a generation, so a sample neither clears
// nor allocates once the table has grown to the fleet's cache size.
type blockSet struct {
	slots                   []blockSlot
	gen                     uint32
	distinct, clusterCopies int
}

type blockSlot struct {
	hash uint64
	gen  uint32
	// cluster is the last cluster counted as holding the block.
	cluster int32
}

// reset empties the set for n blocks at most.
func (b *blockSet) reset(n int) {
	b.gen++
	b.distinct, b.clusterCopies = 0, 0
	if len(b.slots) >= 2*n && b.gen != 0 {
		return
	}
	size := 1
	for size < 2*n {
		size *= 2
	}
	b.slots, b.gen = make([]blockSlot, size), 1
}

// add counts block h held by cluster ci; a cluster's blocks come together.
func (b *blockSet) add(h uint64, ci int32) {
	mask := uint64(len(b.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &b.slots[i]
		switch {
		case sl.gen != b.gen:
			*sl = blockSlot{hash: h, gen: b.gen, cluster: ci}
			b.distinct++
			b.clusterCopies++
			return
		case sl.hash == h:
			if sl.cluster != ci {
				sl.cluster = ci
				b.clusterCopies++
			}
			return
		}
	}
}

// result is the mean of the samples and the copies now.
func (s *copySampler) result(clusters []*simCluster) BlockCopies {
	out := BlockCopies{Samples: s.samples}
	if s.samples > 0 {
		out.Clusters, out.Engines = round3(s.sumClusters/float64(s.samples)), round3(s.sumEngines/float64(s.samples))
	}
	if c, e, ok := s.count(clusters); ok {
		out.EndClusters, out.EndEngines = round3(c), round3(e)
	}
	return out
}
