package lbreload

import (
	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics registers lb_config_reloads_total (every result at 0)
// and the collector of the gauges, which reads the active generation at
// scrape time so a scrape never sees half of a swap.
func (r *Reloader) registerMetrics() error {
	p := r.opts.MetricsPrefix
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: p + "lb_config_reloads_total",
		Help: "lb-config reloads (SIGHUP or file watch) by result: applied (new content active), rejected (unreadable or invalid; the previous config keeps serving), unchanged (same content as the active or the last rejected one).",
	}, []string{"result"})
	for _, res := range results {
		r.reloads.WithLabelValues(string(res))
	}
	c := &collector{r: r,
		info: prometheus.NewDesc(p+"lb_config_info",
			"The active lb-config: 1 per configured algorithm, model=\"\" for the default and one series per models entry; hash is the first 12 hex digits of the file's SHA-256 (\"\" without --lb-config-path).",
			[]string{"hash", "model", "algorithm"}, nil),
		loaded: prometheus.NewDesc(p+"lb_config_last_reload_success_timestamp_seconds",
			"Unix time the active lb-config became active (at startup or by its reload).", nil, nil),
		ok: prometheus.NewDesc(p+"lb_config_last_reload_successful",
			"1 unless the latest lb-config reload was rejected (the active config is then older than the file).", nil, nil),
	}
	if r.opts.Registerer == nil {
		return nil
	}
	for _, col := range []prometheus.Collector{r.reloads, c} {
		if err := r.opts.Registerer.Register(col); err != nil {
			return err
		}
	}
	return nil
}

type collector struct {
	r                *Reloader
	info, loaded, ok *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.loaded
	ch <- c.ok
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gen := c.r.Current()
	sum := gen.Config.Summary()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, gen.Hash, "", sum.DefaultLB)
	for model, alg := range gen.Config.ModelAlgorithms() {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, gen.Hash, model, alg)
	}
	ch <- prometheus.MustNewConstMetric(c.loaded, prometheus.GaugeValue, float64(gen.LoadedAt.UnixNano())/1e9)
	c.r.mu.Lock()
	ok := c.r.lastOK
	c.r.mu.Unlock()
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, v)
}
