package agent

import (
	"slices"
	"sync"

	"github.com/stargate-router/stargate/pylon/internal/engineproxy"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

// tracker adapts the stats collector to what the engine proxy and the
// calibration ramp consume, and holds the set of published models: a model
// is routable only once its bring-up (and calibration) is done, so a hub
// never routes to a model whose input TPS is not bootstrapped yet.
type tracker struct {
	c         *stats.Collector
	mu        sync.RWMutex
	published []string
}

func newTracker(c *stats.Collector) *tracker { return &tracker{c: c} }

func (t *tracker) publish(model string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.published, model) {
		t.published = append(t.published, model)
	}
}

func (t *tracker) publishedModels() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.published)
}

// Published implements engineproxy.Tracker.
func (t *tracker) Published(model string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Contains(t.published, model)
}

// Begin implements engineproxy.Tracker and calibrate.Tracker. The proxy
// tells the observation which engine each attempt goes to, so engine stats
// events count only for the engine that received the request.
func (t *tracker) Begin(info engineproxy.RequestInfo) engineproxy.Observation {
	return observation{t.c.Begin(stats.RequestInfo{
		ID: info.ID, Model: info.Model, Endpoint: stats.Endpoint(info.Endpoint), InputTokens: info.InputTokens,
		Priority: info.Priority, RoutingKey: info.RoutingKey,
	})}
}

// LocalQueueMs implements engineproxy.Tracker.
func (t *tracker) LocalQueueMs(model string, p uint32, self engineproxy.Observation) (uint64, bool) {
	var o *stats.Observer
	if s, ok := self.(observation); ok {
		o = s.o
	}
	return t.c.LocalQueueMs(model, p, o)
}

// InputTPS implements calibrate.Tracker.
func (t *tracker) InputTPS(model string) (float64, bool) {
	st, ok := t.c.Stats(model)
	if !ok || !(st.LastMeanInputTPS > 0) {
		return 0, false
	}
	return st.LastMeanInputTPS, true
}

// observation adapts a *stats.Observer to engineproxy.EngineObservation.
type observation struct{ o *stats.Observer }

func (x observation) Headers(status int)  { x.o.Headers(status) }
func (x observation) Output(chunk []byte) { x.o.Output(chunk) }
func (x observation) Complete()           { x.o.Finish(stats.Complete) }
func (x observation) Fail()               { x.o.Finish(stats.Failed) }
func (x observation) Cancel()             { x.o.Finish(stats.Cancelled) }

var _ engineproxy.EngineObservation = observation{}

// Dispatched implements engineproxy.EngineObservation.
func (x observation) Dispatched(engine int) { x.o.Dispatched(engine) }
