package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/routepage"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
)

// sweepInterval is how often the prefix index forgets expired holders and
// departed clusters: a tenth of the TTL, so a holder outlives its TTL by
// at most a tenth, within [1 s, 1 min] so a short TTL does not spin and a
// long one still frees memory of departed clusters within a minute. Match
// already ignores an expired holder, and prefix-aware algorithms a holder
// outside the snapshot, so the sweep only returns memory.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), time.Minute)
}

// sweepPrefixes runs the index's sweep until ctx ends: expired holders go,
// and so do clusters no target lists any more (a departed cluster's slot
// is freed only after its marks are gone, so a new cluster never inherits
// them).
func sweepPrefixes(ctx context.Context, clk clock.Clock, x *prefixindex.Index, store *state.Store, every time.Duration) {
	for clock.Sleep(clk, ctx.Done(), every) {
		x.Sweep()
		live := map[string]bool{}
		store.ClusterGauges(func(g state.ClusterGauge) { live[g.ClusterID] = true })
		for _, id := range x.Clusters() {
			if !live[id] {
				x.RemoveCluster(id)
			}
		}
	}
}

// prefixCollector exports the prefix index's Stats at scrape time.
type prefixCollector struct {
	x                                        *prefixindex.Index
	maxBytes                                 float64
	nodes, holders, blocks, bytes, bound     *prometheus.Desc
	clusters, marks, lookups, dropped, evict *prometheus.Desc
}

func newPrefixCollector(prefix string, x *prefixindex.Index, cfg prefixindex.Config) *prefixCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+"prefix_index_"+name, help, labels, nil)
	}
	return &prefixCollector{x: x, maxBytes: float64(cfg.MaxBytes()),
		nodes:    d("nodes", "Prompt-prefix checkpoints the hub's prefix index stores."),
		holders:  d("holders", "Holder entries in the prefix index: one per copy of a checkpoint on a cluster."),
		blocks:   d("blocks", "Distinct prompt blocks the prefix index's checkpoints cover."),
		bytes:    d("bytes", "Approximate memory of the prefix index's stored checkpoints."),
		bound:    d("max_bytes", "Hard bound on the prefix index's checkpoint memory (--prefix-index-max-nodes, --prefix-index-max-holders)."),
		clusters: d("clusters", "Clusters holding a slot in the prefix index (marked since they last left)."),
		marks:    d("marks_total", "Answered requests whose serving cluster the prefix index recorded as a holder."),
		lookups:  d("lookups_total", "Prefix index lookups, by result: hit (some cluster holds a prefix of the prompt) or miss.", "result"),
		dropped:  d("dropped_marks_total", "Marks the prefix index ignored for want of a free cluster slot."),
		evict:    d("evictions_total", "Holder entries that left the prefix index, by reason: ttl, capacity, cluster_left, holder_cap.", "reason"),
	}
}

func (c *prefixCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.holders, c.blocks, c.bytes, c.bound, c.clusters, c.marks, c.lookups, c.dropped, c.evict} {
		ch <- d
	}
}

func (c *prefixCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.x.Stats()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	n := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(c.nodes, float64(st.Nodes))
	g(c.holders, float64(st.Holders))
	g(c.blocks, float64(st.Blocks))
	g(c.bytes, float64(st.Bytes))
	g(c.bound, c.maxBytes)
	g(c.clusters, float64(st.Clusters))
	n(c.marks, st.Marks)
	n(c.lookups, st.Hits, "hit")
	n(c.lookups, st.Matches-st.Hits, "miss")
	n(c.dropped, st.DroppedMarks)
	n(c.evict, st.Evictions.TTL, "ttl")
	n(c.evict, st.Evictions.Capacity, "capacity")
	n(c.evict, st.Evictions.ClusterLeft, "cluster_left")
	n(c.evict, st.Evictions.HolderCap, "holder_cap")
}

// prefixView returns the routing page's prefix numbers: the index's size
// and counters. The page counts prefix-aware routing as on once the index
// has looked up a prompt.
func prefixView(x *prefixindex.Index, maxBytes int64) func() routepage.Prefix {
	return func() routepage.Prefix {
		s := x.Stats()
		return routepage.Prefix{Enabled: s.Matches > 0 || s.Marks > 0, Index: routepage.PrefixIndex{
			Nodes: s.Nodes, Holders: s.Holders, Blocks: s.Blocks, Bytes: s.Bytes, MaxBytes: maxBytes,
			Clusters: s.Clusters, Marks: s.Marks, Lookups: s.Matches, Hits: s.Hits}}
	}
}
