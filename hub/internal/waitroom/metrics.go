package waitroom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Metrics are the waiting rooms' series (docs/metrics.md#hub). A nil
// *Metrics records nothing.
type Metrics struct {
	waitingN  *prometheus.GaugeVec
	refusedN  *prometheus.CounterVec
	displaceN *prometheus.CounterVec
	yieldN    *prometheus.CounterVec
}

// NewMetrics registers the rooms' metrics on reg under prefix (default
// stargate_).
func NewMetrics(reg prometheus.Registerer, prefix string) *Metrics {
	m := &Metrics{
		waitingN: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "routing_waiting_requests",
			Help: "Requests waiting now for a cluster with room, by class: returning (a session whose last cluster is a candidate) or other."},
			[]string{"routing_key", "model", "class"}),
		refusedN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_waiting_room_refusals_total",
			Help: "Requests refused at once because their target's waiting room was full (--proxy-max-waiting-requests), by class."},
			[]string{"routing_key", "model", "class"}),
		displaceN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_waiting_room_displacements_total",
			Help: "Waiting non-returning requests shed from a full room to make room for a returning session."},
			[]string{"routing_key", "model"}),
		yieldN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "routing_returning_priority_yields_total",
			Help: "Times a non-returning request offered the cluster it was given to waiting returning sessions first."},
			[]string{"routing_key", "model"}),
	}
	reg.MustRegister(m.waitingN, m.refusedN, m.displaceN, m.yieldN)
	return m
}

// Prime creates t's series at zero, so a dashboard's rate() of a room
// that has never refused anyone is 0, not absent.
func (m *Metrics) Prime(t routing.Target) {
	if m == nil {
		return
	}
	for _, c := range classNames {
		m.waitingN.WithLabelValues(t.RoutingKey, t.Model, c)
		m.refusedN.WithLabelValues(t.RoutingKey, t.Model, c)
	}
	m.displaceN.WithLabelValues(t.RoutingKey, t.Model)
	m.yieldN.WithLabelValues(t.RoutingKey, t.Model)
}

func (m *Metrics) waiting(t routing.Target, c Class, delta float64) {
	if m != nil {
		m.waitingN.WithLabelValues(t.RoutingKey, t.Model, c.String()).Add(delta)
	}
}

func (m *Metrics) refused(t routing.Target, c Class) {
	if m != nil {
		m.refusedN.WithLabelValues(t.RoutingKey, t.Model, c.String()).Inc()
	}
}

func (m *Metrics) displaced(t routing.Target) {
	if m != nil {
		m.displaceN.WithLabelValues(t.RoutingKey, t.Model).Inc()
	}
}

func (m *Metrics) yielded(t routing.Target) {
	if m != nil {
		m.yieldN.WithLabelValues(t.RoutingKey, t.Model).Inc()
	}
}
