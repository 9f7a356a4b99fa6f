package stats

import (
	"errors"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// metrics holds the engine-stats event counters (listed in docs/metrics.md).
// The per-model and per-request gauges are computed at scrape time by
// snapshotCollector, so a retired model's series disappear with it. A nil
// *metrics records nothing.
type metrics struct {
	// statsEvents and pings are events' two series, resolved once: the
	// engine sends an event per token, and a label lookup hashes the
	// label each time.
	statsEvents, pings prometheus.Counter

	events      *prometheus.CounterVec
	invalid     *prometheus.CounterVec
	reconnects  *prometheus.CounterVec
	connectedG  *prometheus.GaugeVec
	stale       *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, c *Collector) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylon_engine_stats_stream_events_total",
			Help: "Valid engine stats stream events, by type (stats, ping).",
		}, []string{"type"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylon_engine_stats_stream_invalid_events_total",
			Help: "Engine stats events dropped, by reason (validation, line size, regressing or late counters, unattributed ids).",
		}, []string{"reason"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylon_engine_stats_stream_reconnects_total",
			Help: "Engine stats stream reconnects, by the reason the previous attempt ended.",
		}, []string{"reason"}),
		connectedG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pylon_engine_stats_stream_connected",
			Help: "Engines whose stats stream is connected (1 while it is, with one engine), by --engine-stats-stream mode.",
		}, []string{"mode"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylon_engine_stats_stale_cleanups_total",
			Help: "Stale cleanups: kind=request finalizes a request without events for 300 s, kind=stats clears a model's output-TPS window after 30 s.",
		}, []string{"kind", "source"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylon_engine_stats_source_transitions_total",
			Help: "Throughput source switches, e.g. engine_stats_stream to openai_fallback when the stream is unsupported.",
		}, []string{"from", "to", "reason"}),
	}
	for _, r := range invalidReasons {
		m.invalid.WithLabelValues(r)
	}
	for _, r := range reconnectReasons {
		m.reconnects.WithLabelValues(r)
	}
	m.statsEvents, m.pings = m.events.WithLabelValues("stats"), m.events.WithLabelValues("ping")
	if c.cfg.StreamMode != ModeOff {
		m.connectedG.WithLabelValues(c.cfg.StreamMode).Set(0)
	}
	for _, col := range []prometheus.Collector{
		m.events, m.invalid, m.reconnects, m.connectedG, m.stale, m.transitions,
		&snapshotCollector{c: c},
	} {
		if err := reg.Register(col); err != nil {
			return nil, errors.Join(errors.New("stats: registering metrics"), err)
		}
	}
	return m, nil
}

func (m *metrics) event(typ string) {
	switch {
	case m == nil:
	case typ == "stats":
		m.statsEvents.Inc()
	case typ == "ping":
		m.pings.Inc()
	default:
		m.events.WithLabelValues(typ).Inc()
	}
}

func (m *metrics) invalidEvent(reason string) {
	if m != nil {
		m.invalid.WithLabelValues(reason).Inc()
	}
}

func (m *metrics) reconnect(reason string) {
	if m != nil {
		m.reconnects.WithLabelValues(reason).Inc()
	}
}

// connected counts an engine stats stream opening (up) or closing: the
// gauge is the number of engines whose stream is open (0 or 1 with one
// engine).
func (m *metrics) connected(mode string, up bool) {
	if m == nil {
		return
	}
	v := -1.0
	if up {
		v = 1
	}
	m.connectedG.WithLabelValues(mode).Add(v)
}

func (m *metrics) staleCleanup(kind string, source throughputSource) {
	if m != nil {
		m.stale.WithLabelValues(kind, string(source)).Inc()
	}
}

func (m *metrics) sourceTransition(from, to throughputSource, reason string) {
	if m != nil {
		m.transitions.WithLabelValues(string(from), string(to), reason).Inc()
	}
}

// Descriptors of the scrape-time gauges.
var (
	descLiveRequests = prometheus.NewDesc("pylon_engine_stats_live_requests",
		"Requests with live throughput counters, by source.", []string{"source"}, nil)
	descModelGauges = []struct {
		desc  *prometheus.Desc
		value func(*protocol.ModelStats) float64
	}{
		{modelDesc("output_tps", "Published output_tps (tokens/s)."), func(s *protocol.ModelStats) float64 { return s.OutputTPS }},
		{modelDesc("last_mean_input_tps", "Published last_mean_input_tps (tokens/s)."), func(s *protocol.ModelStats) float64 { return s.LastMeanInputTPS }},
		{modelDesc("max_output_tps", "Published max_output_tps (tokens/s)."), func(s *protocol.ModelStats) float64 { return s.MaxOutputTPS }},
		{modelDesc("queue_size", "Requests in Pending or InputProcessing."), func(s *protocol.ModelStats) float64 { return float64(s.QueueSize) }},
		{modelDesc("queued_input_tokens", "Input tokens of Pending and InputProcessing requests."), func(s *protocol.ModelStats) float64 { return float64(s.QueuedInputSize) }},
		{modelDesc("kv_cache_capacity_tokens", "KV-cache capacity from the last successful poll."), func(s *protocol.ModelStats) float64 { return float64(s.KVCacheCapacityTokens) }},
		{modelDesc("kv_cache_used_tokens", "KV-cache used tokens from the last successful poll."), func(s *protocol.ModelStats) float64 { return float64(s.KVCacheUsedTokens) }},
		{modelDesc("kv_cache_free_tokens", "KV-cache free tokens from the last successful poll."), func(s *protocol.ModelStats) float64 { return float64(s.KVCacheFreeTokens) }},
	}
	descCapability = prometheus.NewDesc("pylon_model_stats_capability",
		"1 when the sticky stats capability label is published for the model.", []string{"model", "capability"}, nil)
	descSource = prometheus.NewDesc("pylon_model_stats_source",
		"1 when the sticky stats source label is published for the model.", []string{"model", "source"}, nil)
	descInflight = prometheus.NewDesc("pylon_requests_inflight",
		"Observed requests in flight.", []string{"model"}, nil)
	descState = prometheus.NewDesc("pylon_requests_state",
		"Observed requests in flight, by lifecycle state.", []string{"model", "state"}, nil)
	descStateTokens = prometheus.NewDesc("pylon_requests_state_input_tokens",
		"Input tokens of observed requests in flight, by lifecycle state.", []string{"model", "state"}, nil)
)

func modelDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("pylon_model_"+name, help, []string{"model"}, nil)
}

var labelPairs = []struct{ capability, source string }{
	{protocol.CapabilityChunkUsage, protocol.SourceChunkUsage},
	{protocol.CapabilityEngineStream, protocol.SourceEngineStatsStream},
	{protocol.CapabilityKVCacheHTTP, protocol.SourceKVCacheStats},
}

// snapshotCollector exports the model and request gauges from the current
// state at scrape time.
type snapshotCollector struct{ c *Collector }

var _ prometheus.Collector = (*snapshotCollector)(nil)

func (s *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLiveRequests
	for _, g := range descModelGauges {
		ch <- g.desc
	}
	ch <- descCapability
	ch <- descSource
	ch <- descInflight
	ch <- descState
	ch <- descStateTokens
}

// modelSnapshot is one model's scrape-time values.
type modelSnapshot struct {
	model  string
	stats  protocol.ModelStats
	count  [3]uint64 // by live State
	tokens [3]uint64
}

func (s *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	c := s.c
	c.mu.Lock()
	live := maps.Clone(c.counting)
	models := make([]modelSnapshot, 0, len(c.gens))
	for _, g := range c.gens {
		ms := modelSnapshot{model: g.model, stats: c.statsLocked(g)}
		for o := range g.live {
			ms.count[o.state]++
			ms.tokens[o.state] = addSat(ms.tokens[o.state], o.info.InputTokens)
		}
		models = append(models, ms)
	}
	c.mu.Unlock()

	for src, n := range live {
		ch <- prometheus.MustNewConstMetric(descLiveRequests, prometheus.GaugeValue, float64(n), string(src))
	}
	for i := range models {
		ms := &models[i]
		for _, g := range descModelGauges {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(&ms.stats), ms.model)
		}
		for _, p := range labelPairs {
			has := 0.0
			for _, v := range ms.stats.StatsCapabilities {
				if v == p.capability {
					has = 1
				}
			}
			ch <- prometheus.MustNewConstMetric(descCapability, prometheus.GaugeValue, has, ms.model, p.capability)
			ch <- prometheus.MustNewConstMetric(descSource, prometheus.GaugeValue, has, ms.model, p.source)
		}
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(ms.stats.NumRunningQueries), ms.model)
		for st := Pending; st <= OutputGeneration; st++ {
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, float64(ms.count[st]), ms.model, st.String())
			ch <- prometheus.MustNewConstMetric(descStateTokens, prometheus.GaugeValue, float64(ms.tokens[st]), ms.model, st.String())
		}
	}
}
