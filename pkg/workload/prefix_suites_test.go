package workload

import (
	"math"
	"strings"
	"testing"
	"time"
)

// ceilingShare is the share of w's prompt tokens an unbounded cache
// serves.
func ceilingShare(t *testing.T, w *Workload) float64 {
	t.Helper()
	c, tot, err := CacheCeiling(w, 16)
	if err != nil || tot == 0 {
		t.Fatalf("ceiling: %v (%d prompt tokens)", err, tot)
	}
	return float64(c) / float64(tot)
}

// checkPrefixSizes asserts that every prefix of w has one size within a
// third of mean (scaled), that only first turns name one, and returns the
// requests per prefix.
func checkPrefixSizes(t *testing.T, w *Workload, kind string, mean int) map[string]int {
	t.Helper()
	uses := map[string]int{}
	size := map[string]int{}
	for _, r := range w.Requests {
		if r.Prefix == "" {
			continue
		}
		if r.Turn != 1 || !strings.HasPrefix(r.Prefix, kind+"-") {
			t.Fatalf("request %d: prefix %q on turn %d", r.Index, r.Prefix, r.Turn)
		}
		if n, ok := size[r.Prefix]; ok && n != r.PrefixTokens {
			t.Fatalf("prefix %s has sizes %d and %d", r.Prefix, n, r.PrefixTokens)
		}
		if r.PrefixTokens < mean-mean/3 || r.PrefixTokens > mean+mean/3 {
			t.Fatalf("prefix %s of %d tokens, want %d ± a third", r.Prefix, r.PrefixTokens, mean)
		}
		size[r.Prefix] = r.PrefixTokens
		uses[r.Prefix]++
	}
	return uses
}

// TestAnonymousSuitesCarryNoSessionKey: in shared-prefix, rag and
// anon-sessions no request names a session to the gateway (source none,
// on chat, where the gateway falls back to the payload hash); in
// prefix-mix only the keyed stream does.
func TestAnonymousSuitesCarryNoSessionKey(t *testing.T) {
	for _, suite := range []string{SuiteSharedPrefix, SuiteRAG, SuiteAnonSessions, SuitePrefixMix} {
		t.Run(suite, func(t *testing.T) {
			w := generate(t, suite, small[suite])
			keyed := 0
			for _, r := range w.Requests {
				if r.Stream == "keyed" {
					keyed++
					if r.Source == SourceNone || r.Session == "" {
						t.Fatalf("keyed request %d has source %q, session %q", r.Index, r.Source, r.Session)
					}
					continue
				}
				if r.Source != SourceNone || r.Endpoint != "chat" {
					t.Fatalf("request %d (stream %q): source %q on %s, want none on chat", r.Index, r.Stream, r.Source, r.Endpoint)
				}
			}
			if (suite == SuitePrefixMix) != (keyed > 0) {
				t.Fatalf("%d keyed requests", keyed)
			}
			checkSessions(t, w)
		})
	}
}

// TestSharedPrefixShape: anonymous one-shots, each opening with one of
// the catalogue's system prompts, the most popular ones most used, so most
// of the prompt tokens are cacheable although no two requests share a key.
func TestSharedPrefixShape(t *testing.T) {
	w := generate(t, SuiteSharedPrefix, SuiteParams{Seed: 2})
	if w.Header.Mode != ModeOpen || w.Header.Params["prompts"] != 64 || w.Header.Params["arrival"] != ArrivalPoisson {
		t.Fatalf("header %+v", w.Header)
	}
	// Poisson at 10 req/s for 60 s.
	if n := len(w.Requests); n < 500 || n > 700 {
		t.Fatalf("%d requests", n)
	}
	for _, r := range w.Requests {
		if r.Session != "" || r.Prefix == "" || r.NewInputTokens > 125 || r.NewInputTokens < 75 {
			t.Fatalf("request %+v: want an anonymous one-shot with a prefix and a ~100-token message", r)
		}
	}
	uses := checkPrefixSizes(t, w, "sys", 3000)
	first, last := w.Requests[0].Prefix, w.Requests[0].Prefix
	for p := range uses {
		first, last = min(first, p), max(last, p)
	}
	// Zipf 1: the most popular prompt is used far more than a rare one.
	if len(uses) > 64 || uses[first] < 5*max(uses[last], 1) {
		t.Fatalf("%d prompts used; %s %d times, %s %d times", len(uses), first, uses[first], last, uses[last])
	}
	if share := ceilingShare(t, w); share < 0.75 {
		t.Fatalf("ceiling %.2f: the system prompts are not shared", share)
	}
	// Every prompt alike (a negative exponent means 0): the most used is
	// used at most a few times as often as the least.
	flat := generate(t, SuiteSharedPrefix, SuiteParams{Seed: 2, Zipf: -1, Prompts: 8})
	uses = checkPrefixSizes(t, flat, "sys", 3000)
	lo, hi := math.MaxInt, 0
	for _, n := range uses {
		lo, hi = min(lo, n), max(hi, n)
	}
	if len(uses) != 8 || hi > 2*lo {
		t.Fatalf("uniform popularity: %v", uses)
	}
	// The catalogue does not depend on the rate: every point of a sweep
	// has the same prompts.
	fast := generate(t, SuiteSharedPrefix, SuiteParams{Seed: 2, Rate: 30})
	size := map[string]int{}
	for _, r := range w.Requests {
		size[r.Prefix] = r.PrefixTokens
	}
	for _, r := range fast.Requests {
		if n, ok := size[r.Prefix]; ok && n != r.PrefixTokens {
			t.Fatalf("prefix %s: %d tokens at 10 req/s, %d at 30", r.Prefix, n, r.PrefixTokens)
		}
	}
	// Scaled, the prompts shrink with the messages.
	scaled := generate(t, SuiteSharedPrefix, SuiteParams{Seed: 2, Scale: 0.1})
	checkPrefixSizes(t, scaled, "sys", 300)
}

// TestRAGShape: anonymous conversations about a document: most ask one
// question, a share ask follow-ups, each turn at least the think time
// after the previous one and re-sending the document as history.
func TestRAGShape(t *testing.T) {
	w := generate(t, SuiteRAG, SuiteParams{Seed: 6, Duration: 120 * time.Second})
	by := checkSessions(t, w)
	checkPrefixSizes(t, w, "doc", 6000)
	oneShots := 0
	for _, r := range w.Requests {
		if r.Session == "" {
			oneShots++
			if r.Prefix == "" {
				t.Fatalf("one-shot %d has no document", r.Index)
			}
		}
	}
	longest := 0
	for id, turns := range by {
		// A conversation cut short by the end of the window may have sent
		// only its first question.
		cut := len(turns) == 1 && turns[0].AtMs > 118_000
		if (len(turns) < 2 && !cut) || len(turns) > 3 || turns[0].Prefix == "" || !strings.HasPrefix(id, "rag-") {
			t.Fatalf("conversation %s: %d turns from %d ms, document %q", id, len(turns), turns[0].AtMs, turns[0].Prefix)
		}
		longest = max(longest, len(turns))
		for k := 1; k < len(turns); k++ {
			if turns[k].AtMs-turns[k-1].AtMs < 2000 || turns[k].Prefix != "" {
				t.Fatalf("conversation %s: turn %d at %d ms after %d, prefix %q", id, k+1, turns[k].AtMs, turns[k-1].AtMs, turns[k].Prefix)
			}
		}
	}
	// About 30 % of conversations have follow-ups (those that started
	// late in the window may be cut short).
	share := float64(len(by)) / float64(len(by)+oneShots)
	if share < 0.2 || share > 0.4 || longest != 3 {
		t.Fatalf("%d follow-up conversations, %d one-shots, longest %d turns", len(by), oneShots, longest)
	}
	if s := ceilingShare(t, w); s < 0.85 {
		t.Fatalf("ceiling %.2f: the documents are not shared", s)
	}
	none := generate(t, SuiteRAG, SuiteParams{Seed: 6, FollowUps: -1})
	if by := checkSessions(t, none); len(by) != 0 {
		t.Fatalf("--follow-ups < 0 still has %d follow-up conversations", len(by))
	}
}

// TestAnonSessions: the sessions suite's open-loop shape with no key at
// all: every session sends all its turns, in order, think time apart, and
// the conversation it re-sends makes most of its prompts cacheable.
func TestAnonSessions(t *testing.T) {
	p := SuiteParams{Seed: 8, Sessions: 20, Turns: 4, Rate: 5}
	w := generate(t, SuiteAnonSessions, p)
	by := checkSessions(t, w)
	if len(by) != 20 || len(w.Requests) != 80 || w.Header.Params["target_rate"] != 5.0 {
		t.Fatalf("%d sessions, %d requests, params %v", len(by), len(w.Requests), w.Header.Params)
	}
	for id, turns := range by {
		if len(turns) != 4 || !strings.HasPrefix(id, "anon-") {
			t.Fatalf("session %s: %d turns", id, len(turns))
		}
		for k := 1; k < len(turns); k++ {
			if turns[k].AtMs-turns[k-1].AtMs < 2000 {
				t.Fatalf("session %s: turns %d ms apart", id, turns[k].AtMs-turns[k-1].AtMs)
			}
		}
	}
	if s := ceilingShare(t, w); s < 0.6 {
		t.Fatalf("ceiling %.2f", s)
	}
	// The default rate carries the default sessions.
	if d := generate(t, SuiteAnonSessions, SuiteParams{Seed: 8}); len(d.Requests) != 128*6 {
		t.Fatalf("defaults: %d requests", len(d.Requests))
	}
}

// TestPrefixMixStreams: four streams at their shares of the rate, merged
// by send time: keyed sessions, anonymous sessions, shared-prefix
// one-shots and rag conversations.
func TestPrefixMixStreams(t *testing.T) {
	w := generate(t, SuitePrefixMix, SuiteParams{Seed: 12, Rate: 20, Duration: 30 * time.Second, Arrival: ArrivalUniform})
	count := map[string]int{}
	var last int64
	for _, r := range w.Requests {
		count[r.Stream]++
		if r.AtMs < last {
			t.Fatalf("request %d at %d ms after %d", r.Index, r.AtMs, last)
		}
		last = r.AtMs
		switch r.Stream {
		case "shared":
			if r.Session != "" || !strings.HasPrefix(r.Prefix, "sys-") {
				t.Fatalf("shared request %+v", r)
			}
		case "rag":
			if r.Turn == 1 && !strings.HasPrefix(r.Prefix, "doc-") {
				t.Fatalf("rag request %+v", r)
			}
		case "keyed", "anon":
			if r.Session == "" || r.Prefix != "" || !strings.HasPrefix(r.Session, map[string]string{"keyed": "sess-", "anon": "anon-"}[r.Stream]) {
				t.Fatalf("%s request %+v", r.Stream, r)
			}
		default:
			t.Fatalf("stream %q", r.Stream)
		}
	}
	// Uniform arrivals: exactly rate × share × duration per stream.
	for _, s := range PrefixMixShares {
		if want := int(math.Floor(20 * s.Share * 30)); count[s.Stream] != want {
			t.Fatalf("stream %s: %d requests, want %d (%v)", s.Stream, count[s.Stream], want, count)
		}
	}
	by := checkSessions(t, w)
	longest := map[string]int{}
	for _, turns := range by {
		longest[turns[0].Stream] = max(longest[turns[0].Stream], len(turns))
	}
	if longest["keyed"] != 6 || longest["anon"] != 6 || longest["rag"] < 2 {
		t.Fatalf("longest conversations per stream %v", longest)
	}
	if s := ceilingShare(t, w); s < 0.6 {
		t.Fatalf("ceiling %.2f", s)
	}
}

func TestPrefixSuitesRejectBadParams(t *testing.T) {
	for _, c := range []struct {
		suite string
		p     SuiteParams
		flag  string
	}{
		{SuiteSharedPrefix, SuiteParams{Prompts: -1}, "--prompts"},
		{SuiteSharedPrefix, SuiteParams{PromptTokens: -5}, "--prompt-tokens"},
		{SuiteSharedPrefix, SuiteParams{Zipf: math.NaN()}, "--zipf"},
		{SuiteSharedPrefix, SuiteParams{Rate: -1}, "--rate"},
		{SuiteSharedPrefix, SuiteParams{Duration: -time.Second}, "--duration"},
		{SuiteRAG, SuiteParams{Docs: -1}, "--docs"},
		{SuiteRAG, SuiteParams{DocTokens: -1}, "--doc-tokens"},
		{SuiteRAG, SuiteParams{FollowUps: 1.5}, "--follow-ups"},
		{SuiteRAG, SuiteParams{Turns: -1}, "--turns"},
		{SuiteAnonSessions, SuiteParams{Sessions: 4, Rate: 10}, "--sessions"},
		{SuiteAnonSessions, SuiteParams{Turns: -1}, "--turns"},
		{SuitePrefixMix, SuiteParams{Docs: -2}, "--docs"},
		{SuitePrefixMix, SuiteParams{Rate: 2e6}, "--rate"},
	} {
		_, err := Generate(c.suite, c.p)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s %+v: err = %v, want it to name %s", c.suite, c.p, err, c.flag)
		}
	}
}
