package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fingerprint(t *testing.T, w *Workload) string {
	t.Helper()
	var buf bytes.Buffer
	if err := w.Write(&buf); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

func generate(t *testing.T, suite string, p SuiteParams) *Workload {
	t.Helper()
	w, err := Generate(suite, p)
	if err != nil {
		t.Fatalf("%s: %v", suite, err)
	}
	return w
}

// small are parameters that keep every suite quick to generate.
var small = map[string]SuiteParams{
	SuiteSmoke:        {},
	SuiteCapacity:     {Rate: 16, Duration: 10 * time.Second},
	SuiteSessions:     {Workers: 4, Sessions: 12, Turns: 4},
	SuiteHighContext:  {Workers: 4, Scale: 0.01},
	SuiteMixed:        {Duration: 10 * time.Second},
	SuiteSharedPrefix: {Duration: 10 * time.Second, Prompts: 8, Scale: 0.1},
	SuiteRAG:          {Duration: 10 * time.Second, Docs: 8, Scale: 0.1},
	SuiteAnonSessions: {Sessions: 12, Turns: 3, Rate: 4},
	SuitePrefixMix:    {Duration: 10 * time.Second, Prompts: 8, Docs: 8, Scale: 0.1},
}

// TestNamesFollowSeedAndSalt: every session id (which is also the
// request's prompt_cache_key, conversation id or x-multi-turn-session-id)
// and every shared prefix name comes from the seed and the salt, so two
// seeds, or two salts, share no key, and no prompt: text is keyed by the
// id or the prefix name.
func TestNamesFollowSeedAndSalt(t *testing.T) {
	ids := func(w *Workload) map[string]bool {
		m := map[string]bool{}
		for _, r := range w.Requests {
			if r.Session != "" {
				m[r.Session] = true
			}
			if r.Prefix != "" {
				m[r.Prefix] = true
			}
		}
		return m
	}
	for _, suite := range Suites {
		t.Run(suite, func(t *testing.T) {
			base := small[suite]
			for _, other := range []struct {
				seed uint64
				salt string
			}{{2, ""}, {1, "b"}} {
				p, q := base, base
				p.Seed, p.Salt = 1, ""
				q.Seed, q.Salt = other.seed, other.salt
				a, b := ids(generate(t, suite, p)), ids(generate(t, suite, q))
				if len(a) == 0 || len(b) == 0 {
					t.Fatal("no session and no prefix")
				}
				for id := range b {
					if a[id] {
						t.Fatalf("seed 1 and seed %d salt %q share session id %q", other.seed, other.salt, id)
					}
				}
			}
		})
	}
	if x := NameTag(1, "x"); NameTag(1, "") == NameTag(2, "") || NameTag(1, "a") == NameTag(1, "b") || x != NameTag(1, "x") || len(x) != 12 {
		t.Fatal("NameTag is not a 12-digit function of seed and salt")
	}
	w := generate(t, SuiteSmoke, SuiteParams{Seed: 1, Salt: "s1"})
	if w.Header.Params["salt"] != "s1" {
		t.Fatalf("the salt is not recorded: %v", w.Header.Params)
	}
}

func TestGenerateDeterministicBySeed(t *testing.T) {
	for _, suite := range Suites {
		t.Run(suite, func(t *testing.T) {
			p := small[suite]
			p.Seed = 42
			a, b := generate(t, suite, p), generate(t, suite, p)
			if fingerprint(t, a) != fingerprint(t, b) {
				t.Fatal("same seed, different bytes")
			}
			// The file written and read back keeps the fingerprint.
			path := filepath.Join(t.TempDir(), "w.jsonl")
			fp, err := a.WriteFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, fp2, err := ReadFile(path); err != nil || fp2 != fp || fp != fingerprint(t, b) {
				t.Fatalf("read back: %v, %s vs %s", err, fp2, fp)
			}
			p.Seed = 43
			if fingerprint(t, generate(t, suite, p)) == fingerprint(t, a) {
				t.Fatal("another seed gave the same bytes")
			}
		})
	}
}

// checkSessions asserts what every suite must hold: a session's turns are
// 1, 2, 3, … in file order, on one worker, with one source and endpoint,
// and a conversation id only on /v1/responses.
func checkSessions(t *testing.T, w *Workload) map[string][]Request {
	t.Helper()
	by := map[string][]Request{}
	for _, r := range w.Requests {
		if r.Source == SourceConversation && r.Endpoint != "responses" {
			t.Fatalf("request %d: conversation id on %s", r.Index, r.Endpoint)
		}
		if r.Session == "" {
			continue
		}
		prev := by[r.Session]
		if r.Turn != len(prev)+1 {
			t.Fatalf("session %s: turn %d after %d turns", r.Session, r.Turn, len(prev))
		}
		if len(prev) > 0 {
			p := prev[len(prev)-1]
			if p.Worker != r.Worker || p.Source != r.Source || p.Endpoint != r.Endpoint {
				t.Fatalf("session %s changed worker, source or endpoint", r.Session)
			}
			if w.Header.Mode == ModeOpen && r.AtMs <= p.AtMs {
				t.Fatalf("session %s: turn %d at %d ms, not after %d ms", r.Session, r.Turn, r.AtMs, p.AtMs)
			}
		}
		by[r.Session] = append(prev, r)
	}
	return by
}

func TestSmokeShape(t *testing.T) {
	w := generate(t, SuiteSmoke, SuiteParams{Seed: 1})
	if len(w.Requests) != 32 || w.Header.Mode != ModeClosed || w.Header.Workers != 4 {
		t.Fatalf("%d requests, mode %s, %d workers", len(w.Requests), w.Header.Mode, w.Header.Workers)
	}
	by := checkSessions(t, w)
	sources := map[string]bool{}
	for _, turns := range by {
		if len(turns) != 3 {
			t.Fatalf("session of %d turns", len(turns))
		}
		sources[turns[0].Source] = true
	}
	if len(by) != 8 || !sources[SourcePromptCacheKey] || !sources[SourceConversation] || !sources[SourceHeader] {
		t.Fatalf("%d sessions, sources %v", len(by), sources)
	}
}

func TestSessionsShape(t *testing.T) {
	w := generate(t, SuiteSessions, SuiteParams{Seed: 3, Workers: 4, Sessions: 40, Turns: 5, Interleave: 2, AnonShare: 0.1})
	by := checkSessions(t, w)
	anon := 0
	sources := map[string]int{}
	for _, r := range w.Requests {
		if r.Session == "" {
			anon++
		} else if r.Turn == 1 {
			sources[r.Source]++
		}
	}
	if len(by) != 40 || len(w.Requests) != 40*5+anon || anon == 0 {
		t.Fatalf("%d sessions, %d requests, %d anonymous", len(by), len(w.Requests), anon)
	}
	if sources[SourcePromptCacheKey] <= sources[SourceConversation] || sources[SourceConversation] == 0 {
		t.Fatalf("source mix %v: want mostly prompt_cache_key, some conversation ids", sources)
	}
	for id, turns := range by {
		if len(turns) != 5 || turns[0].NewInputTokens <= turns[1].NewInputTokens {
			t.Fatalf("session %s: %d turns, first message %d tokens, second %d", id, len(turns), turns[0].NewInputTokens, turns[1].NewInputTokens)
		}
	}
	if none := generate(t, SuiteSessions, SuiteParams{Seed: 3, Workers: 4, Sessions: 40, Turns: 5, AnonShare: -1}); len(none.Requests) != 200 {
		t.Fatalf("AnonShare < 0 still adds anonymous requests: %d", len(none.Requests))
	}
}

func TestHighContextShape(t *testing.T) {
	const workers = 5
	w := generate(t, SuiteHighContext, SuiteParams{Seed: 9, Workers: workers, OutputTokens: 100})
	if len(w.Requests) != workers*8*3 || w.Header.Workers != workers || w.Header.Mode != ModeClosed {
		t.Fatalf("%d requests for %d workers", len(w.Requests), workers)
	}
	checkSessions(t, w)
	for worker := range workers {
		var seq []Request
		for _, r := range w.Requests {
			if r.Worker == worker {
				seq = append(seq, r)
			}
		}
		if len(seq) != 24 {
			t.Fatalf("worker %d owns %d requests", worker, len(seq))
		}
		classes := map[string]int{}
		for s := 0; s < 24; s += 3 {
			// One session's three turns back to back: it finishes before
			// the worker starts the next.
			if seq[s].Session != seq[s+1].Session || seq[s].Session != seq[s+2].Session || seq[s].Turn != 1 {
				t.Fatalf("worker %d: session %s is not three consecutive turns", worker, seq[s].Session)
			}
			class := seq[s].Session[strings.LastIndexByte(seq[s].Session, '-')+1:]
			classes[class]++
			// Each turn's whole prompt is the class total: earlier
			// messages + replies + the new message.
			held := 0
			for k, want := range HighContextTotals[class] {
				r := seq[s+k]
				if got := held + r.NewInputTokens; got != want {
					t.Fatalf("%s turn %d: total input %d, want %d", r.Session, r.Turn, got, want)
				}
				held += r.NewInputTokens + r.OutputTokens
			}
		}
		if classes["large"] != 6 || classes["medium"] != 1 || classes["small"] != 1 {
			t.Fatalf("worker %d classes %v", worker, classes)
		}
	}
	// Scaled down, totals shrink and tiny turns stay ≥ 1 token.
	scaled := generate(t, SuiteHighContext, SuiteParams{Seed: 9, Workers: 1, Scale: 0.01})
	for _, r := range scaled.Requests {
		if r.NewInputTokens > 1200 || r.NewInputTokens < 1 {
			t.Fatalf("scaled request %d has %d new tokens", r.Index, r.NewInputTokens)
		}
	}
}

func TestCapacityRate(t *testing.T) {
	for _, rate := range CapacityRates {
		w := generate(t, SuiteCapacity, SuiteParams{Seed: 5, Rate: rate, Duration: 10 * time.Second})
		if want := int(rate * 10); len(w.Requests) != want {
			t.Fatalf("rate %v: %d requests in 10 s, want %d", rate, len(w.Requests), want)
		}
		if w.Header.Mode != ModeOpen || w.Header.DurationMs != 10_000 || w.Header.Params["target_rate"] != rate {
			t.Fatalf("header %+v", w.Header)
		}
		for i, r := range w.Requests {
			if want := int64(float64(i) * 1000 / rate); r.AtMs != want {
				t.Fatalf("rate %v: request %d at %d ms, want %d", rate, i, r.AtMs, want)
			}
		}
		by := checkSessions(t, w)
		multi := 0
		for _, turns := range by {
			if len(turns) > 1 {
				multi++
				if turns[1].AtMs-turns[0].AtMs < 2000 {
					t.Fatalf("turns %d ms apart", turns[1].AtMs-turns[0].AtMs)
				}
			}
		}
		if multi == 0 {
			t.Fatalf("rate %v: no multi-turn session", rate)
		}
	}
	p := generate(t, SuiteCapacity, SuiteParams{Seed: 5, Rate: 20, Duration: 60 * time.Second, Arrival: ArrivalPoisson})
	if n := len(p.Requests); n < 1000 || n > 1400 {
		t.Fatalf("poisson at 20 req/s for 60 s gave %d requests", n)
	}
}

// TestOpenLoopSessions: with a rate the sessions suite is open loop: the
// same sessions as at any other rate, every turn scheduled at least the
// think time after its previous turn, arrivals at the rate.
func TestOpenLoopSessions(t *testing.T) {
	p := SuiteParams{Seed: 4, Sessions: 30, Turns: 4, Rate: 5, ThinkTime: 3 * time.Second, AnonShare: 0.1}
	w := generate(t, SuiteSessions, p)
	if w.Header.Mode != ModeOpen || w.Header.Workers != 0 || w.Header.Params["target_rate"] != 5.0 ||
		w.Header.Params["arrival"] != ArrivalPoisson || w.Header.Params["think_time_ms"] != int64(3000) {
		t.Fatalf("header %+v", w.Header)
	}
	by := checkSessions(t, w)
	anon := 0
	for _, r := range w.Requests {
		if r.Session == "" {
			anon++
		}
	}
	if len(by) != 30 || len(w.Requests) != 30*4+anon || anon == 0 {
		t.Fatalf("%d sessions, %d requests, %d anonymous", len(by), len(w.Requests), anon)
	}
	for id, turns := range by {
		if len(turns) != 4 {
			t.Fatalf("session %s has %d turns", id, len(turns))
		}
		for k := 1; k < len(turns); k++ {
			if gap := turns[k].AtMs - turns[k-1].AtMs; gap < 3000 {
				t.Fatalf("session %s: turns %d and %d are %d ms apart", id, k, k+1, gap)
			}
		}
	}
	// Poisson arrivals at 5 req/s: over the first 100 requests (before
	// the last sessions thin the tail) the mean gap is near 200 ms.
	if mean := float64(w.Requests[99].AtMs) / 99; mean < 140 || mean > 270 {
		t.Fatalf("mean gap %.0f ms at 5 req/s", mean)
	}
	// Another rate sends the same sessions with the same sizes.
	p.Rate = 9
	other := checkSessions(t, generate(t, SuiteSessions, p))
	for id, turns := range by {
		o := other[id]
		if len(o) != len(turns) {
			t.Fatalf("session %s missing at 9 req/s", id)
		}
		for k := range turns {
			if o[k].NewInputTokens != turns[k].NewInputTokens || o[k].OutputTokens != turns[k].OutputTokens || o[k].Source != turns[k].Source {
				t.Fatalf("session %s turn %d differs between rates", id, k+1)
			}
		}
	}
	// Uniform arrivals are exactly 1000/rate ms apart.
	p.Arrival = ArrivalUniform
	p.AnonShare = -1
	u := generate(t, SuiteSessions, p)
	for i := 1; i < 30; i++ { // the first 30 all start sessions: none is ready yet
		if want := int64(math.Floor(float64(i) * 1000 / 9)); u.Requests[i].AtMs != want {
			t.Fatalf("uniform request %d at %d ms, want %d", i, u.Requests[i].AtMs, want)
		}
	}
	// Closed loop stays the default.
	if c := generate(t, SuiteSessions, SuiteParams{Seed: 4, Sessions: 30, Turns: 4}); c.Header.Mode != ModeClosed {
		t.Fatalf("no rate: mode %s", c.Header.Mode)
	}
	// Too few sessions for the rate: each sends at most one turn per think time.
	_, err := Generate(SuiteSessions, SuiteParams{Sessions: 10, Turns: 3, Rate: 6, ThinkTime: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "--sessions") || !strings.Contains(err.Error(), "12") {
		t.Fatalf("10 sessions at 6 req/s, 2 s apart: %v", err)
	}
}

func TestMixedRate(t *testing.T) {
	w := generate(t, SuiteMixed, SuiteParams{Seed: 11, Duration: 10 * time.Second, Rate: 24})
	count := map[string]int{}
	for _, r := range w.Requests {
		count[r.Stream]++
	}
	if count["hot"] != 160 || count["short"] != 80 || w.Header.Params["target_rate"] != 24.0 {
		t.Fatalf("mixed at 24 req/s for 10 s: streams %v, params %v", count, w.Header.Params)
	}
}

func TestMixedStreams(t *testing.T) {
	w := generate(t, SuiteMixed, SuiteParams{Seed: 11, Duration: 30 * time.Second})
	count := map[string]int{}
	var last int64
	for _, r := range w.Requests {
		count[r.Stream]++
		if r.AtMs < last || r.AtMs >= 30_000 {
			t.Fatalf("request %d at %d ms (previous %d)", r.Index, r.AtMs, last)
		}
		last = r.AtMs
	}
	if count["hot"] != MixedHotRate*30 || count["short"] != MixedShortRate*30 || len(count) != 2 {
		t.Fatalf("streams %v", count)
	}
	by := checkSessions(t, w)
	longest := map[string]int{}
	for _, turns := range by {
		s := turns[0].Stream
		longest[s] = max(longest[s], len(turns))
	}
	if longest["hot"] < 6 || longest["short"] != 2 {
		t.Fatalf("longest sessions per stream %v", longest)
	}
}

func TestGenerateRejectsBadParams(t *testing.T) {
	for _, c := range []struct {
		suite string
		p     SuiteParams
		flag  string
	}{
		{SuiteCapacity, SuiteParams{Rate: -1}, "--rate"},
		{SuiteSessions, SuiteParams{Sessions: -2}, "--sessions"},
		{SuiteHighContext, SuiteParams{Scale: -1}, "--scale"},
		{SuiteMixed, SuiteParams{Arrival: "burst"}, "--arrival"},
		{SuiteMixed, SuiteParams{Rate: -1}, "--rate"},
		{SuiteSessions, SuiteParams{Rate: math.Inf(1)}, "--rate"},
		{SuiteCapacity, SuiteParams{ThinkTime: -time.Second}, "--think-time"},
		{SuiteSmoke, SuiteParams{Workers: -1}, "--workers"},
		{"nope", SuiteParams{}, "unknown suite"},
	} {
		_, err := Generate(c.suite, c.p)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s %+v: err = %v, want it to name %s", c.suite, c.p, err, c.flag)
		}
	}
}
