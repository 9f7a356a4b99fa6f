package state_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Writers (heartbeats, reservations, releases, removals) and readers run
// together; under -race this proves the readers never touch writer state.
// Readers also check what every published snapshot must satisfy.
func TestConcurrentWritersAndReaders(t *testing.T) {
	var gauge sync.Map
	s, _ := newStore(state.OnActiveServers(func(t routing.Target, n int) { gauge.Store(t, n) }))
	models := []string{"m0", "m1", "m2"}
	const writers, readers, rounds = 4, 4, 300

	var stop atomic.Bool
	var wg, rg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range rounds {
				id := fmt.Sprintf("w%d-b%d", w, rng.IntN(3))
				b := backend(id, fmt.Sprintf("c%d", rng.IntN(3)))
				b.RoutingKey = "rk"
				entries := map[string]protocol.ModelEntry{}
				for _, m := range models {
					switch rng.IntN(3) {
					case 0:
						entries[m] = active(protocol.ModelStats{LastMeanInputTPS: float64(1 + rng.IntN(1000)),
							QueueSize: uint64(i), QueueTimeEstimateMsByPriority: map[uint32]uint64{0: uint64(i), 2: uint64(2 * i)}})
					case 1:
						entries[m] = protocol.ModelEntry{Status: protocol.StatusInactive}
					}
				}
				switch rng.IntN(10) {
				case 0:
					s.Remove(id)
				default:
					s.Apply(b, reg(entries), time.Duration(rng.IntN(1e6)), rng.IntN(8) != 0)
				}
				tg := target(models[rng.IntN(len(models))])
				if snap := s.Snapshot(tg); snap != nil {
					c := snap.Clusters[rng.IntN(len(snap.Clusters))]
					if be, ok := s.NextBackend(tg, c.ClusterID, fmt.Sprint("session-", rng.IntN(4)), nil); ok {
						r := s.Reserve(tg, c.ClusterID, be.ID, uint64(rng.IntN(5000)), uint32(rng.IntN(4)))
						if rng.IntN(2) == 0 {
							r.Release()
							r.Release()
						}
					}
				}
			}
		})
	}
	var reads atomic.Int64
	for r := range readers {
		rg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for !stop.Load() {
				tg := target(models[rng.IntN(len(models))])
				snap := s.Snapshot(tg)
				s.Registered(tg)
				s.ActiveModels("rk")
				if snap == nil {
					continue
				}
				reads.Add(1)
				if len(snap.Clusters) == 0 || snap.Target != tg {
					t.Errorf("bad snapshot %+v", snap)
					return
				}
				for i, c := range snap.Clusters {
					if c.ActiveBackends < 1 || (i > 0 && snap.Clusters[i-1].ClusterID >= c.ClusterID) {
						t.Errorf("bad cluster list %+v", snap.Clusters)
						return
					}
					_ = c.Stats.QueueTimeEstimateMsByPriority[0] // reading shared maps must be race-free
					s.NextBackend(tg, c.ClusterID, []string{"", "session-1"}[rng.IntN(2)], func(id string) bool { return id == "w0-b0" })
				}
				if rng.IntN(50) == 0 {
					if _, err := json.Marshal(s.Debug()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	rg.Wait()
	if reads.Load() == 0 {
		t.Log("readers never saw a snapshot")
	}

	// Every backend leaves: all targets go away and the gauge reads 0.
	for w := range writers {
		for b := range 3 {
			s.Remove(fmt.Sprintf("w%d-b%d", w, b))
		}
	}
	for _, m := range models {
		if s.Snapshot(target(m)) != nil || s.Registered(target(m)) {
			t.Errorf("%s still present after every backend left", m)
		}
	}
	gauge.Range(func(k, v any) bool {
		if v.(int) != 0 {
			t.Errorf("gauge %v = %v after every backend left", k, v)
		}
		return true
	})
	if d := s.Debug().(state.DebugState); len(d.Targets) != 0 || len(d.Backends) != 0 || d.PendingReservations != 0 {
		t.Errorf("state left behind: %+v", d)
	}
}
