package prefixindex

// Stats is a point-in-time account of the index, for metrics and the
// debug endpoint. Shards are read one after the other, so the totals of a
// busy index are a consistent view of each shard, not of the whole.
type Stats struct {
	// Nodes is the checkpoint nodes stored.
	Nodes int `json:"nodes"`
	// Holders is the holder entries stored: one per copy of a prefix
	// checkpoint on one cluster.
	Holders int `json:"holders"`
	// Blocks is the distinct prompt blocks the nodes name: each node
	// counts the blocks it adds to the checkpoint before it.
	Blocks int64 `json:"blocks"`
	// Bytes is the approximate memory of the stored nodes, at most
	// Config.MaxBytes.
	Bytes int64 `json:"bytes"`
	// Clusters is the clusters that have a slot (marked and not removed).
	Clusters int `json:"clusters"`
	// Marks and Matches count the calls that used a summary; Hits counts
	// the Matches that found at least one holder.
	Marks   uint64 `json:"marks"`
	Matches uint64 `json:"lookups"`
	Hits    uint64 `json:"hits"`
	// DroppedMarks counts the Marks ignored because no cluster slot was
	// free (65536 clusters marked and not removed), or because their
	// cluster was removed again each time they tried to take one.
	DroppedMarks uint64 `json:"dropped_marks"`
	// Evictions counts the holder entries that left the index, by
	// reason.
	Evictions Evictions `json:"evictions"`
}

// Evictions counts holder entries removed, by reason.
type Evictions struct {
	// TTL: not re-marked within Config.TTL, freed by Sweep.
	TTL uint64 `json:"ttl"`
	// Capacity: their node was the least recently marked of a full shard.
	Capacity uint64 `json:"capacity"`
	// ClusterLeft: removed with their cluster by RemoveCluster.
	ClusterLeft uint64 `json:"cluster_left"`
	// HolderCap: replaced by a newer holder on a node that already had
	// Config.MaxHoldersPerNode.
	HolderCap uint64 `json:"holder_cap"`
}

// Stats returns the current counts. It takes each shard's read lock in
// turn and does not walk the nodes.
func (x *Index) Stats() Stats {
	if x == nil {
		return Stats{}
	}
	st := Stats{
		Clusters:     x.slots.mapped(),
		Marks:        x.marks.Load(),
		DroppedMarks: x.dropped.Load(),
		Matches:      x.matches.Load(),
		Hits:         x.hits.Load(),
	}
	for i := range x.shard {
		d := &x.shard[i]
		d.mu.RLock()
		st.Nodes += d.live
		st.Holders += d.holders
		st.Blocks += d.blocks
		st.Bytes += d.bytes()
		st.Evictions.TTL += d.evicted[reasonTTL]
		st.Evictions.Capacity += d.evicted[reasonCapacity]
		st.Evictions.ClusterLeft += d.evicted[reasonClusterLeft]
		st.Evictions.HolderCap += d.evicted[reasonHolderCap]
		d.mu.RUnlock()
	}
	return st
}
