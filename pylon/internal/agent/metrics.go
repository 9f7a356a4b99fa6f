package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// gauges are the agent's own series: tunnel and registration state per
// hub address, what each model is advertised as, and how calibration went.
type gauges struct {
	tunnelUp     *prometheus.GaugeVec
	regStreamUp  *prometheus.GaugeVec
	advertised   *prometheus.GaugeVec
	calibrations *prometheus.GaugeVec
}

func newGauges(reg prometheus.Registerer) *gauges {
	g := &gauges{
		tunnelUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_reverse_tunnel_connected",
			Help: "1 while the tunnel (which also carries the registration stream) to this hub address is up."}, []string{"router"}),
		regStreamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_registration_stream_connected",
			Help: "1 while the hub at this address holds the registration stream open."}, []string{"router"}),
		advertised: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_model_advertised_status",
			Help: "1 for the status each model is advertised with to this hub (active while its registration stream is open), 0 for the other."},
			[]string{"router", "model", "status"}),
		calibrations: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pylon_model_calibration_duration_ms",
			Help: "How long the startup calibration of a model took, by outcome."}, []string{"model", "outcome"}),
	}
	reg.MustRegister(g.tunnelUp, g.regStreamUp, g.advertised, g.calibrations)
	return g
}

// tunnelState is the tunnel client's OnState callback.
func (g *gauges) tunnelState(addr string, up bool) {
	g.tunnelUp.WithLabelValues(addr).Set(boolValue(up))
}

// advertise records whether the hub at router holds a registration stream,
// and so whether models are advertised to it as active or inactive.
func (g *gauges) advertise(router string, up bool, models []string) {
	on, off := protocol.StatusActive, protocol.StatusInactive
	if !up {
		on, off = off, on
	}
	g.regStreamUp.WithLabelValues(router).Set(boolValue(up))
	for _, m := range models {
		g.advertised.WithLabelValues(router, m, string(on)).Set(1)
		g.advertised.WithLabelValues(router, m, string(off)).Set(0)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
