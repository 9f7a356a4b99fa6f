package waitroom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

var target = routing.Target{RoutingKey: "rk", Model: "m"}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func enter(t *testing.T, rs *Rooms, c Class) *Ticket {
	t.Helper()
	tk, ok := rs.Enter(target, c)
	if !ok {
		t.Fatalf("Enter(%v) refused", c)
	}
	return tk
}

func TestFullRoomShedsNewestOtherForReturning(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), "stargate_")
	rs := New(Config{Limit: 3, ReturningFirst: true, Metrics: m})
	old := enter(t, rs, Other)
	ret := enter(t, rs, Returning)
	newest := enter(t, rs, Other)
	if _, ok := rs.Enter(target, Other); ok {
		t.Fatal("an Other request entered a full room")
	}
	tk := enter(t, rs, Returning)
	if !closed(newest.Shed()) {
		t.Fatal("the newest Other waiter was not shed for the returning arrival")
	}
	if closed(old.Shed()) || closed(ret.Shed()) || closed(tk.Shed()) {
		t.Fatal("a waiter other than the newest Other was shed")
	}
	if r, o := rs.Waiting(target); r != 2 || o != 1 {
		t.Fatalf("Waiting = %d returning, %d other; want 2, 1", r, o)
	}
	// The old Other goes too; then the room holds only returning sessions
	// and a third returning arrival has nobody to displace.
	tk2 := enter(t, rs, Returning)
	if !closed(old.Shed()) {
		t.Fatal("the remaining Other waiter was not shed")
	}
	if _, ok := rs.Enter(target, Returning); ok {
		t.Fatal("a returning request displaced a returning waiter")
	}
	rs.Leave(newest) // shed tickets leave as a no-op
	rs.Leave(old)
	if r, o := rs.Waiting(target); r != 3 || o != 0 {
		t.Fatalf("Waiting = %d returning, %d other; want 3, 0", r, o)
	}
	for _, tk := range []*Ticket{ret, tk, tk2} {
		rs.Leave(tk)
		rs.Leave(tk)
	}
	if r, o := rs.Waiting(target); r != 0 || o != 0 {
		t.Fatalf("Waiting after every Leave = %d, %d", r, o)
	}
	if len(rs.rooms) != 0 {
		t.Fatalf("an empty room is kept: %d rooms", len(rs.rooms))
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"refused other", testutil.ToFloat64(m.refusedN.WithLabelValues("rk", "m", "other")), 1},
		{"refused returning", testutil.ToFloat64(m.refusedN.WithLabelValues("rk", "m", "returning")), 1},
		{"displaced", testutil.ToFloat64(m.displaceN.WithLabelValues("rk", "m")), 2},
		{"waiting returning", testutil.ToFloat64(m.waitingN.WithLabelValues("rk", "m", "returning")), 0},
		{"waiting other", testutil.ToFloat64(m.waitingN.WithLabelValues("rk", "m", "other")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestUnboundedRoomAdmitsEveryone(t *testing.T) {
	rs := New(Config{ReturningFirst: true})
	for range 1000 {
		enter(t, rs, Other)
	}
	if _, o := rs.Waiting(target); o != 1000 {
		t.Fatalf("Waiting other = %d, want 1000", o)
	}
}

func TestYieldWakesReturningAndSettlesWhenEachPassed(t *testing.T) {
	rs := New(Config{ReturningFirst: true})
	if _, ok := rs.Yield(target); ok {
		t.Fatal("Yield with nobody waiting")
	}
	other := enter(t, rs, Other)
	if _, ok := rs.Yield(target); ok {
		t.Fatal("Yield with only Other waiters")
	}
	a, b := enter(t, rs, Returning), enter(t, rs, Returning)
	if w := rs.Sleep(other); w != nil {
		t.Fatal("an Other waiter got a wake channel")
	}
	wakeA, wakeB := rs.Sleep(a), rs.Sleep(b)
	settled, ok := rs.Yield(target)
	if !ok || !closed(wakeA) || !closed(wakeB) {
		t.Fatal("Yield did not wake the returning waiters")
	}
	// A second yielder during the round joins it instead of waking again.
	again, ok := rs.Yield(target)
	if !ok || again != settled {
		t.Fatal("a Yield during a running round started another")
	}
	late := enter(t, rs, Returning) // entered after the wake: not awaited
	_ = late
	// a passes after the wake and sleeps again: counted.
	rs.Pass(a)
	nextA := rs.Sleep(a)
	if closed(nextA) {
		t.Fatal("the next round's wake is already closed")
	}
	if closed(settled) {
		t.Fatal("settled with b not passed")
	}
	// b leaves without passing: it no longer holds the round.
	rs.Leave(b)
	if !closed(settled) {
		t.Fatal("not settled after every awaited waiter passed or left")
	}
}

func TestPassBeforeWakeDoesNotCount(t *testing.T) {
	rs := New(Config{ReturningFirst: true})
	a := enter(t, rs, Returning)
	rs.Pass(a) // its pass began before the capacity appeared
	settled, _ := rs.Yield(target)
	wake := rs.Sleep(a)
	if closed(settled) {
		t.Fatal("a pass that began before the wake counted as seeing it")
	}
	if !closed(wake) {
		t.Fatal("the waiter was handed an open channel although a round is waiting for it")
	}
	rs.Pass(a)
	rs.Sleep(a)
	if !closed(settled) {
		t.Fatal("the pass after the wake did not settle the round")
	}
}

func TestPolicyOffTreatsEveryoneAlike(t *testing.T) {
	rs := New(Config{Limit: 1})
	o := enter(t, rs, Other)
	if _, ok := rs.Enter(target, Returning); ok {
		t.Fatal("with the policy off a returning request displaced a waiter")
	}
	if closed(o.Shed()) {
		t.Fatal("shed with the policy off")
	}
	rs.Leave(o)
	r := enter(t, rs, Returning)
	if r.Class() != Other {
		t.Fatalf("class with the policy off = %v, want other", r.Class())
	}
	if _, ok := rs.Yield(target); ok {
		t.Fatal("Yield with the policy off")
	}
}
