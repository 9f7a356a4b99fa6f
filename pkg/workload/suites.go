package workload

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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
	// The prefix suites link requests by content instead of session keys
	// (docs/loadgen.md#prefix-suites).
	SuiteSharedPrefix = "shared-prefix"
	SuiteRAG          = "rag"
	SuiteAnonSessions = "anon-sessions"
	SuitePrefixMix    = "prefix-mix"
)

// Suites lists the canonical suites: upstream Stargate's campaign's, in
// the order it runs them, then our prefix suites.
var Suites = []string{SuiteSmoke, SuiteCapacity, SuiteSessions, SuiteHighContext, SuiteMixed,
	SuiteSharedPrefix, SuiteRAG, SuiteAnonSessions, SuitePrefixMix}

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
	// to real traffic; the default of the open-loop sessions suite.
	ArrivalPoisson = "poisson"
)

// Rate bounds of every open-loop suite (req/s): below the lowest, offsets
// in milliseconds would overflow long before a workload ends; above the
// highest, most requests would share their millisecond.
const (
	MinRate = 0.001
	MaxRate = 1e6
)

// SuiteParams are the knobs of the suite generators. A zero field takes
// the suite's default (DefaultsFor); the defaults run on one 2-core machine
// against the mock fleet in about a minute, except capacity and
// high-context, whose defaults are upstream Stargate's campaign's.
type SuiteParams struct {
	// Seed makes the workload: the same seed and params give the same
	// bytes.
	Seed uint64
	// Salt is mixed with Seed into every name the workload carries
	// (session ids, which are also its prompt_cache_keys, conversation
	// ids and x-multi-turn-session-id values, and shared prefix names)
	// and so into every prompt: two seeds, or two salts, never share a key
	// or a cached prefix.
	Salt string
	// Model is written in the header and sent in every request.
	Model string
	// Rate is the open-loop target rate in requests per second: capacity's
	// rate, mixed's and prefix-mix's total (split between their streams),
	// the other prefix suites' rate, and for sessions the switch to open
	// loop (0 keeps it closed loop on Workers).
	Rate float64
	// ThinkTime is the least time between the scheduled sends of two
	// turns of one conversation in the capacity suite, the open-loop
	// sessions suite and the prefix suites.
	ThinkTime time.Duration
	// Duration is the open-loop send window (capacity, mixed,
	// shared-prefix, rag, prefix-mix).
	Duration time.Duration
	// Workers is the closed-loop worker count (smoke, sessions,
	// high-context).
	Workers int
	// Sessions is the number of sessions of the sessions and
	// anon-sessions suites.
	Sessions int
	// Turns is the number of turns per session of the sessions,
	// anon-sessions and capacity suites, and the most questions of a rag
	// conversation.
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
	// Prompts is the number of shared system prompts (shared-prefix,
	// prefix-mix); PromptTokens their mean size: each is drawn uniformly
	// within a third of it (3000: 2k to 4k tokens), times Scale.
	Prompts      int
	PromptTokens int
	// Docs is the number of shared documents (rag, prefix-mix); DocTokens
	// their mean size, drawn as PromptTokens.
	Docs      int
	DocTokens int
	// Zipf is the popularity exponent of the prompts and documents: the
	// k-th most popular is picked with weight k^-Zipf; a negative value
	// means 0 (every one alike).
	Zipf float64
	// FollowUps is the share of rag conversations that ask more than one
	// question about their document (2 to Turns questions, each re-sending
	// the conversation so far); a negative value means none.
	FollowUps float64
}

// DefaultsFor returns the defaults of suite; Generate fills every zero
// field of its params from them.
func DefaultsFor(suite string) (SuiteParams, error) {
	p := SuiteParams{Model: "dummy-model", Scale: 1, Arrival: ArrivalUniform}
	switch suite {
	case SuiteSmoke:
		p.Workers, p.FirstTokens, p.TurnTokens, p.OutputTokens = 4, 300, 50, 16
	case SuiteCapacity:
		p.Rate, p.Duration, p.Turns, p.ThinkTime = 8, 120*time.Second, 3, 2*time.Second
		p.FirstTokens, p.TurnTokens, p.OutputTokens, p.AnonShare = 1000, 100, 32, 0.1
	case SuiteSessions:
		p.Workers, p.Sessions, p.Turns, p.Interleave = 16, 128, 6, 2
		p.FirstTokens, p.TurnTokens, p.OutputTokens, p.AnonShare = 1500, 150, 48, 0.1
		// Open loop only (a Rate given): Poisson arrivals, turns of a
		// session at least as far apart as capacity's.
		p.Arrival, p.ThinkTime = ArrivalPoisson, 2*time.Second
	case SuiteHighContext:
		p.Workers, p.OutputTokens = 32, 64
	case SuiteMixed:
		p.Rate, p.Duration, p.OutputTokens, p.AnonShare = MixedHotRate+MixedShortRate, 60*time.Second, 32, 0.2
	case SuiteSharedPrefix:
		p.Rate, p.Duration, p.Arrival = 10, 60*time.Second, ArrivalPoisson
		p.Prompts, p.PromptTokens, p.Zipf = sharedPrompts, sharedPromptTokens, 1
		p.FirstTokens, p.OutputTokens = sharedQuestionTokens, sharedOutputTokens
	case SuiteRAG:
		p.Rate, p.Duration, p.Arrival, p.ThinkTime = 8, 60*time.Second, ArrivalPoisson, 2*time.Second
		p.Docs, p.DocTokens, p.Zipf, p.Turns, p.FollowUps = ragDocs, ragDocTokens, 1, ragTurns, ragFollowUps
		p.FirstTokens, p.TurnTokens, p.OutputTokens = ragQuestionTokens, ragFollowUpTokens, ragOutputTokens
	case SuiteAnonSessions:
		// The sessions suite's sessions, open loop, without their keys.
		p.Rate, p.Arrival, p.ThinkTime = 8, ArrivalPoisson, 2*time.Second
		p.Sessions, p.Turns, p.FirstTokens, p.TurnTokens, p.OutputTokens = 128, 6, 1500, 150, 48
	case SuitePrefixMix:
		p.Rate, p.Duration, p.Arrival, p.ThinkTime = 12, 60*time.Second, ArrivalPoisson, 2*time.Second
		p.Prompts, p.PromptTokens, p.Docs, p.DocTokens, p.Zipf = sharedPrompts, sharedPromptTokens, ragDocs, ragDocTokens, 1
		p.FollowUps = ragFollowUps
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
	if p.ThinkTime == 0 {
		p.ThinkTime = d.ThinkTime
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
	if p.Prompts == 0 {
		p.Prompts = d.Prompts
	}
	if p.PromptTokens == 0 {
		p.PromptTokens = d.PromptTokens
	}
	if p.Docs == 0 {
		p.Docs = d.Docs
	}
	if p.DocTokens == 0 {
		p.DocTokens = d.DocTokens
	}
	if p.Zipf == 0 {
		p.Zipf = d.Zipf
	}
	p.Zipf = max(p.Zipf, 0)
	if p.FollowUps == 0 {
		p.FollowUps = d.FollowUps
	}
	p.FollowUps = max(p.FollowUps, 0)
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
	rateOK := p.Rate >= MinRate && p.Rate <= MaxRate
	switch suite {
	case SuiteCapacity, SuiteMixed, SuiteSharedPrefix, SuiteRAG, SuiteAnonSessions, SuitePrefixMix:
		if !rateOK {
			bad("rate", "must be a rate in %v..%v req/s, got %v", MinRate, MaxRate, p.Rate)
		}
	case SuiteSessions:
		if p.Rate != 0 && !rateOK {
			bad("rate", "must be 0 (closed loop) or a rate in %v..%v req/s, got %v", MinRate, MaxRate, p.Rate)
		}
	}
	if p.ThinkTime < 0 {
		bad("think-time", "must be >= 0 (0 = suite default), got %v", p.ThinkTime)
	}
	switch suite {
	case SuiteCapacity:
		if p.Turns < 1 {
			bad("turns", "must be >= 1, got %d", p.Turns)
		}
	case SuiteSessions, SuiteAnonSessions:
		if p.Sessions < 1 {
			bad("sessions", "must be >= 1, got %d", p.Sessions)
		}
		if p.Turns < 1 {
			bad("turns", "must be >= 1, got %d", p.Turns)
		}
		if suite == SuiteSessions && p.Interleave < 1 {
			bad("interleave", "must be >= 1, got %d", p.Interleave)
		}
		// Each session sends at most one turn per think time, so fewer
		// sessions than rate × think time cannot carry the rate.
		if need := p.Rate * p.ThinkTime.Seconds(); p.Rate > 0 && p.Turns > 1 && float64(p.Sessions) < need {
			bad("sessions", "%d sessions cannot carry --rate %v req/s with turns --think-time %v apart: it needs at least rate × think time = %v (raise --sessions or lower --think-time)",
				p.Sessions, p.Rate, p.ThinkTime, math.Ceil(need))
		}
	}
	p.validatePrefixSuite(suite, bad)
	if (suite == SuiteCapacity || suite == SuiteMixed || suite == SuiteSharedPrefix || suite == SuiteRAG || suite == SuitePrefixMix) &&
		p.Duration < time.Millisecond {
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
	g := &gen{p: p, rng: newRNG(p.Seed, suite), tag: NameTag(p.Seed, p.Salt)}
	var w *Workload
	switch suite {
	case SuiteSmoke:
		w = g.smoke()
	case SuiteCapacity:
		w = g.capacity()
	case SuiteSessions:
		if p.Rate > 0 {
			w = g.openSessions(SuiteSessions, "sess", false)
		} else {
			w = g.sessions()
		}
	case SuiteHighContext:
		w = g.highContext()
	case SuiteMixed:
		w = g.mixed()
	case SuiteSharedPrefix:
		w = g.sharedPrefix()
	case SuiteRAG:
		w = g.rag()
	case SuiteAnonSessions:
		w = g.openSessions(SuiteAnonSessions, "anon", true)
	case SuitePrefixMix:
		w = g.prefixMix()
	}
	w.Header.V = Version
	w.Header.Suite = suite
	w.Header.Seed = p.Seed
	w.Header.Model = p.Model
	if w.Header.Params == nil {
		w.Header.Params = map[string]any{}
	}
	if p.Salt != "" {
		w.Header.Params["salt"] = p.Salt
	}
	for i := range w.Requests {
		w.Requests[i].Index = i
		if err := w.Requests[i].Validate(&w.Header); err != nil {
			return nil, fmt.Errorf("generator bug: %w", err)
		}
	}
	if err := checkPrefixes(w.Requests); err != nil {
		return nil, fmt.Errorf("generator bug: %w", err)
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
	// tag is NameTag(seed, salt), part of every session id.
	tag string
}

// NameTag is the part of every session id that comes from the seed and
// the salt: 12 hex digits (48 bits) of SHA-256, so two seeds or two
// salts give disjoint ids (and, since prompt text is keyed by the id,
// disjoint prompts). A campaign also derives its per-repeat run salts
// from it.
func NameTag(seed uint64, salt string) string {
	h := sha256.New()
	h.Write([]byte("stargate-loadgen-names\x00"))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(salt))
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// name is a session id: prefix, the seed's tag, then n.
func (g *gen) name(prefix, format string, args ...any) string {
	return prefix + "-" + g.tag + "-" + fmt.Sprintf(format, args...)
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
			reqs = append(reqs, Request{Worker: s % p.Workers, Session: g.name("smoke", "%02d", s), Turn: t, Source: src, Endpoint: ep,
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
		owned[s%p.Workers] = append(owned[s%p.Workers], sess{g.name("sess", "%04d", s), src, ep})
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
			id := g.name("hc", "w%02d-s%d-%s", w, s, class)
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
			o = &open{id: g.name(s.prefix, "%05d", s.sessionCount), src: src, ep: ep, next: 1}
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
// sessions (turns at least ThinkTime, 2 s, apart) and a share of
// anonymous requests.
func (g *gen) capacity() *Workload {
	p := g.p
	s := &openStream{rate: p.Rate, turns: p.Turns, gapMs: p.ThinkTime.Milliseconds(), first: p.FirstTokens, turn: p.TurnTokens, out: p.OutputTokens,
		anonShare: p.AnonShare, prefix: fmt.Sprintf("cap%g", p.Rate)}
	reqs := g.stream(s, p.Duration)
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"target_rate": p.Rate, "duration_ms": p.Duration.Milliseconds(), "turns": p.Turns, "arrival": p.Arrival,
		"think_time_ms": p.ThinkTime.Milliseconds(), "first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}

// Mixed stream rates (req/s), upstream Stargate's campaign's caps: the
// default Rate of the mixed suite is their sum, and any other Rate keeps
// their 2:1 split.
const (
	MixedHotRate   = 8
	MixedShortRate = 4
)

// mixed runs two open-loop streams at once: "hot", long sessions (12
// turns, 4k-token first message, at least 1.5 s between turns) at two
// thirds of Rate (8 req/s by default), and "short", two-turn sessions of
// small prompts with a share of anonymous requests at the other third
// (4 req/s). Requests are merged by send time.
func (g *gen) mixed() *Workload {
	p := g.p
	hotRate := p.Rate * MixedHotRate / (MixedHotRate + MixedShortRate)
	shortRate := p.Rate * MixedShortRate / (MixedHotRate + MixedShortRate)
	hot := &openStream{label: "hot", rate: hotRate, turns: 12, gapMs: 1500, first: 4000, turn: 200, out: p.OutputTokens, prefix: "hot"}
	short := &openStream{label: "short", rate: shortRate, turns: 2, gapMs: 1000, first: 500, turn: 100, out: max(p.OutputTokens/2, 1),
		anonShare: p.AnonShare, prefix: "short"}
	reqs := g.stream(hot, p.Duration)
	reqs = append(reqs, g.stream(short, p.Duration)...)
	slices.SortStableFunc(reqs, func(a, b Request) int { return int(a.AtMs - b.AtMs) })
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"hot_rate": hotRate, "short_rate": shortRate, "target_rate": p.Rate,
		"duration_ms": p.Duration.Milliseconds(), "arrival": p.Arrival, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}

// sessionPlan is one session of the open-loop sessions suite, drawn
// before any arrival so that its id, source and sizes do not depend on
// the rate: every rate of a sweep sends the same sessions.
type sessionPlan struct {
	id, src, ep string
	// in and out are the new-message and reply sizes of each turn.
	in, out []int
}

// openSessions is the sessions suite in open loop, and, keyless, the
// anon-sessions suite: the same sessions with source none on chat, whose
// ids (prefix-<tag>-<n>) only link their turns in the file and are never
// sent. Either way: the same Sessions sessions of Turns turns as the
// closed loop (sizes drawn the same way),
// sent by arrivals at Rate req/s (Poisson by default). Each arrival is
// anonymous with probability AnonShare/(1+AnonShare) (about AnonShare
// anonymous requests per session turn, as in closed loop); otherwise it
// is the next turn of the session that has been ready longest (its
// previous turn was scheduled at least ThinkTime earlier), else the first
// turn of the next session not yet started, else nothing: when every
// session has started and none is ready, the arrival is dropped, which
// thins the rate while the last sessions finish. It ends when every
// session has sent every turn.
func (g *gen) openSessions(suite, prefix string, keyless bool) *Workload {
	p := g.p
	plans := make([]sessionPlan, p.Sessions)
	for s := range plans {
		src, ep := SourceNone, "chat"
		if !keyless {
			src, ep = g.source()
		}
		pl := sessionPlan{id: g.name(prefix, "%04d", s), src: src, ep: ep, in: make([]int, p.Turns), out: make([]int, p.Turns)}
		for t := range p.Turns {
			mean := p.TurnTokens
			if t == 0 {
				mean = p.FirstTokens
			}
			pl.in[t], pl.out[t] = g.rng.around(mean, p.Scale), g.rng.around(p.OutputTokens, 1)
		}
		plans[s] = pl
	}
	arr := newRNG(p.Seed, suite+"/arrivals")
	next := g.arrivalClock(arr, p.Rate)
	anonP := p.AnonShare / (1 + p.AnonShare)
	thinkMs := p.ThinkTime.Milliseconds()
	type open struct {
		plan    *sessionPlan
		turn    int // the next turn to send, from 0
		readyAt int64
	}
	var ready []*open // FIFO by readyAt: arrivals never go back in time
	var reqs []Request
	started, finished := 0, 0
	for finished < len(plans) {
		at := next()
		if arr.float() < anonP {
			reqs = append(reqs, anonymous(0, at, "", arr.around(p.FirstTokens, p.Scale), arr.around(p.OutputTokens, 1)))
			continue
		}
		var o *open
		switch {
		case len(ready) > 0 && ready[0].readyAt <= at:
			o, ready = ready[0], ready[1:]
		case started < len(plans):
			o = &open{plan: &plans[started]}
			started++
		default:
			continue // no session can send now: the arrival is thinned
		}
		pl := o.plan
		reqs = append(reqs, Request{AtMs: at, Session: pl.id, Turn: o.turn + 1, Source: pl.src, Endpoint: pl.ep,
			NewInputTokens: pl.in[o.turn], OutputTokens: pl.out[o.turn]})
		if o.turn++; o.turn < p.Turns {
			o.readyAt = at + thinkMs
			ready = append(ready, o)
		} else {
			finished++
		}
	}
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: reqs[len(reqs)-1].AtMs + 1, Params: map[string]any{
		"target_rate": p.Rate, "arrival": p.Arrival, "think_time_ms": thinkMs, "sessions": p.Sessions, "turns": p.Turns,
		"first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens,
		"anon_share": p.AnonShare, "scale": p.Scale,
	}}, Requests: reqs}
}

// arrivalClock returns the successive send offsets (ms) of an open-loop
// stream at rate, without end: exactly 1/rate apart (uniform) or
// exponential gaps (poisson), drawn from r.
func (g *gen) arrivalClock(r *rng, rate float64) func() int64 {
	k := 0
	t := 0.0
	return func() int64 {
		if g.p.Arrival == ArrivalPoisson {
			t += -math.Log(1-r.float()) * 1000 / rate
			return int64(t)
		}
		at := int64(math.Floor(float64(k) * 1000 / rate))
		k++
		return at
	}
}
