package state_test

import (
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A waiter on model m is woken by the changes of m that may give it room
// (a registration, a released reservation, a backend leaving) and by
// nothing else: not by another target's registration, not by a
// reservation or a refusal's mark, which only add load.
func TestPublishedAfterWakesOnChangesThatMayFreeRoom(t *testing.T) {
	busy := protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 2, NumRunningQueries: 2}
	m, other := target("m"), target("other")
	for _, tc := range []struct {
		name  string
		act   func(s *state.Store, res state.Reservation)
		wakes bool
	}{
		{"m's registration", func(s *state.Store, _ state.Reservation) {
			s.Apply(backend("b1", "c1"), one("m", busy), time.Millisecond, true)
		}, true},
		{"another target's registration", func(s *state.Store, _ state.Reservation) {
			s.Apply(backend("o1", "c1"), one("other", busy), time.Millisecond, true)
		}, false},
		{"a reservation", func(s *state.Store, _ state.Reservation) { s.Reserve(m, "c1", "b1", 100, 0) }, false},
		{"a refusal's mark", func(s *state.Store, _ state.Reservation) { s.MarkFull(m, "c1", "b1", 50) }, false},
		{"a reservation released", func(_ *state.Store, res state.Reservation) { res.Release() }, true},
		{"a backend removed", func(s *state.Store, _ state.Reservation) { s.Remove("b2") }, true},
		{"the last backend of m removed", func(s *state.Store, _ state.Reservation) { s.Remove("b1"); s.Remove("b2") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			s.Apply(backend("b1", "c1"), one("m", busy), time.Millisecond, true)
			s.Apply(backend("b2", "c2"), one("m", busy), time.Millisecond, true)
			s.Apply(backend("o1", "c1"), one("other", busy), time.Millisecond, true)
			res := s.Reserve(m, "c1", "b1", 100, 0)
			seen := s.Publications(m)
			before := s.Publications(other)
			wake := s.PublishedAfter(m, seen)
			if isClosed(wake) {
				t.Fatal("closed before any change")
			}
			tc.act(s, res)
			if got := isClosed(wake); got != tc.wakes {
				t.Fatalf("woken %v, want %v", got, tc.wakes)
			}
			if got := isClosed(s.PublishedAfter(m, seen)); got != tc.wakes {
				t.Fatalf("a waiter asking after the change: woken %v, want %v", got, tc.wakes)
			}
			if tc.wakes && s.Publications(m) == seen {
				t.Error("the count did not move")
			}
			if tc.name != "another target's registration" && s.Publications(other) != before {
				t.Error("another target's count moved")
			}
		})
	}
}

// The channel is taken after the count was read: a publication in between
// closes it at once, so a waiter that read the snapshot before the change
// does not sleep through it.
func TestPublishedAfterSeesAPublicationBeforeTheCall(t *testing.T) {
	s, _ := newStore()
	st := protocol.ModelStats{LastMeanInputTPS: 1000}
	s.Apply(backend("b1", "c1"), one("m", st), time.Millisecond, true)
	seen := s.Publications(target("m"))
	s.Apply(backend("b1", "c1"), one("m", st), time.Millisecond, true)
	if !isClosed(s.PublishedAfter(target("m"), seen)) {
		t.Fatal("a publication between Publications and PublishedAfter was missed")
	}
	// A target that went away since the count was read wakes at once; one
	// never seen waits for any target's activation.
	s.Remove("b1")
	if !isClosed(s.PublishedAfter(target("m"), seen)) {
		t.Fatal("a waiter on a target that went away was not woken")
	}
	unknown := routing.Target{RoutingKey: "rk", Model: "nobody"}
	wake := s.PublishedAfter(unknown, s.Publications(unknown))
	if isClosed(wake) {
		t.Fatal("closed for a target nobody serves")
	}
	s.Apply(backend("n1", "c1"), one("nobody", st), time.Millisecond, true)
	if !isClosed(wake) {
		t.Fatal("the target's first backend did not wake its waiter")
	}
}

// A target that goes away and comes back gets a new signal whose count
// never repeats one a waiter of the old one holds.
func TestPublicationsNeverRepeatAcrossATargetsLives(t *testing.T) {
	s, _ := newStore()
	st := protocol.ModelStats{LastMeanInputTPS: 1000}
	s.Apply(backend("b1", "c1"), one("m", st), time.Millisecond, true)
	seen := s.Publications(target("m"))
	s.Remove("b1")
	s.Apply(backend("b1", "c1"), one("m", st), time.Millisecond, true)
	if s.Publications(target("m")) == seen || !isClosed(s.PublishedAfter(target("m"), seen)) {
		t.Fatal("the target's new life repeats the old count")
	}
}

// Asking for the count costs nothing: every routing pass asks.
func TestPublicationsDoNotAllocate(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b1", "c1"), one("m", protocol.ModelStats{LastMeanInputTPS: 1000}), time.Millisecond, true)
	if n := testing.AllocsPerRun(100, func() { _ = s.Publications(target("m")) }); n != 0 {
		t.Errorf("Publications: %v allocations", n)
	}
}
