package breaker

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a Set on a fake clock that records its transitions.
type harness struct {
	t     *testing.T
	clk   *clock.Fake
	s     *Set
	mu    sync.Mutex
	trans []string
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(epoch)}
	cfg := Config{Window: 10, Failures: 3, MaxAge: time.Minute, CoolDown: 5 * time.Second,
		MaxCoolDown: 20 * time.Second, ProbeTimeout: 30 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	cfg.OnTransition = func(tr Transition) {
		h.mu.Lock()
		defer h.mu.Unlock()
		s := fmt.Sprintf("%s %v>%v @%v", tr.Backend, tr.From, tr.To, tr.At.Sub(epoch))
		if tr.To == Open {
			s += fmt.Sprintf(" for %v", tr.CoolDown)
		}
		h.trans = append(h.trans, s)
	}
	s, err := New(cfg, h.clk)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	return h
}

// send runs one request to id with outcome o; false when refused.
func (h *harness) send(id string, o Outcome) bool {
	h.t.Helper()
	p, ok := h.s.Acquire(id)
	if ok {
		p.Done(o)
	}
	return ok
}

// transitions returns and clears the recorded transitions.
func (h *harness) transitions() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := strings.Join(h.trans, "; ")
	h.trans = nil
	return s
}

func (h *harness) wantState(id string, want State) {
	h.t.Helper()
	if got := h.s.State(id); got != want {
		h.t.Fatalf("%s is %v, want %v", id, got, want)
	}
}

// Failures among the last Window outcomes open the breaker at the
// Failures-th; successes in between do not reset the count; another
// backend is not affected.
func TestOpensAfterFailuresOfTheWindow(t *testing.T) {
	h := newHarness(t, nil)
	for _, o := range []Outcome{Failure, Success, Failure, Success, Success} {
		h.send("a", o)
	}
	h.wantState("a", Closed)
	h.send("b", Failure)
	h.send("a", Failure)
	h.wantState("a", Open)
	h.wantState("b", Closed)
	if got := h.transitions(); got != "a closed>open @0s for 5s" {
		t.Fatalf("transitions %q", got)
	}
	if h.s.Available("a") || h.send("a", Success) {
		t.Fatal("an open breaker let a request through")
	}
	if !h.s.Available("never-seen") {
		t.Fatal("a backend never seen is unavailable")
	}
}

// Only the last Window outcomes count: failures pushed out by successes
// are forgotten.
func TestOldOutcomesLeaveTheWindow(t *testing.T) {
	h := newHarness(t, nil)
	h.send("a", Failure)
	h.send("a", Failure)
	for range 10 {
		h.send("a", Success)
	}
	h.send("a", Failure)
	h.send("a", Failure)
	h.wantState("a", Closed)
	h.send("a", Failure)
	h.wantState("a", Open)
}

// Failures older than MaxAge do not count, however few outcomes came
// since.
func TestFailuresOlderThanMaxAgeDoNotCount(t *testing.T) {
	h := newHarness(t, nil)
	h.send("a", Failure)
	h.send("a", Failure)
	h.clk.Advance(time.Minute + time.Nanosecond)
	h.send("a", Failure)
	h.send("a", Failure)
	h.wantState("a", Closed)
	if snap := h.s.Snapshot(); len(snap) != 1 || snap[0].Failures != 2 || snap[0].Outcomes != 2 {
		t.Fatalf("snapshot %+v, want 2 recent failures of 2 recent outcomes", snap)
	}
	h.send("a", Failure)
	h.wantState("a", Open)
}

// Ignored outcomes (client gone, load refusals) neither count as failures
// nor push failures out of the window.
func TestIgnoredOutcomesDoNotCount(t *testing.T) {
	h := newHarness(t, nil)
	h.send("a", Failure)
	h.send("a", Failure)
	for range 50 {
		h.send("a", Ignored)
	}
	h.wantState("a", Closed)
	h.send("a", Failure)
	h.wantState("a", Open)
}

// After the cool-down exactly one probe goes; others are refused while it
// is out; its success closes the breaker with an empty window.
func TestHalfOpenLetsOneProbeAndSuccessCloses(t *testing.T) {
	h := newHarness(t, nil)
	for range 3 {
		h.send("a", Failure)
	}
	h.transitions()
	h.clk.Advance(5*time.Second - time.Nanosecond)
	if h.s.Available("a") {
		t.Fatal("available before the cool-down ended")
	}
	h.clk.Advance(time.Nanosecond)
	if !h.s.Available("a") {
		t.Fatal("not available for a probe after the cool-down")
	}
	probe, ok := h.s.Acquire("a")
	if !ok || !probe.Probe() {
		t.Fatalf("probe %+v %v", probe, ok)
	}
	if h.s.Available("a") {
		t.Fatal("available while the probe is out")
	}
	if _, ok := h.s.Acquire("a"); ok {
		t.Fatal("a second request went while the probe is out")
	}
	h.clk.Advance(time.Second)
	probe.Done(Success)
	h.wantState("a", Closed)
	if got := h.transitions(); got != "a open>half_open @5s; a half_open>closed @6s" {
		t.Fatalf("transitions %q", got)
	}
	// The window starts empty: two failures do not reopen it.
	h.send("a", Failure)
	h.send("a", Failure)
	h.wantState("a", Closed)
}

// A failed probe reopens the breaker with the cool-down doubled, up to
// MaxCoolDown; a successful one brings the cool-down back to CoolDown.
func TestFailedProbeDoublesTheCoolDown(t *testing.T) {
	h := newHarness(t, nil)
	for range 3 {
		h.send("a", Failure)
	}
	for _, cd := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 20 * time.Second} {
		h.clk.Advance(cd - time.Nanosecond)
		h.wantState("a", Open)
		h.clk.Advance(time.Nanosecond)
		if !h.send("a", Failure) {
			t.Fatalf("no probe after %v", cd)
		}
	}
	if got := h.transitions(); !strings.HasSuffix(got, "a half_open>open @55s for 20s") ||
		!strings.Contains(got, "a half_open>open @5s for 10s") {
		t.Fatalf("transitions %q", got)
	}
	h.clk.Advance(20 * time.Second)
	h.send("a", Success)
	for range 3 {
		h.send("a", Failure)
	}
	if got := h.transitions(); !strings.HasSuffix(got, "a closed>open @1m15s for 5s") {
		t.Fatalf("transitions after recovery %q", got)
	}
}

// An ignored probe (its client left) frees the probe for the next request
// and leaves the breaker half-open.
func TestIgnoredProbeFreesTheProbe(t *testing.T) {
	h := newHarness(t, nil)
	for range 3 {
		h.send("a", Failure)
	}
	h.clk.Advance(5 * time.Second)
	h.send("a", Ignored)
	h.wantState("a", HalfOpen)
	if !h.s.Available("a") {
		t.Fatal("the probe is still taken after an ignored outcome")
	}
}

// A probe without an outcome for ProbeTimeout no longer blocks the next
// probe; whichever reports first decides, the other is dropped.
func TestProbeTimeoutLetsAnotherProbe(t *testing.T) {
	h := newHarness(t, nil)
	for range 3 {
		h.send("a", Failure)
	}
	h.clk.Advance(5 * time.Second)
	slow, _ := h.s.Acquire("a")
	h.clk.Advance(30*time.Second - time.Nanosecond)
	if h.s.Available("a") {
		t.Fatal("a second probe before ProbeTimeout")
	}
	h.clk.Advance(time.Nanosecond)
	second, ok := h.s.Acquire("a")
	if !ok || !second.Probe() {
		t.Fatal("no second probe after ProbeTimeout")
	}
	second.Done(Success)
	h.wantState("a", Closed)
	slow.Done(Failure) // from the closed epoch's point of view, stale
	h.wantState("a", Closed)
	if snap := h.s.Snapshot(); snap[0].Outcomes != 0 {
		t.Fatalf("the stale probe's outcome was counted: %+v", snap)
	}
}

// Outcomes of requests sent before a transition are dropped: the
// stragglers of the requests in flight when a backend broke cannot reopen
// it once its probe closed it, nor do non-probe permits decide a
// half-open breaker.
func TestStragglersDoNotCount(t *testing.T) {
	h := newHarness(t, nil)
	var inFlight []Permit
	for range 5 {
		p, _ := h.s.Acquire("a")
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight[:3] {
		p.Done(Failure)
	}
	h.wantState("a", Open)
	inFlight[3].Done(Success) // while open: dropped
	h.clk.Advance(5 * time.Second)
	h.wantState("a", HalfOpen)
	inFlight[4].Done(Success) // not the probe: dropped
	h.wantState("a", HalfOpen)
	h.send("a", Success)
	late := []Permit{}
	for range 2 {
		p, _ := h.s.Acquire("a")
		late = append(late, p)
	}
	h.wantState("a", Closed)
	for range 3 {
		inFlight[0].Done(Failure) // from the first closed epoch
	}
	h.wantState("a", Closed)
	for _, p := range late {
		p.Done(Failure)
	}
	h.wantState("a", Closed) // 2 of 3
}

// Forget drops a backend: it comes back closed, and its old permits
// report nothing.
func TestForget(t *testing.T) {
	h := newHarness(t, nil)
	old, _ := h.s.Acquire("a")
	for range 3 {
		h.send("a", Failure)
	}
	h.s.Forget("a")
	h.wantState("a", Closed)
	if !h.send("a", Failure) {
		t.Fatal("a forgotten backend is refused")
	}
	old.Done(Failure)
	old.Done(Failure)
	h.wantState("a", Closed)
	if snap := h.s.Snapshot(); len(snap) != 1 || snap[0].Failures != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
}

// A nil Set is a disabled breaker.
func TestNilSetIsDisabled(t *testing.T) {
	var s *Set
	for range 100 {
		p, ok := s.Acquire("a")
		if !ok {
			t.Fatal("refused")
		}
		p.Done(Failure)
	}
	if !s.Available("a") || s.State("a") != Closed || s.Snapshot() != nil {
		t.Fatal("a nil Set is not always closed")
	}
	s.Forget("a")
	Permit{}.Done(Failure)
}

func TestSnapshot(t *testing.T) {
	h := newHarness(t, nil)
	h.send("b", Success)
	for range 3 {
		h.send("a", Failure)
	}
	snap := h.s.Snapshot()
	if len(snap) != 2 || snap[0].Backend != "a" || snap[0].State != "open" || !snap[0].OpenUntil.Equal(epoch.Add(5*time.Second)) ||
		snap[1].Backend != "b" || snap[1].State != "closed" || snap[1].Outcomes != 1 || snap[1].Failures != 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	h.clk.Advance(5 * time.Second)
	if snap := h.s.Snapshot(); snap[0].State != "half_open" {
		t.Fatalf("snapshot after the cool-down %+v", snap)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Window = 0 }, "Window"},
		{func(c *Config) { c.Window = MaxWindow + 1 }, "Window"},
		{func(c *Config) { c.Failures = 0 }, "Failures"},
		{func(c *Config) { c.Failures = c.Window + 1 }, "Failures"},
		{func(c *Config) { c.MaxAge = 0 }, "MaxAge"},
		{func(c *Config) { c.CoolDown = -time.Second }, "CoolDown"},
		{func(c *Config) { c.MaxCoolDown = c.CoolDown - 1 }, "MaxCoolDown"},
		{func(c *Config) { c.ProbeTimeout = 0 }, "ProbeTimeout"},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
		if _, nerr := New(cfg, clock.NewFake(epoch)); nerr == nil {
			t.Errorf("%s: New accepted it", c.want)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", HalfOpen: "half_open", Open: "open", State(9): "State(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

// Concurrent permits from many goroutines keep the invariants: with every
// outcome a failure, the breaker opens exactly once and at most one probe
// is out at a time. Run with -race.
func TestConcurrentUse(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Window, c.Failures = 100, 50 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if p, ok := h.s.Acquire("a"); ok {
					mu.Lock()
					granted++
					mu.Unlock()
					p.Done(Failure)
				}
				h.s.Available("a")
			}
		})
	}
	wg.Wait()
	if got := h.transitions(); got != "a closed>open @0s for 5s" {
		t.Fatalf("transitions %q", got)
	}
	// 50 failures opened it; permits taken before that may have reported
	// after, so at most 8 more (one per goroutine) were granted.
	if granted < 50 || granted > 58 {
		t.Fatalf("%d permits granted", granted)
	}
}

// AllClosed follows every transition, and Forget of a breaker that is
// not Closed: it is the lock-free test the routing pass relies on.
func TestAllClosedCountsTransitions(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	cfg := DefaultConfig()
	s, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(id string) {
		p, ok := s.Acquire(id)
		if !ok {
			t.Fatalf("%s refused", id)
		}
		p.Done(Failure)
	}
	if !s.AllClosed() || !(*Set)(nil).AllClosed() {
		t.Fatal("a new or nil Set is all closed")
	}
	for range cfg.Failures {
		fail("a")
		fail("b")
	}
	if s.AllClosed() || s.State("a") != Open || s.State("b") != Open {
		t.Fatalf("after failures: all closed %v, a %v, b %v", s.AllClosed(), s.State("a"), s.State("b"))
	}
	s.Forget("a")
	if s.AllClosed() {
		t.Fatal("b is still open")
	}
	clk.Advance(cfg.CoolDown)
	p, ok := s.Acquire("b") // the half-open probe
	if !ok || !p.Probe() {
		t.Fatalf("probe: ok %v probe %v", ok, p.Probe())
	}
	p.Done(Success)
	if !s.AllClosed() || !s.Available("a") || !s.Available("b") {
		t.Fatalf("after the probe closed b: all closed %v", s.AllClosed())
	}
}
