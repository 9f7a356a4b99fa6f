package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/breaker"
	"github.com/stargate-router/stargate/pkg/clock"
)

// newBreakers builds the per-backend error breaker from the flags, logs
// and counts its transitions, or returns nil (every backend always
// available) with --proxy-breaker-enabled=false.
func newBreakers(cfg Config, log *slog.Logger, clk clock.Clock, reg prometheus.Registerer) (*breaker.Set, *prometheus.GaugeVec, error) {
	if !cfg.BreakerEnabled {
		return nil, nil, nil
	}
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: cfg.MetricsPrefix + "backend_breaker_state",
		Help: "Error breaker of each backend that has one: 0 closed, 1 half-open (one probe allowed), 2 open (refused)."},
		[]string{"inference_server_id"})
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: cfg.MetricsPrefix + "backend_breaker_transitions_total",
		Help: "Breaker transitions by backend and new state: open, half_open, closed."},
		[]string{"inference_server_id", "to"})
	reg.MustRegister(state, transitions)
	bcfg := breaker.DefaultConfig()
	bcfg.Failures, bcfg.Window, bcfg.CoolDown = cfg.BreakerFailures, cfg.BreakerWindow, cfg.BreakerCoolDown
	bcfg.MaxCoolDown = max(bcfg.MaxCoolDown, bcfg.CoolDown)
	bcfg.OnTransition = func(tr breaker.Transition) {
		// Called under the Set's lock: only cheap, non-blocking work.
		// breaker.State's values and names are the gauge's and the label's.
		state.WithLabelValues(tr.Backend).Set(float64(tr.To))
		transitions.WithLabelValues(tr.Backend, tr.To.String()).Inc()
		if tr.To == breaker.Open {
			log.Warn("backend breaker opened: the backend gets no requests until a probe succeeds",
				"inference_server_id", tr.Backend, "from", tr.From.String(), "cool_down", tr.CoolDown)
		} else {
			log.Info("backend breaker", "inference_server_id", tr.Backend, "from", tr.From.String(), "to", tr.To.String())
		}
	}
	set, err := breaker.New(bcfg, clk)
	return set, state, err
}
