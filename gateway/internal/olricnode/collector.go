package olricnode

import (
	"context"
	"time"

	"github.com/olric-data/olric/stats"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the node's own Olric statistics on every scrape,
// unprefixed olric_* series named as upstream Stargate's gateway names
// them (counters ending in _total): one local Stats call, bounded so a wedged node cannot hang
// the scrape. The olric_storage_* gauges are ours, from the same call: the
// size of each DMap's storage on this node (its primary and backup
// partitions), so its memory can be watched and shown to be bounded.
type Collector struct {
	n *Node
}

// NewCollector returns the collector for n; register it on the binary's
// registry.
func NewCollector(n *Node) *Collector { return &Collector{n: n} }

var (
	descMembers   = prometheus.NewDesc("olric_cluster_members", "Members of the Olric cluster this node sees.", nil, nil)
	descUptime    = prometheus.NewDesc("olric_cluster_uptime_seconds", "Seconds since this Olric node started.", nil, nil)
	descEntries   = prometheus.NewDesc("olric_dmap_entries_total", "DMap entries (including replicas) stored on this node during its life.", nil, nil)
	descGetHits   = prometheus.NewDesc("olric_dmap_get_hits_total", "DMap gets that found their key on this node.", nil, nil)
	descGetMisses = prometheus.NewDesc("olric_dmap_get_misses_total", "DMap gets that found no key on this node.", nil, nil)
	descDelHits   = prometheus.NewDesc("olric_dmap_delete_hits_total", "DMap deletes that removed a key on this node.", nil, nil)
	descDelMisses = prometheus.NewDesc("olric_dmap_delete_misses_total", "DMap deletes of missing keys on this node.", nil, nil)
	descEvicted   = prometheus.NewDesc("olric_dmap_evicted_total", "DMap entries evicted on this node.", nil, nil)
	descCommands  = prometheus.NewDesc("olric_network_commands_total", "Commands this node served.", nil, nil)
	descConns     = prometheus.NewDesc("olric_network_current_connections", "Open connections to this node.", nil, nil)
	descPrimary   = prometheus.NewDesc("olric_partitions_primary_owned", "Partitions this node owns as primary.", nil, nil)
	descBackup    = prometheus.NewDesc("olric_partitions_backup_owned", "Partitions this node holds as backup.", nil, nil)

	dmapLabel     = []string{"dmap"}
	descStEntries = prometheus.NewDesc("olric_storage_entries", "Entries a DMap holds on this node, expired ones not yet evicted included.", dmapLabel, nil)
	descStTables  = prometheus.NewDesc("olric_storage_tables", "Storage tables a DMap holds on this node, recycled ones included.", dmapLabel, nil)
	descStAlloc   = prometheus.NewDesc("olric_storage_allocated_bytes", "Bytes of the storage tables a DMap holds on this node.", dmapLabel, nil)
	descStInuse   = prometheus.NewDesc("olric_storage_inuse_bytes", "Bytes of live entries in a DMap's tables on this node.", dmapLabel, nil)
	descStGarbage = prometheus.NewDesc("olric_storage_garbage_bytes", "Bytes of deleted or overwritten entries in a DMap's tables on this node, reclaimed by compaction.", dmapLabel, nil)
	storageDescs  = []*prometheus.Desc{descStEntries, descStTables, descStAlloc, descStInuse, descStGarbage}
)

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descUptime, descEntries, descGetHits, descGetMisses, descDelHits,
		descDelMisses, descEvicted, descCommands, descConns, descPrimary, descBackup} {
		ch <- d
	}
	for _, d := range storageDescs {
		ch <- d
	}
}

// Collect reads the node's stats; on error it exports nothing.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.n.embedded.Stats(ctx, c.n.self)
	if err != nil {
		return
	}
	g := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	k := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(descMembers, int64(len(st.ClusterMembers)))
	g(descUptime, st.UptimeSeconds)
	k(descEntries, st.DMaps.EntriesTotal)
	k(descGetHits, st.DMaps.GetHits)
	k(descGetMisses, st.DMaps.GetMisses)
	k(descDelHits, st.DMaps.DeleteHits)
	k(descDelMisses, st.DMaps.DeleteMisses)
	k(descEvicted, st.DMaps.EvictedTotal)
	k(descCommands, st.Network.CommandsTotal)
	g(descConns, st.Network.CurrentConnections)
	g(descPrimary, int64(len(st.Partitions)))
	g(descBackup, int64(len(st.Backups)))
	for name, s := range storageByDMap(st) {
		for d, v := range map[*prometheus.Desc]int{descStEntries: s.Length, descStTables: s.NumTables,
			descStAlloc: s.SlabInfo.Allocated, descStInuse: s.SlabInfo.Inuse, descStGarbage: s.SlabInfo.Garbage} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), name)
		}
	}
}

// storageByDMap sums each DMap's storage over the partitions this node
// holds, primary and backup.
func storageByDMap(st stats.Stats) map[string]stats.DMap {
	out := map[string]stats.DMap{}
	for _, parts := range []map[stats.PartitionID]stats.Partition{st.Partitions, st.Backups} {
		for _, p := range parts {
			for name, d := range p.DMaps {
				s := out[name]
				s.Length += d.Length
				s.NumTables += d.NumTables
				s.SlabInfo.Allocated += d.SlabInfo.Allocated
				s.SlabInfo.Inuse += d.SlabInfo.Inuse
				s.SlabInfo.Garbage += d.SlabInfo.Garbage
				out[name] = s
			}
		}
	}
	return out
}
