package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Canonical suite names (docs/loadgen.md#workloads-and-suites).
const (
	SuiteSmoke       = "smoke"
	SuiteCapacity    = "capacity"
	SuiteSessions    = "sessions"
	SuiteHighContext = "high-context"
	SuiteMixed       = "mixed"
)

// Suites lists the canonical suites in the order upstream Stargate's
// campaign runs them.
var Suites = []string{SuiteSmoke, SuiteCapacity, SuiteSessions, SuiteHighContext, SuiteMixed}

// CapacityRates are upstream Stargate's campaign's open-loop target rates
// (req/s), kept so our results compare with its published ones; a capacity
// campaign generates one workload per rate.
var CapacityRates = []float64{8, 16, 24, 32, 48}

// Arrival processes of the open-loop suites.
const (
	// ArrivalUniform spaces requests exactly 1/rate apart; it is the
	// default because its request count and AtMs offsets are exact
	// integers on every platform.
	ArrivalUniform = "uniform"
	// ArrivalPoisson draws exponential gaps (math.Log), burstier and closer
	// to real traffic.
	ArrivalPoisson = "poisson"
)

// SuiteParams are the knobs of the suite generators. A zero field takes
// the suite's default (DefaultsFor); the defaults run on one 2-core machine
// against the mock fleet in about a minute, except capacity and
// high-context, whose defaults are upstream Stargate's campaign's.
type SuiteParams struct {
	// Seed makes the workload: the same seed and params give the same
	// bytes.
	Seed uint64
	// Model is written in the header and sent in every request.
	Model string
	// Rate is the capacity suite's target rate in req/s.
	Rate float64
	// Duration is the open-loop send window (capacity, mixed).
	Duration time.Duration
	// Workers is the closed-loop worker count (smoke, sessions,
	// high-context).
	Workers int
	// Sessions is the number of sessions of the sessions suite.
	Sessions int
	// Turns is the number of turns per session of the sessions and
	// capacity suites.
	Turns int
	// Interleave is how many sessions a sessions-suite worker keeps open
	// at once, sending their turns round robin.
	Interleave int
	// Scale multiplies every token size (high-context: 0.1 turns the
	// 120k-token sessions into 12k ones).
	Scale float64
	// FirstTokens is the mean size of a session's first user message.
	FirstTokens int
	// TurnTokens is the mean size of a later turn's new user message.
	TurnTokens int
	// OutputTokens is the mean reply length.
	OutputTokens int
	// AnonShare is the share of anonymous one-shot requests mixed in
	// (0..1); a negative value means none.
	AnonShare float64
	// Arrival is the open-loop arrival process (Arrival*).
	Arrival string
}

// DefaultsFor returns the defaults of suite; Generate fills every zero
// field of its params from them.
func DefaultsFor(suite string) (SuiteParams, error) {
	p := SuiteParams{Model: "dummy-model", Scale: 1, Arrival: ArrivalUniform}
	switch suite {
	case SuiteSmoke:
		p.Workers, p.FirstTokens, p.TurnTokens, p.OutputTokens = 4, 300, 50, 16
	case SuiteCapacity:
		p.Rate, p.Duration, p.Turns = 8, 120*time.Second, 3
		p.FirstTokens, p.TurnTokens, p.OutputTokens, p.AnonShare = 1000, 100, 32, 0.1
	case SuiteSessions:
		p.Workers, p.Sessions, p.Turns, p.Interleave = 16, 128, 6, 2
		p.FirstTokens, p.TurnTokens, p.OutputTokens, p.AnonShare = 1500, 150, 48, 0.1
	case SuiteHighContext:
		p.Workers, p.OutputTokens = 32, 64
	case SuiteMixed:
		p.Duration, p.OutputTokens, p.AnonShare = 60*time.Second, 32, 0.2
	default:
		return p, fmt.Errorf("unknown suite %q (want one of %v)", suite, Suites)
	}
	return p, nil
}

// fill sets every zero field of p from d.
func (p *SuiteParams) fill(d SuiteParams) {
	if p.Model == "" {
		p.Model = d.Model
	}
	if p.Rate == 0 {
		p.Rate = d.Rate
	}
	if p.Duration == 0 {
		p.Duration = d.Duration
	}
	if p.Workers == 0 {
		p.Workers = d.Workers
	}
	if p.Sessions == 0 {
		p.Sessions = d.Sessions
	}
	if p.Turns == 0 {
		p.Turns = d.Turns
	}
	if p.Interleave == 0 {
		p.Interleave = d.Interleave
	}
	if p.Scale == 0 {
		p.Scale = d.Scale
	}
	if p.FirstTokens == 0 {
		p.FirstTokens = d.FirstTokens
	}
	if p.TurnTokens == 0 {
		p.TurnTokens = d.TurnTokens
	}
	if p.OutputTokens == 0 {
		p.OutputTokens = d.OutputTokens
	}
	if p.AnonShare == 0 {
		p.AnonShare = d.AnonShare
	}
	p.AnonShare = max(p.AnonShare, 0)
	if p.Arrival == "" {
		p.Arrival = d.Arrival
	}
}

// validate names the field (as its loadgen flag) of the first bad value.
func (p *SuiteParams) validate(suite string) error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if !(p.Scale > 0) || math.IsInf(p.Scale, 0) {
		bad("scale", "must be a finite number > 0, got %v", p.Scale)
	}
	if p.AnonShare > 1 || math.IsNaN(p.AnonShare) {
		bad("anon-share", "must be in 0..1, got %v", p.AnonShare)
	}
	if p.Arrival != ArrivalUniform && p.Arrival != ArrivalPoisson {
		bad("arrival", "want %s or %s, got %q", ArrivalUniform, ArrivalPoisson, p.Arrival)
	}
	switch suite {
	case SuiteCapacity:
		if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
			bad("rate", "must be a finite rate > 0 req/s, got %v", p.Rate)
		}
		if p.Turns < 1 {
			bad("turns", "must be >= 1, got %d", p.Turns)
		}
	case SuiteSessions:
		if p.Sessions < 1 {
			bad("sessions", "must be >= 1, got %d", p.Sessions)
		}
		if p.Turns < 1 {
			bad("turns", "must be >= 1, got %d", p.Turns)
		}
		if p.Interleave < 1 {
			bad("interleave", "must be >= 1, got %d", p.Interleave)
		}
	}
	if (suite == SuiteCapacity || suite == SuiteMixed) && p.Duration < time.Millisecond {
		bad("duration", "must be >= 1ms, got %v", p.Duration)
	}
	if (suite == SuiteSmoke || suite == SuiteSessions || suite == SuiteHighContext) && p.Workers < 1 {
		bad("workers", "must be >= 1, got %d", p.Workers)
	}
	for _, f := range []struct {
		flag string
		v    int
	}{{"first-tokens", p.FirstTokens}, {"turn-tokens", p.TurnTokens}, {"output-tokens", p.OutputTokens}} {
		if f.v < 0 {
			bad(f.flag, "must be >= 0 (0 = suite default), got %d", f.v)
		}
	}
	return errors.Join(errs...)
}

// Generate builds the canonical suite from p (zero fields take the
// suite's defaults). The result depends only on suite and p: the same seed
// gives a byte-identical file.
func Generate(suite string, p SuiteParams) (*Workload, error) {
	d, err := DefaultsFor(suite)
	if err != nil {
		return nil, err
	}
	p.fill(d)
	if err := p.validate(suite); err != nil {
		return nil, err
	}
	g := &gen{p: p, rng: newRNG(p.Seed, suite)}
	var w *Workload
	switch suite {
	case SuiteSmoke:
		w = g.smoke()
	case SuiteCapacity:
		w = g.capacity()
	case SuiteSessions:
		w = g.sessions()
	case SuiteHighContext:
		w = g.highContext()
	case SuiteMixed:
		w = g.mixed()
	}
	w.Header.V = Version
	w.Header.Suite = suite
	w.Header.Seed = p.Seed
	w.Header.Model = p.Model
	if w.Header.Params == nil {
		w.Header.Params = map[string]any{}
	}
	for i := range w.Requests {
		w.Requests[i].Index = i
		if err := w.Requests[i].Validate(&w.Header); err != nil {
			return nil, fmt.Errorf("generator bug: %w", err)
		}
	}
	return w, nil
}

// rng is a PCG stream with our own integer and float derivations, so the
// sequence does not depend on how math/rand/v2 maps words to ranges.
type rng struct{ pcg *rand.PCG }

func newRNG(seed uint64, suite string) *rng {
	var h uint64 = 14695981039346656037 // FNV-1a of the suite name
	for i := range len(suite) {
		h ^= uint64(suite[i])
		h *= 1099511628211
	}
	return &rng{pcg: rand.NewPCG(seed, h)}
}

// float returns a number in [0, 1).
func (r *rng) float() float64 { return float64(r.pcg.Uint64()>>11) / (1 << 53) }

// intn returns a number in [0, n).
func (r *rng) intn(n int) int { return int(r.pcg.Uint64() % uint64(n)) }

// around returns mean·scale ±25 %, at least 1, with integer arithmetic
// only.
func (r *rng) around(mean int, scale float64) int {
	m := max(int(math.Round(float64(mean)*scale)), 1)
	spread := m / 4
	if spread == 0 {
		return m
	}
	return max(m-spread+r.intn(2*spread+1), 1)
}

type gen struct {
	p   SuiteParams
	rng *rng
}

// source picks how a session names itself: mostly prompt_cache_key, some
// Responses conversation ids, some x-multi-turn-session-id headers. A
// conversation id only exists on /v1/responses
// (docs/design/sessions.md#session-sources).
func (g *gen) source() (source, endpoint string) {
	switch x := g.rng.intn(20); {
	case x < 15:
		return SourcePromptCacheKey, "chat"
	case x < 18:
		return SourceConversation, "responses"
	default:
		return SourceHeader, "chat"
	}
}

func anonymous(worker int, atMs int64, stream string, in, out int) Request {
	return Request{Worker: worker, AtMs: atMs, Turn: 1, Source: SourceNone, Stream: stream, Endpoint: "chat", NewInputTokens: in, OutputTokens: out}
}

// smoke is 32 requests on 4 workers: 8 three-turn sessions covering every
// source and both endpoints, then 8 anonymous requests.
func (g *gen) smoke() *Workload {
	p := g.p
	sources := []string{SourcePromptCacheKey, SourcePromptCacheKey, SourceConversation, SourcePromptCacheKey,
		SourceHeader, SourcePromptCacheKey, SourceConversation, SourcePromptCacheKey}
	var reqs []Request
	for s, src := range sources {
		ep := "chat"
		if src == SourceConversation {
			ep = "responses"
		}
		for t := 1; t <= 3; t++ {
			in := p.TurnTokens
			if t == 1 {
				in = p.FirstTokens
			}
			reqs = append(reqs, Request{Worker: s % p.Workers, Session: fmt.Sprintf("smoke-%02d", s), Turn: t, Source: src, Endpoint: ep,
				NewInputTokens: g.rng.around(in, p.Scale), OutputTokens: g.rng.around(p.OutputTokens, 1)})
		}
	}
	for i := range 8 {
		reqs = append(reqs, anonymous(i%p.Workers, 0, "", g.rng.around(p.FirstTokens, p.Scale), g.rng.around(p.OutputTokens, 1)))
	}
	return &Workload{Header: Header{Mode: ModeClosed, Workers: p.Workers, Params: map[string]any{
		"workers": p.Workers, "first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens, "scale": p.Scale,
	}}, Requests: reqs}
}

// sessions is the closed-loop multi-turn suite: each worker owns the
// sessions s with s mod workers = worker and works through them
// Interleave at a time, sending their turns round robin, so every prompt
// re-sends a conversation that grew since the last turn and caches must
// hold several sessions at once. After each turn an anonymous request
// follows with probability AnonShare.
func (g *gen) sessions() *Workload {
	p := g.p
	type sess struct {
		id, src, ep string
	}
	owned := make([][]sess, p.Workers)
	for s := range p.Sessions {
		src, ep := g.source()
		owned[s%p.Workers] = append(owned[s%p.Workers], sess{fmt.Sprintf("sess-%04d", s), src, ep})
	}
	var reqs []Request
	for w, list := range owned {
		for b := 0; b < len(list); b += p.Interleave {
			batch := list[b:min(b+p.Interleave, len(list))]
			for t := 1; t <= p.Turns; t++ {
				for _, s := range batch {
					in := p.TurnTokens
					if t == 1 {
						in = p.FirstTokens
					}
					reqs = append(reqs, Request{Worker: w, Session: s.id, Turn: t, Source: s.src, Endpoint: s.ep,
						NewInputTokens: g.rng.around(in, p.Scale), OutputTokens: g.rng.around(p.OutputTokens, 1)})
					if g.rng.float() < p.AnonShare {
						reqs = append(reqs, anonymous(w, 0, "", g.rng.around(p.FirstTokens, p.Scale), g.rng.around(p.OutputTokens, 1)))
					}
				}
			}
		}
	}
	return &Workload{Header: Header{Mode: ModeClosed, Workers: p.Workers, Params: map[string]any{
		"workers": p.Workers, "sessions": p.Sessions, "turns": p.Turns, "interleave": p.Interleave,
		"first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}

// HighContextTotals are the total input tokens of the three turns of the
// high-context session classes, before scaling: each worker owns six
// "large" sessions, one "medium" and one "small".
var HighContextTotals = map[string][3]int{
	"large":  {80_000, 100_000, 120_000},
	"medium": {8_000, 16_000, 24_000},
	"small":  {1_000, 2_000, 4_000},
}

// highContext is the closed-loop long-prompt suite: each worker owns 8
// ordered 3-turn sessions (six large, one medium, one small, in a seeded
// order per worker) and finishes one before it starts the next. A turn's
// total input is the class total times Scale; its new message is that
// total minus everything the conversation already holds (earlier messages
// and replies), at least 1 token.
func (g *gen) highContext() *Workload {
	p := g.p
	classes := []string{"large", "large", "large", "large", "large", "large", "medium", "small"}
	var reqs []Request
	for w := range p.Workers {
		order := slices.Clone(classes)
		for i := len(order) - 1; i > 0; i-- { // Fisher-Yates
			j := g.rng.intn(i + 1)
			order[i], order[j] = order[j], order[i]
		}
		for s, class := range order {
			src, ep := g.source()
			id := fmt.Sprintf("hc-w%02d-s%d-%s", w, s, class)
			held := 0 // tokens the conversation holds before this turn
			for t, total := range HighContextTotals[class] {
				want := max(int(math.Round(float64(total)*p.Scale)), 1)
				in := max(want-held, 1)
				reqs = append(reqs, Request{Worker: w, Session: id, Turn: t + 1, Source: src, Endpoint: ep, NewInputTokens: in, OutputTokens: p.OutputTokens})
				held += in + p.OutputTokens
			}
		}
	}
	return &Workload{Header: Header{Mode: ModeClosed, Workers: p.Workers, Params: map[string]any{
		"workers": p.Workers, "scale": p.Scale, "output_tokens": p.OutputTokens,
		// Upstream Stargate's campaign's budgets; loadgen uses them as
		// request SLO, routing wait and client timeout.
		"request_slo_ms": 60_000, "max_wait_ms": 60_000, "client_timeout_ms": 90_000,
	}}, Requests: reqs}
}

// openStream describes one open-loop stream of sessions.
type openStream struct {
	label        string
	rate         float64
	turns        int
	gapMs        int64 // least time between two turns of a session
	first, turn  int   // mean new-message sizes
	out          int
	anonShare    float64
	prefix       string // session id prefix
	sessionCount int
}

// arrivals returns the send offsets of an open-loop stream in [0,
// duration).
func (g *gen) arrivals(rate float64, duration time.Duration) []int64 {
	durMs := duration.Milliseconds()
	var at []int64
	if g.p.Arrival == ArrivalPoisson {
		t := 0.0
		for {
			t += -math.Log(1-g.rng.float()) * 1000 / rate
			if int64(t) >= durMs {
				return at
			}
			at = append(at, int64(t))
		}
	}
	n := int64(math.Floor(rate * float64(durMs) / 1000))
	for i := range n {
		at = append(at, int64(math.Floor(float64(i)*1000/rate)))
	}
	return at
}

// stream fills the arrivals of s: each arrival is anonymous with
// probability anonShare, else the next turn of the session that has
// waited longest since its last turn (at least gapMs), else the first turn
// of a new session.
func (g *gen) stream(s *openStream, duration time.Duration) []Request {
	type open struct {
		id, src, ep string
		next        int
		readyAt     int64
	}
	var waiting []*open // FIFO by readyAt
	var reqs []Request
	for _, at := range g.arrivals(s.rate, duration) {
		if g.rng.float() < s.anonShare {
			reqs = append(reqs, anonymous(0, at, s.label, g.rng.around(s.first, g.p.Scale), g.rng.around(s.out, 1)))
			continue
		}
		var o *open
		if len(waiting) > 0 && waiting[0].readyAt <= at {
			o, waiting = waiting[0], waiting[1:]
		} else {
			src, ep := g.source()
			o = &open{id: fmt.Sprintf("%s-%05d", s.prefix, s.sessionCount), src: src, ep: ep, next: 1}
			s.sessionCount++
		}
		in := s.turn
		if o.next == 1 {
			in = s.first
		}
		reqs = append(reqs, Request{AtMs: at, Session: o.id, Turn: o.next, Source: o.src, Stream: s.label, Endpoint: o.ep,
			NewInputTokens: g.rng.around(in, g.p.Scale), OutputTokens: g.rng.around(s.out, 1)})
		if o.next++; o.next <= s.turns {
			o.readyAt = at + s.gapMs
			waiting = append(waiting, o)
		}
	}
	return reqs
}

// capacity is an open-loop stream at Rate for Duration: three-turn
// sessions (turns at least 2 s apart) and a share of anonymous requests.
func (g *gen) capacity() *Workload {
	p := g.p
	s := &openStream{rate: p.Rate, turns: p.Turns, gapMs: 2000, first: p.FirstTokens, turn: p.TurnTokens, out: p.OutputTokens,
		anonShare: p.AnonShare, prefix: fmt.Sprintf("cap%g", p.Rate)}
	reqs := g.stream(s, p.Duration)
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"target_rate": p.Rate, "duration_ms": p.Duration.Milliseconds(), "turns": p.Turns, "arrival": p.Arrival,
		"first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}

// Mixed stream rates (req/s), upstream Stargate's campaign's caps.
const (
	MixedHotRate   = 8
	MixedShortRate = 4
)

// mixed runs two open-loop streams at once: "hot", long sessions (12
// turns, 4k-token first message, at least 1.5 s between turns) at 8 req/s,
// and "short", two-turn sessions of small prompts with a share of
// anonymous requests at 4 req/s. Requests are merged by send time.
func (g *gen) mixed() *Workload {
	p := g.p
	hot := &openStream{label: "hot", rate: MixedHotRate, turns: 12, gapMs: 1500, first: 4000, turn: 200, out: p.OutputTokens, prefix: "hot"}
	short := &openStream{label: "short", rate: MixedShortRate, turns: 2, gapMs: 1000, first: 500, turn: 100, out: max(p.OutputTokens/2, 1),
		anonShare: p.AnonShare, prefix: "short"}
	reqs := g.stream(hot, p.Duration)
	reqs = append(reqs, g.stream(short, p.Duration)...)
	slices.SortStableFunc(reqs, func(a, b Request) int { return int(a.AtMs - b.AtMs) })
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"hot_rate": MixedHotRate, "short_rate": MixedShortRate, "target_rate": MixedHotRate + MixedShortRate,
		"duration_ms": p.Duration.Milliseconds(), "arrival": p.Arrival, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}
