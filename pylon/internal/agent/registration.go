package agent

import (
	"context"
	"net/http"
	"sync"

	"github.com/stargate-router/stargate/pkg/protocol"
)

// snapshotter is the registration the tunnels publish: every published
// model, active, with its live statistics.
type snapshotter struct {
	a       *Agent
	changed *broadcaster
}

// Registration implements tunnel.Snapshotter.
func (s *snapshotter) Registration() protocol.Registration {
	reg := protocol.Registration{
		InferenceServerID: s.a.cfg.InferenceServerID, ClusterID: s.a.cfg.ClusterID,
		Models: map[string]protocol.ModelEntry{},
	}
	if reg.ClusterID == "" {
		reg.ClusterID = reg.InferenceServerID
	}
	for _, m := range s.a.tracker.publishedModels() {
		st, ok := s.a.collector.Stats(m)
		if !ok {
			reg.Models[m] = protocol.ModelEntry{Status: protocol.StatusInactive}
			continue
		}
		reg.Models[m] = protocol.ModelEntry{Status: protocol.StatusActive, Stats: &st}
	}
	return reg
}

// Changed implements tunnel.Snapshotter.
func (s *snapshotter) Changed() <-chan struct{} { return s.changed.wait() }

// observeRegistration keeps pylon_registration_stream_connected and
// pylon_model_advertised_status for the hub holding each registration
// stream. On the tunnel the request's remote address is the hub's address,
// the router label of pylon_reverse_tunnel_connected too.
func (a *Agent) observeRegistration(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		router := r.RemoteAddr
		a.gauges.advertise(router, true, a.tracker.publishedModels())
		defer func() { a.gauges.advertise(router, false, a.tracker.publishedModels()) }()
		h.ServeHTTP(w, r)
	})
}

// broadcaster turns the collector's single notification channel into a
// close-and-replace broadcast, so every hub's registration stream wakes on
// a change, not just one of them.
type broadcaster struct {
	src <-chan struct{}
	mu  sync.Mutex
	ch  chan struct{}
}

func newBroadcaster(src <-chan struct{}) *broadcaster {
	return &broadcaster{src: src, ch: make(chan struct{})}
}

func (b *broadcaster) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.src:
			b.mu.Lock()
			close(b.ch)
			b.ch = make(chan struct{})
			b.mu.Unlock()
		}
	}
}

// wait returns a channel that is closed at the next change.
func (b *broadcaster) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}
