package breaker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// State is where a backend's breaker stands. Its values (0 closed, 1
// half-open, 2 open) and names are what the hub's metrics export: keep them.
type State uint8

const (
	// Closed lets every request through and counts their outcomes.
	Closed State = iota
	// HalfOpen follows a cool-down: one request at a time (the probe)
	// goes through, and its outcome closes or reopens the breaker.
	HalfOpen
	// Open refuses requests until the cool-down ends.
	Open
)

// String is the state's name as metrics and logs show it.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Outcome is what one request's attempt says about its backend. The
// caller classifies; the breaker only counts.
type Outcome uint8

const (
	// Success is an answer from a working backend: a 2xx whose stream
	// ended properly, or a 4xx (the engine judged the request).
	Success Outcome = iota
	// Failure is a backend broken for this request: a tunnel error, a
	// head timeout, a 5xx that is not a load refusal, or a stream that
	// broke after its head.
	Failure
	// Ignored says nothing about the backend's health: the client left,
	// or the backend refused for load (429, a queue-estimate mismatch),
	// which routing already handles and which must not make a busy
	// backend look broken.
	Ignored
)

// Config is the breaker's policy, the same for every backend.
type Config struct {
	// Window is how many of a backend's latest outcomes are judged.
	Window int
	// Failures is how many failures among those open the breaker.
	Failures int
	// MaxAge forgets older outcomes, so failures spread over a long
	// time never add up to an opening.
	MaxAge time.Duration
	// CoolDown is how long an opened breaker refuses before it lets a
	// probe through.
	CoolDown time.Duration
	// MaxCoolDown caps the cool-down, which doubles each time a probe
	// fails and returns to CoolDown when one succeeds.
	MaxCoolDown time.Duration
	// ProbeTimeout is how long a probe may go without an outcome before
	// another probe may go: a probe is a whole request, and a long
	// stream must not keep a recovered backend half-open for its whole
	// length.
	ProbeTimeout time.Duration
	// OnTransition, when set, is told of every change of state. It is
	// called with the Set's lock held, so the order of calls is the
	// order of transitions (a gauge set from it is never stale); it must
	// be quick and must not call the Set.
	OnTransition func(Transition)
}

// DefaultConfig opens a backend after 5 failures among its last 20
// outcomes within a minute, probes it after 5 s, then after 10, 20, 40
// and 60 s while probes fail. Five failures keep a few unlucky requests
// (one engine restart, one broken stream) from excluding a backend, and 20
// outcomes are a few seconds of traffic on a busy backend.
func DefaultConfig() Config {
	return Config{Window: 20, Failures: 5, MaxAge: time.Minute, CoolDown: 5 * time.Second,
		MaxCoolDown: time.Minute, ProbeTimeout: 30 * time.Second}
}

// MaxWindow bounds Window: the memory of a Set is Window outcomes per
// backend.
const MaxWindow = 1000

// Validate reports every invalid field, named as in Config, so the caller
// can map each to its flag.
func (c Config) Validate() error {
	var errs []error
	if c.Window < 1 || c.Window > MaxWindow {
		errs = append(errs, fmt.Errorf("breaker: Window must be 1 to %d, got %d", MaxWindow, c.Window))
	}
	if c.Failures < 1 || c.Failures > c.Window {
		errs = append(errs, fmt.Errorf("breaker: Failures must be 1 to Window (%d), got %d", c.Window, c.Failures))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"MaxAge", c.MaxAge}, {"CoolDown", c.CoolDown}, {"ProbeTimeout", c.ProbeTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("breaker: %s must be > 0, got %v", d.name, d.v))
		}
	}
	if c.MaxCoolDown < c.CoolDown {
		errs = append(errs, fmt.Errorf("breaker: MaxCoolDown must be >= CoolDown (%v), got %v", c.CoolDown, c.MaxCoolDown))
	}
	return errors.Join(errs...)
}

// Transition is one change of a backend's state.
type Transition struct {
	Backend  string
	From, To State
	At       time.Time
	// CoolDown is the refusal that starts when To is Open.
	CoolDown time.Duration
}

// Set holds one breaker per backend id. It is safe for concurrent use. A
// nil *Set is a disabled breaker: every backend is available and every
// permit is granted.
type Set struct {
	cfg Config
	clk clock.Clock
	// mu guards m and every breaker in it. One lock for all backends is
	// enough: each call is a few comparisons, and Available, Acquire and
	// Done are each called once per attempt.
	mu sync.Mutex
	m  map[string]*breaker
	// epochs numbers every breaker's epochs across the Set, so a breaker
	// created again after Forget never reuses an epoch its permits carry.
	epochs uint64
	// notClosed counts the breakers not Closed. The routing pass asks
	// AllClosed before anything else, so while every backend is healthy
	// (nearly always) no request takes the lock to filter candidates.
	notClosed atomic.Int64
}

// breaker is one backend's state.
type breaker struct {
	state State
	// epoch is renewed on every transition: a permit taken in an
	// earlier epoch reports nothing, so the late failures of requests
	// sent before an opening cannot reopen a breaker its probe just
	// closed.
	epoch uint64
	// ring holds the latest outcomes in Closed, oldest overwritten first.
	ring []record
	next int
	// openedAt and coolDown time the refusal in Open; coolDown is kept
	// through HalfOpen so a failed probe can double it.
	openedAt time.Time
	coolDown time.Duration
	// probeAt is when the outstanding probe went (zero: none) in
	// HalfOpen.
	probeAt time.Time
}

type record struct {
	at     time.Time
	failed bool
}

// New returns an empty Set, every backend closed until its outcomes say
// otherwise.
func New(cfg Config, clk clock.Clock) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Set{cfg: cfg, clk: clk, m: map[string]*breaker{}}, nil
}

// Permit is the right to send one request to a backend, taken with
// Acquire. Its Done must be called once, with the attempt's outcome. The
// zero Permit reports nothing.
type Permit struct {
	s     *Set
	id    string
	epoch uint64
	probe bool
}

// Probe reports whether this request is its backend's half-open probe.
func (p Permit) Probe() bool { return p.probe }

// Available reports whether backend id would be granted a permit now,
// without taking one: the caller filters its candidates with it and then
// calls Acquire on the one it chose. A backend the Set has not seen is
// available.
func (s *Set) Available(id string) bool {
	if s == nil || s.notClosed.Load() == 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[id]
	if b == nil {
		return true
	}
	now := s.clk.Now()
	s.advance(id, b, now)
	switch b.state {
	case Closed:
		return true
	case HalfOpen:
		return s.probeFree(b, now)
	}
	return false
}

// AllClosed reports, without a lock, whether every backend's breaker is
// Closed (a nil Set always is): then no candidate needs filtering.
func (s *Set) AllClosed() bool { return s == nil || s.notClosed.Load() == 0 }

// Acquire takes a permit for one request to backend id: always in Closed,
// for the one probe in HalfOpen, never in Open. A caller refused here
// (another request took the probe since Available) treats the backend as
// unavailable.
func (s *Set) Acquire(id string) (Permit, bool) {
	if s == nil {
		return Permit{}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[id]
	if b == nil {
		s.epochs++
		b = &breaker{epoch: s.epochs, ring: make([]record, 0, s.cfg.Window), coolDown: s.cfg.CoolDown}
		s.m[id] = b
	}
	now := s.clk.Now()
	s.advance(id, b, now)
	switch b.state {
	case Closed:
		return Permit{s: s, id: id, epoch: b.epoch}, true
	case HalfOpen:
		if s.probeFree(b, now) {
			b.probeAt = now
			return Permit{s: s, id: id, epoch: b.epoch, probe: true}, true
		}
	}
	return Permit{}, false
}

// Done reports the permit's outcome. In Closed it joins the window and
// may open the breaker; in HalfOpen only the probe's counts: Success
// closes, Failure reopens with the cool-down doubled, Ignored frees the
// probe for another request. Outcomes of permits taken before the
// latest transition are dropped.
func (p Permit) Done(o Outcome) {
	s := p.s
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[p.id]
	if b == nil || b.epoch != p.epoch {
		return
	}
	now := s.clk.Now()
	switch b.state {
	case Closed:
		if o == Ignored {
			return
		}
		b.record(now, o == Failure, s.cfg.Window)
		if b.failures(now, s.cfg.MaxAge) >= s.cfg.Failures {
			s.transition(p.id, b, Open, now)
		}
	case HalfOpen:
		if !p.probe {
			return
		}
		b.probeAt = time.Time{}
		switch o {
		case Success:
			b.coolDown = s.cfg.CoolDown
			s.transition(p.id, b, Closed, now)
		case Failure:
			b.coolDown = min(2*b.coolDown, s.cfg.MaxCoolDown)
			s.transition(p.id, b, Open, now)
		}
	}
}

// State is backend id's state now (Closed for a backend never seen).
func (s *Set) State(id string) State {
	if s == nil {
		return Closed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[id]
	if b == nil {
		return Closed
	}
	s.advance(id, b, s.clk.Now())
	return b.state
}

// Forget drops backend id's breaker, when its tunnel closes: the Set
// holds only live backends, and a pylon that comes back starts closed
// (its reconnection is news the breaker cannot judge). Permits still out
// for it report nothing.
func (s *Set) Forget(id string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.m[id]; b != nil && b.state != Closed {
		s.notClosed.Add(-1)
	}
	delete(s.m, id)
}

// BackendState is one backend's breaker as a debug page shows it.
type BackendState struct {
	Backend string `json:"backend_id"`
	State   string `json:"state"`
	// Outcomes and Failures count the window's outcomes within MaxAge
	// (Closed only).
	Outcomes int `json:"outcomes"`
	Failures int `json:"failures"`
	// OpenUntil is when an Open breaker lets a probe through.
	OpenUntil time.Time `json:"open_until,omitzero"`
	// CoolDown is the refusal period of the next (or current) opening.
	CoolDown time.Duration `json:"cool_down_ns"`
}

// Snapshot lists every backend the Set holds, by id.
func (s *Set) Snapshot() []BackendState {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	out := make([]BackendState, 0, len(s.m))
	for id, b := range s.m {
		s.advance(id, b, now)
		bs := BackendState{Backend: id, State: b.state.String(), CoolDown: b.coolDown}
		switch b.state {
		case Closed:
			for _, r := range b.ring {
				if now.Sub(r.at) <= s.cfg.MaxAge {
					bs.Outcomes++
				}
			}
			bs.Failures = b.failures(now, s.cfg.MaxAge)
		case Open:
			bs.OpenUntil = b.openedAt.Add(b.coolDown)
		}
		out = append(out, bs)
	}
	slices.SortFunc(out, func(a, b BackendState) int { return cmp.Compare(a.Backend, b.Backend) })
	return out
}

// advance moves an Open breaker whose cool-down is over to HalfOpen. It is
// applied whenever a breaker is looked at, so no timer runs per backend.
func (s *Set) advance(id string, b *breaker, now time.Time) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.coolDown)) {
		s.transition(id, b, HalfOpen, now)
	}
}

// probeFree reports whether a HalfOpen breaker may send a probe: none is
// out, or the one out has gone ProbeTimeout without an outcome.
func (s *Set) probeFree(b *breaker, now time.Time) bool {
	return b.probeAt.IsZero() || now.Sub(b.probeAt) >= s.cfg.ProbeTimeout
}

// transition changes b's state, starts a new epoch and tells OnTransition.
func (s *Set) transition(id string, b *breaker, to State, now time.Time) {
	from := b.state
	b.state = to
	switch {
	case from == Closed && to != Closed:
		s.notClosed.Add(1)
	case from != Closed && to == Closed:
		s.notClosed.Add(-1)
	}
	s.epochs++
	b.epoch = s.epochs
	b.probeAt = time.Time{}
	switch to {
	case Open:
		b.openedAt = now
	case Closed:
		b.ring, b.next = b.ring[:0], 0
	}
	if s.cfg.OnTransition != nil {
		t := Transition{Backend: id, From: from, To: to, At: now}
		if to == Open {
			t.CoolDown = b.coolDown
		}
		s.cfg.OnTransition(t)
	}
}

// record adds an outcome, overwriting the oldest once window are held.
func (b *breaker) record(now time.Time, failed bool, window int) {
	r := record{at: now, failed: failed}
	if len(b.ring) < window {
		b.ring = append(b.ring, r)
		return
	}
	b.ring[b.next] = r
	b.next = (b.next + 1) % window
}

// failures counts the window's failures no older than maxAge.
func (b *breaker) failures(now time.Time, maxAge time.Duration) int {
	n := 0
	for _, r := range b.ring {
		if r.failed && now.Sub(r.at) <= maxAge {
			n++
		}
	}
	return n
}
