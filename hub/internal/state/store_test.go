package state_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// Each registration is a full snapshot: a model it no longer lists is
// withdrawn, and no longer counts as registered.
func TestFullSnapshotWithdrawsModel(t *testing.T) {
	s, _ := newStore()
	b := backend("b1", "c1")
	s.Apply(b, reg(map[string]protocol.ModelEntry{
		"m1": active(protocol.ModelStats{QueueSize: 1}),
		"m2": active(protocol.ModelStats{QueueSize: 2}),
	}), time.Millisecond, true)
	if s.Snapshot(target("m1")) == nil || s.Snapshot(target("m2")) == nil {
		t.Fatal("both models must be routable")
	}
	if got := s.ActiveModels("rk"); !reflect.DeepEqual(got, []string{"m1", "m2"}) {
		t.Fatalf("ActiveModels = %v", got)
	}

	s.Apply(b, one("m1", protocol.ModelStats{QueueSize: 3}), time.Millisecond, true)
	if s.Snapshot(target("m2")) != nil || s.Registered(target("m2")) {
		t.Fatal("m2 must be withdrawn and unregistered")
	}
	if got := cluster(t, s, target("m1"), "c1").Stats.QueueSize; got != 3 {
		t.Fatalf("m1 queue = %d, want 3", got)
	}
	if got := s.ActiveModels("rk"); !reflect.DeepEqual(got, []string{"m1"}) {
		t.Fatalf("ActiveModels = %v", got)
	}
	s.Apply(b, nil, time.Millisecond, true) // nothing listed at all
	if s.Registered(target("m1")) || s.Snapshot(target("m1")) != nil {
		t.Fatal("a registration listing no model must withdraw everything")
	}
}

// Registered answers "does a live registration advertise it" whatever the
// status; Snapshot answers "is anything routable".
func TestRegisteredVersusSnapshot(t *testing.T) {
	stats := protocol.ModelStats{QueueSize: 1}
	for _, tc := range []struct {
		name           string
		entry          protocol.ModelEntry
		rttKnown       bool
		wantRegistered bool
		wantSnapshot   bool
	}{
		{"active with RTT", active(stats), true, true, true},
		{"active without RTT", active(stats), false, true, false},
		{"inactive", protocol.ModelEntry{Status: protocol.StatusInactive, Stats: &stats}, true, true, false},
		{"unknown status", protocol.ModelEntry{Status: "", Stats: &stats}, true, true, false},
		{"active without stats", protocol.ModelEntry{Status: protocol.StatusActive}, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore()
			s.Apply(backend("b", "c"), reg(map[string]protocol.ModelEntry{"m": tc.entry}), time.Millisecond, tc.rttKnown)
			if got := s.Registered(target("m")); got != tc.wantRegistered {
				t.Errorf("Registered = %v", got)
			}
			if got := s.Snapshot(target("m")) != nil; got != tc.wantSnapshot {
				t.Errorf("Snapshot present = %v", got)
			}
			if s.Registered(routing.Target{Model: "m"}) || s.Registered(target("other")) {
				t.Error("targets are scoped by routing key and model")
			}
			if got := s.ActiveModels("rk"); (len(got) == 1) != tc.wantSnapshot {
				t.Errorf("ActiveModels = %v", got)
			}
		})
	}
}

// An Active update without RTT (tunnel down) removes the backend from
// routing; the next one with RTT brings it back in a new generation.
func TestActiveWithoutRTTRemoves(t *testing.T) {
	s, _ := newStore()
	b := backend("b", "c")
	s.Apply(b, one("m", protocol.ModelStats{}), time.Millisecond, true)
	s.Apply(backend("b2", "c2"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	first := s.Snapshot(target("m"))
	s.Apply(b, one("m", protocol.ModelStats{}), 0, false)
	snap := s.Snapshot(target("m"))
	if len(snap.Clusters) != 1 || snap.Clusters[0].ClusterID != "c2" {
		t.Fatalf("clusters after losing RTT: %+v", snap.Clusters)
	}
	if snap.Generation != first.Generation || snap.Version <= first.Version {
		t.Fatalf("generation must hold while the target stays active; version must grow: %d/%d → %d/%d",
			first.Generation, first.Version, snap.Generation, snap.Version)
	}
	s.Remove("b2")
	if s.Snapshot(target("m")) != nil || !s.Registered(target("m")) {
		t.Fatal("no active backend left, but b still advertises the model")
	}
	s.Apply(b, one("m", protocol.ModelStats{}), time.Millisecond, true)
	again := s.Snapshot(target("m"))
	if again == nil || again.Generation == first.Generation {
		t.Fatalf("a re-activated target must start a new generation: %+v", again)
	}
}

func TestRemove(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b", "c"), reg(map[string]protocol.ModelEntry{
		"m1": active(protocol.ModelStats{}), "m2": active(protocol.ModelStats{}),
		"m3": {Status: protocol.StatusInactive},
	}), time.Millisecond, true)
	s.Apply(backend("other", "c"), one("m1", protocol.ModelStats{}), time.Millisecond, true)
	s.Remove("b")
	s.Remove("b")       // twice is fine
	s.Remove("unknown") // so is an unknown id
	if c := cluster(t, s, target("m1"), "c"); c.ActiveBackends != 1 {
		t.Fatalf("m1 keeps the other backend, got %d", c.ActiveBackends)
	}
	for _, m := range []string{"m2", "m3"} {
		if s.Registered(target(m)) || s.Snapshot(target(m)) != nil {
			t.Fatalf("%s must be gone from every target at once", m)
		}
	}
}

// A backend whose identity changes (cluster or routing key) is moved, not
// duplicated.
func TestIdentityChangeMovesBackend(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("b", "c1"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	s.Apply(backend("b", "c2"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	snap := s.Snapshot(target("m"))
	if len(snap.Clusters) != 1 || snap.Clusters[0].ClusterID != "c2" {
		t.Fatalf("clusters %+v", snap.Clusters)
	}
	moved := backend("b", "c2")
	moved.RoutingKey = "other"
	s.Apply(moved, one("m", protocol.ModelStats{}), time.Millisecond, true)
	if s.Registered(target("m")) || s.Snapshot(routing.Target{RoutingKey: "other", Model: "m"}) == nil {
		t.Fatal("the backend must move to its new routing key")
	}
}

// Off, NextBackend is upstream's round robin whatever the key; on, a
// request without a key takes the least loaded backend with ties in
// round-robin order, which on equal loads is the same sequence.
func TestNextBackendRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		opts []state.Option
	}{
		{"off", "mt:v1:session:abc", []state.Option{state.BackendAffinity(false, 0)}},
		{"on without a key", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { testNextBackendRoundRobin(t, tc.key, tc.opts...) })
	}
}

func testNextBackendRoundRobin(t *testing.T, key string, opts ...state.Option) {
	s, _ := newStore(opts...)
	for _, id := range []string{"b3", "b1", "b2"} { // registration order must not matter
		s.Apply(backend(id, "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	}
	s.Apply(backend("x1", "other"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	next := func(skip func(string) bool) string {
		b, ok := s.NextBackend(target("m"), "c", key, skip)
		if !ok {
			return "-"
		}
		return b.ID
	}
	var got []string
	for range 6 {
		got = append(got, next(nil))
	}
	if want := []string{"b1", "b2", "b3", "b1", "b2", "b3"}; !slices.Equal(got, want) {
		t.Fatalf("round robin %v, want %v", got, want)
	}
	// The counter keeps going and indexes the eligible backends only:
	// 6 mod 2 → b1, 7 mod 2 → b3, 8 mod 2 → b1.
	skipB2 := func(id string) bool { return id == "b2" }
	got = []string{next(skipB2), next(skipB2), next(skipB2)}
	if want := []string{"b1", "b3", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("with b2 skipped %v, want %v", got, want)
	}
	if got := next(func(string) bool { return true }); got != "-" {
		t.Fatalf("everything skipped gave %s", got)
	}
	b, ok := s.NextBackend(target("m"), "other", key, nil)
	if !ok || b != backend("x1", "other") {
		t.Fatalf("other cluster: %+v %v", b, ok)
	}
	if _, ok := s.NextBackend(target("m"), "missing", "", nil); ok {
		t.Fatal("unknown cluster")
	}
	if _, ok := s.NextBackend(target("nope"), "c", "", nil); ok {
		t.Fatal("unknown target")
	}
	// A heartbeat does not reset the cluster's counter (9 mod 3 → b1, 10 → b2).
	s.Apply(backend("b2", "c"), one("m", protocol.ModelStats{QueueSize: 4}), time.Millisecond, true)
	if got := []string{next(nil), next(nil)}; !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("after a heartbeat %v", got)
	}
}

// A published snapshot never changes, whatever happens after.
func TestSnapshotImmutable(t *testing.T) {
	s, clk := newStore()
	stats := protocol.ModelStats{
		LastMeanInputTPS: 1000, QueueSize: 2, QueuedInputSize: 100,
		QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 10, 4: 40},
		StatsCapabilities:             []string{"cap"}, StatsSources: []string{"src"},
	}
	r := one("m", stats)
	s.Apply(backend("a", "c"), r, time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{LastMeanInputTPS: 10}), 3*time.Millisecond, true)
	s.Apply(backend("a", "c"), r, time.Millisecond, true)
	snap := s.Snapshot(target("m"))
	frozen, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}

	// The caller reusing its registration must not reach the store…
	r.Models["m"].Stats.QueueTimeEstimateMsByPriority[0] = 999
	r.Models["m"].Stats.StatsCapabilities[0] = "mutated"
	// …and neither must reservations, heartbeats, releases and removals.
	res := s.Reserve(target("m"), "c", "a", 5000, 0)
	s.Reserve(target("m"), "c", "b", 1, 4)
	clk.Advance(time.Second)
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{LastMeanInputTPS: 20, QueueSize: 7}), 9*time.Millisecond, true)
	res.Release()
	s.Remove("a")
	s.Apply(backend("n", "new"), one("m", protocol.ModelStats{}), time.Millisecond, true)

	after, _ := json.Marshal(snap)
	if string(after) != string(frozen) {
		t.Fatalf("published snapshot changed:\nbefore %s\nafter  %s", frozen, after)
	}
	if now := s.Snapshot(target("m")); now == snap || now.Version <= snap.Version {
		t.Fatal("later writes must publish new snapshots")
	}
}

func TestOnActiveServers(t *testing.T) {
	type ev struct {
		t routing.Target
		n int
	}
	var got []ev
	s, _ := newStore(state.OnActiveServers(func(t routing.Target, n int) { got = append(got, ev{t, n}) }))
	m1, m2 := target("m1"), target("m2")
	s.Apply(backend("a", "c1"), reg(map[string]protocol.ModelEntry{
		"m1": active(protocol.ModelStats{}), "m2": {Status: protocol.StatusInactive},
	}), time.Millisecond, true)
	s.Apply(backend("b", "c2"), reg(map[string]protocol.ModelEntry{
		"m1": active(protocol.ModelStats{}), "m2": active(protocol.ModelStats{}),
	}), time.Millisecond, true)
	s.Apply(backend("a", "c1"), one("m1", protocol.ModelStats{QueueSize: 1}), time.Millisecond, true) // no count change
	s.Reserve(m1, "c1", "a", 10, 0)                                                                   // no count change
	s.Remove("b")
	s.Remove("a")
	want := []ev{{m1, 1}, {m1, 2}, {m2, 1}, {m1, 1}, {m2, 0}, {m1, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}

func TestActiveModels(t *testing.T) {
	s, _ := newStore()
	unscoped := func(id string) state.Backend { b := backend(id, id); b.RoutingKey = ""; return b }
	s.Apply(unscoped("u1"), reg(map[string]protocol.ModelEntry{
		"zeta": active(protocol.ModelStats{}), "alpha": active(protocol.ModelStats{}), "off": {Status: protocol.StatusInactive},
	}), time.Millisecond, true)
	s.Apply(unscoped("u2"), one("alpha", protocol.ModelStats{}), time.Millisecond, true)
	s.Apply(backend("k1", "k1"), one("scoped", protocol.ModelStats{}), time.Millisecond, true)
	if got := s.ActiveModels(""); !reflect.DeepEqual(got, []string{"alpha", "zeta"}) {
		t.Fatalf("unscoped models %v", got)
	}
	if got := s.ActiveModels("rk"); !reflect.DeepEqual(got, []string{"scoped"}) {
		t.Fatalf("rk models %v", got)
	}
	if got := s.ActiveModels("nobody"); len(got) != 0 {
		t.Fatalf("unknown key models %v", got)
	}
}

func TestDebug(t *testing.T) {
	s, clk := newStore()
	s.Apply(backend("a", "c"), reg(map[string]protocol.ModelEntry{
		"m": active(protocol.ModelStats{LastMeanInputTPS: 100, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 1}}),
		"x": {Status: protocol.StatusInactive},
	}), 2*time.Millisecond, true)
	clk.Advance(time.Second)
	s.Reserve(target("m"), "c", "a", 50, 3)
	d, ok := s.Debug().(state.DebugState)
	if !ok {
		t.Fatalf("Debug() is %T", s.Debug())
	}
	if len(d.Targets) != 2 || d.Targets[0].Model != "m" || d.Targets[1].Model != "x" || d.PendingReservations != 1 {
		t.Fatalf("targets %+v", d.Targets)
	}
	c := d.Targets[0].Clusters[0]
	if c.ClusterID != "c" || c.RTTNanos != int64(2*time.Millisecond) || c.StatsSource != "a" ||
		c.Stats.QueueSize != 1 || c.BaseStats.QueueSize != 0 || len(c.Reservations) != 1 ||
		c.Reservations[0].Tokens != 50 || !c.Reservations[0].CreatedAt.Equal(t0.Add(time.Second)) ||
		len(c.Backends) != 1 || !c.Backends[0].ReceivedAt.Equal(t0) {
		t.Fatalf("cluster %+v", c)
	}
	if len(d.Backends) != 1 || !reflect.DeepEqual(d.Backends[0].AdvertisedModels, []string{"m", "x"}) ||
		!reflect.DeepEqual(d.Backends[0].ActiveModels, []string{"m"}) || d.Backends[0].PendingReservations != 1 {
		t.Fatalf("backends %+v", d.Backends)
	}
	if _, err := json.Marshal(s.Debug()); err != nil {
		t.Fatal(err)
	}
}

// HasBackend answers without moving the round robin: the breaker filter
// asks it for every cluster on every pass.
func TestHasBackend(t *testing.T) {
	s, _ := newStore()
	s.Apply(backend("a", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	s.Apply(backend("b", "c"), one("m", protocol.ModelStats{}), time.Millisecond, true)
	none := func(string) bool { return false }
	all := func(string) bool { return true }
	onlyA := func(id string) bool { return id != "a" }
	if !s.HasBackend(target("m"), "c", none) || s.HasBackend(target("m"), "c", all) || !s.HasBackend(target("m"), "c", onlyA) {
		t.Fatal("HasBackend does not follow skip")
	}
	if s.HasBackend(target("m"), "other", none) || s.HasBackend(target("x"), "c", none) {
		t.Fatal("an unknown cluster or target has no backend")
	}
	first, _ := s.NextBackend(target("m"), "c", "", nil)
	for range 3 {
		s.HasBackend(target("m"), "c", none)
	}
	if second, _ := s.NextBackend(target("m"), "c", "", nil); second.ID == first.ID {
		t.Fatalf("HasBackend moved the round robin: %s twice", first.ID)
	}
}
