package state

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the store's per-cluster view at scrape time, so the
// request path pays nothing for it: the walk happens once per scrape.
type collector struct {
	s                           *Store
	rtt, reservations, reserved *prometheus.Desc
	refused                     *prometheus.Desc
}

// Collector returns the store's scrape-time series under prefix
// (stargate_ by default): per routing target and cluster, the mean tunnel
// RTT the load balancers see, and the hub's pending reservations (requests
// sent that the backends' statistics do not show yet) with their input
// tokens, and the backends marked full by a queue refusal until their next
// registration. Clusters that leave a target leave the output with it.
func (s *Store) Collector(prefix string) prometheus.Collector {
	labels := []string{"routing_key", "model", "cluster_id"}
	return &collector{
		s: s,
		rtt: prometheus.NewDesc(prefix+"cluster_rtt_seconds",
			"Mean tunnel round trip of a cluster's backends, as the load balancers see it.", labels, nil),
		reservations: prometheus.NewDesc(prefix+"cluster_pending_reservations",
			"Requests sent to a cluster that its backends' statistics do not show yet.", labels, nil),
		reserved: prometheus.NewDesc(prefix+"cluster_reserved_input_tokens",
			"Input tokens of the cluster's pending reservations, added to its queued input for routing.", labels, nil),
		refused: prometheus.NewDesc(prefix+"cluster_refused_backends",
			"Backends of a cluster marked full by a queue_estimate_mismatch refusal until their next registration.", labels, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rtt
	ch <- c.reservations
	ch <- c.reserved
	ch <- c.refused
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	// Gather under the lock, send after: a slow scrape consumer must not
	// hold the writer lock the tunnels need.
	var gauges []ClusterGauge
	c.s.ClusterGauges(func(g ClusterGauge) { gauges = append(gauges, g) })
	for _, g := range gauges {
		lv := []string{g.Target.RoutingKey, g.Target.Model, g.ClusterID}
		ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, g.RTT.Seconds(), lv...)
		ch <- prometheus.MustNewConstMetric(c.reservations, prometheus.GaugeValue, float64(g.Reservations), lv...)
		ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, float64(g.ReservedTokens), lv...)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(g.RefusedBackends), lv...)
	}
}
