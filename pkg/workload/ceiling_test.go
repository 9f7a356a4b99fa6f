package workload

import (
	"errors"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
)

// TestCacheCeilingByHand checks the ceiling against a count done by hand
// in the mock engine's geometry (16-token blocks of 64 bytes): two turns of
// one session and an unrelated one-shot.
func TestCacheCeilingByHand(t *testing.T) {
	w := &Workload{Header: Header{Seed: 5, Mode: ModeClosed, Workers: 1}, Requests: []Request{
		{Index: 0, Session: "s", Turn: 1, Source: SourcePromptCacheKey, Endpoint: "chat", NewInputTokens: 40, OutputTokens: 10},
		{Index: 1, Session: "s", Turn: 2, Source: SourcePromptCacheKey, Endpoint: "chat", NewInputTokens: 20, OutputTokens: 10},
		{Index: 2, Turn: 1, Source: SourceNone, Endpoint: "chat", NewInputTokens: 30, OutputTokens: 10},
	}}
	// Request 0: "user:" + 160 bytes + "\n" = 166 bytes: 2 full blocks
	// (32 tokens) and 38 bytes (10 tokens) = 42 tokens, nothing cached. Its
	// reply "assistant:" + 40 bytes + "\n" = 51 bytes makes the history 217
	// bytes, 3 full blocks.
	// Request 1: 217 + 86 = 303 bytes: 4 full blocks and 47 bytes = 76
	// tokens, of which the history's 3 blocks (48 tokens) are cached.
	// Request 2: 126 bytes: 1 block and 62 bytes = 32 tokens, nothing
	// cached (its text is its own).
	cacheable, total, err := CacheCeiling(w, 16)
	if err != nil {
		t.Fatal(err)
	}
	if cacheable != 48 || total != 42+76+32 {
		t.Fatalf("ceiling %d of %d tokens, want 48 of 150", cacheable, total)
	}
	// 0 is the default geometry.
	if c, tot, _ := CacheCeiling(w, 0); c != cacheable || tot != total {
		t.Fatalf("block size 0: %d of %d", c, tot)
	}
	// With 8-token blocks (32 bytes) request 1 finds the history's 6
	// full blocks (192 of its 217 bytes): 48 tokens again, while 64-token
	// blocks (256 bytes) hold none of it.
	if c, _, _ := CacheCeiling(w, 8); c != 48 {
		t.Fatalf("8-token blocks: %d cacheable", c)
	}
	if c, _, _ := CacheCeiling(w, 64); c != 0 {
		t.Fatalf("64-token blocks: %d cacheable", c)
	}
	if _, _, err := CacheCeiling(w, -1); !errors.Is(err, kvcache.ErrInvalidConfig) {
		t.Fatalf("block size -1: %v", err)
	}
}

// TestCacheCeilingSharedPrefix: a request that repeats another's prompt
// (here a session restarted at turn 1) finds every full block of it.
func TestCacheCeilingSharedPrefix(t *testing.T) {
	one := Request{Session: "s", Turn: 1, Source: SourceHeader, Endpoint: "chat", NewInputTokens: 40, OutputTokens: 10}
	w := &Workload{Header: Header{Seed: 5, Mode: ModeOpen}, Requests: []Request{one, one}}
	w.Requests[1].Index = 1
	cacheable, total, err := CacheCeiling(w, 16)
	if err != nil {
		t.Fatal(err)
	}
	if cacheable != 32 || total != 84 {
		t.Fatalf("ceiling %d of %d tokens, want 32 (the 2 full blocks) of 84", cacheable, total)
	}
}

// TestCacheCeilingOfPrefixes: two anonymous one-shots that open with
// the same prefix share its full blocks, and nothing after them.
func TestCacheCeilingOfPrefixes(t *testing.T) {
	one := Request{Turn: 1, Source: SourceNone, Endpoint: "chat", NewInputTokens: 16, OutputTokens: 4, Prefix: "sys-1", PrefixTokens: 64}
	w := &Workload{Header: Header{Seed: 5, Mode: ModeOpen}, Requests: []Request{one, one}}
	w.Requests[1].Index = 1
	// Each prompt: "system:" + 256 bytes + "\n" = 264 bytes, then "user:"
	// + 64 bytes + "\n" = 70 bytes: 334 bytes, 5 full blocks and 14 bytes
	// (84 tokens). The first 4 blocks are the prefix's alone; the fifth
	// holds the request's own "[#<index> t1]" header.
	cacheable, total, err := CacheCeiling(w, 16)
	if err != nil {
		t.Fatal(err)
	}
	if cacheable != 64 || total != 2*84 {
		t.Fatalf("ceiling %d of %d tokens, want 64 of 168", cacheable, total)
	}
	// Another prefix name is other text: nothing shared.
	w.Requests[1].Prefix = "sys-2"
	if c, _, _ := CacheCeiling(w, 16); c != 0 {
		t.Fatalf("two prefixes share %d tokens", c)
	}
}

// TestCacheCeilingOfSuites: sessions are mostly cacheable, anonymous
// one-shots never; the same sessions at another rate have the same
// ceiling (the open-loop sessions are drawn before their arrivals), and
// another seed has its own prompts.
func TestCacheCeilingOfSuites(t *testing.T) {
	p := SuiteParams{Seed: 1, Workers: 2, Sessions: 6, Turns: 4, AnonShare: -1}
	closed := generate(t, SuiteSessions, p)
	c1, t1, err := CacheCeiling(closed, 16)
	if err != nil {
		t.Fatal(err)
	}
	if share := float64(c1) / float64(t1); share < 0.6 || share > 0.95 {
		t.Fatalf("sessions ceiling %d of %d", c1, t1)
	}
	p.Rate = 1
	slow := generate(t, SuiteSessions, p)
	p.Rate = 3
	fast := generate(t, SuiteSessions, p)
	cs, ts, _ := CacheCeiling(slow, 16)
	cf, tf, _ := CacheCeiling(fast, 16)
	if cs != cf || ts != tf || cs == 0 {
		t.Fatalf("open loop at 1 and 3 req/s: %d of %d vs %d of %d", cs, ts, cf, tf)
	}
	anon := generate(t, SuiteCapacity, SuiteParams{Seed: 1, Rate: 4, Duration: 5 * time.Second, AnonShare: 1})
	if c, tot, _ := CacheCeiling(anon, 16); c != 0 || tot == 0 {
		t.Fatalf("anonymous only: %d of %d cacheable", c, tot)
	}
}
