package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// store64 has one target with 64 clusters of 2 backends each.
func store64(b *testing.B, opts ...state.Option) *state.Store {
	s, _ := newStore(opts...)
	for i := range 128 {
		st := protocol.ModelStats{LastMeanInputTPS: float64(1200 + 31*(i%13)), QueuedInputSize: uint64(256 * (i % 5)),
			QueueSize: uint64(i % 7), NumRunningQueries: uint64(i % 9), MaxEngineConcurrency: 16,
			QueueTimeEstimateMsByPriority: map[uint32]uint64{0: uint64(i % 5), 2: uint64(2 + i%11)}}
		s.Apply(backend(fmt.Sprintf("b-%03d", i), fmt.Sprintf("cluster-%04d", i/2)), one("m", st),
			time.Duration(500+75*(i%19))*time.Microsecond, true)
	}
	if n := len(s.Snapshot(target("m")).Clusters); n != 64 {
		b.Fatalf("%d clusters", n)
	}
	return s
}

func BenchmarkSnapshot(b *testing.B) {
	s := store64(b)
	tg := target("m")
	b.ReportAllocs()
	for b.Loop() {
		if s.Snapshot(tg) == nil {
			b.Fatal("nil")
		}
	}
}

func BenchmarkSnapshotParallel(b *testing.B) {
	s := store64(b)
	tg := target("m")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Snapshot(tg)
		}
	})
}

func BenchmarkNextBackend(b *testing.B) {
	s := store64(b)
	tg := target("m")
	skip := func(id string) bool { return false }
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.NextBackend(tg, "cluster-0031", "", skip); !ok {
			b.Fatal("none")
		}
	}
}

// BenchmarkNextBackendKey is the affinity choice of a request with a key,
// the common case behind the gateway.
func BenchmarkNextBackendKey(b *testing.B) {
	s := store64(b)
	tg := target("m")
	skip := func(id string) bool { return false }
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.NextBackend(tg, "cluster-0031", "mt:v1:session:0123456789abcdef0123456789abcdef", skip); !ok {
			b.Fatal("none")
		}
	}
}

// BenchmarkNextBackendRoundRobin is the choice with BackendAffinity off.
func BenchmarkNextBackendRoundRobin(b *testing.B) {
	s := store64(b, state.BackendAffinity(false, 0))
	tg := target("m")
	skip := func(id string) bool { return false }
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.NextBackend(tg, "cluster-0031", "mt:v1:session:0123456789abcdef0123456789abcdef", skip); !ok {
			b.Fatal("none")
		}
	}
}

// BenchmarkReserveRelease is the write cost per upstream attempt on a
// 64-cluster target: a reservation republishes the target.
func BenchmarkReserveRelease(b *testing.B) {
	s := store64(b)
	tg := target("m")
	b.ReportAllocs()
	for b.Loop() {
		s.Reserve(tg, "cluster-0031", "b-062", 512, 1).Release()
	}
}

// BenchmarkReservePending is one reservation on a cluster that already
// carries 512 to 1024 pending ones, as between two registrations of a
// backend serving 512 requests or more per heartbeat: what an attempt pays
// for the reservation under load.
func BenchmarkReservePending(b *testing.B) {
	s := store64(b)
	tg := target("m")
	be := backend("b-062", "cluster-0031")
	r := one("m", protocol.ModelStats{LastMeanInputTPS: 1000, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 1, 2: 3}})
	fill := func() {
		for range 512 {
			s.Reserve(tg, "cluster-0031", "b-062", 512, 1)
		}
	}
	fill()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if n++; n%512 == 0 {
			// The backend's next registration drops its reservations.
			b.StopTimer()
			s.Apply(be, r, time.Millisecond, true)
			fill()
			b.StartTimer()
		}
		s.Reserve(tg, "cluster-0031", "b-062", 512, 1)
	}
}

// BenchmarkApply is one heartbeat of one backend of a 64-cluster target.
func BenchmarkApply(b *testing.B) {
	s := store64(b)
	r := one("m", protocol.ModelStats{LastMeanInputTPS: 1000, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 1}})
	be := backend("b-062", "cluster-0031")
	b.ReportAllocs()
	for b.Loop() {
		s.Apply(be, r, time.Millisecond, true)
	}
}

func TestSnapshotDoesNotAllocate(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	tg := target("m")
	skip := func(string) bool { return false }
	if n := testing.AllocsPerRun(100, func() {
		s.Snapshot(tg)
		s.Registered(tg)
		s.NextBackend(tg, "c", "", skip)
		s.NextBackend(tg, "c", "mt:v1:session:abc", skip)
	}); n != 0 {
		t.Fatalf("%v allocs per read", n)
	}
}
