package kvcache

import (
	"sync"
	"testing"
)

func TestLookupMatchesByContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stored []string
		lookup string
		want   int // cached tokens, one per byte under byteCfg
	}{
		{"exact hit", []string{"abcdef"}, "abcdef", 6},
		{"longer prompt hits stored prefix", []string{"abcdef"}, "abcdefgh", 6},
		{"partial prefix hit", []string{"abcdef"}, "abcxyz", 3},
		{"miss when first block differs", []string{"abcdef"}, "zbcdef", 0},
		{"identical later blocks under another prefix do not hit", []string{"abcdef", "qrs"}, "qbcdef", 1},
		{"longest of several branches wins", []string{"abcdef", "abcxyz1"}, "abcxyz12", 7},
		{"empty prompt misses", []string{"abc"}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(t, byteCfg(1000))
			for _, s := range tt.stored {
				store(c, s, "")
			}
			before := c.Stats()
			seq := c.NewSequence([]byte(tt.lookup))
			l := c.Lookup(seq)
			if got := l.CachedTokens(); got != tt.want {
				t.Fatalf("CachedTokens() = %d, want %d", got, tt.want)
			}
			if st := c.Stats(); st.PinnedBlocks != int64(tt.want) {
				t.Fatalf("PinnedBlocks = %d while lease open, want %d", st.PinnedBlocks, tt.want)
			}
			l.Release(nil)
			st := c.Stats()
			wantHits, wantMisses := int64(0), int64(1)
			if tt.want > 0 {
				wantHits, wantMisses = 1, 0
			}
			if st.HitCount-before.HitCount != wantHits || st.MissCount-before.MissCount != wantMisses ||
				st.HitTokens-before.HitTokens != int64(tt.want) ||
				st.QueryTokens-before.QueryTokens != int64(seq.Tokens()) || st.PinnedBlocks != 0 {
				t.Fatalf("stats %+v -> %+v", before, st)
			}
			checkInvariants(t, c)
		})
	}
}

func TestLookupDefaultGeometry(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{CapacityTokens: 1 << 20})
	prompt := text(1000) // 15 full 64-byte blocks and a 40-byte tail
	store(c, prompt, "")
	l := c.Lookup(c.NewSequence([]byte(prompt)))
	defer l.Release(nil)
	if got := l.CachedTokens(); got != 15*16 {
		t.Fatalf("CachedTokens() = %d, want %d", got, 15*16)
	}
	if st := c.Stats(); st.Blocks != 15 || st.UsedTokens != 240 {
		t.Fatalf("stats = %+v, want 15 blocks / 240 tokens", st)
	}
}

func TestEvictionOrder(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(5))
	store(c, "abc", "") // oldest leaf: c
	store(c, "xy", "")
	// Use "ab" recently: b is interior, so this must not save it once c goes.
	l := c.Lookup(c.NewSequence([]byte("ab")))
	l.Release(nil)

	steps := []struct {
		insert  string
		present map[string]int
	}{
		// c is the least recently used leaf; b becomes a leaf and goes to
		// the evict-next end even though it was used after y.
		{"p", map[string]int{"abc": 2, "xy": 2, "p": 1}},
		{"q", map[string]int{"abc": 1, "xy": 2, "p": 1, "q": 1}},
		{"r", map[string]int{"abc": 0, "xy": 2, "p": 1, "q": 1, "r": 1}},
		// Now y is the oldest leaf, and x follows it straight away.
		{"s", map[string]int{"xy": 1, "p": 1, "q": 1, "r": 1, "s": 1}},
		{"t", map[string]int{"xy": 0, "p": 1, "q": 1, "r": 1, "s": 1, "t": 1}},
	}
	for i, st := range steps {
		ev := store(c, st.insert, "")
		if ev != (Eviction{Blocks: 1, Tokens: 1}) {
			t.Fatalf("step %d: Commit evicted %+v, want one block", i, ev)
		}
		for content, want := range st.present {
			if got := peek(c, content); got != want {
				t.Fatalf("step %d (insert %q): %d blocks of %q stored, want %d", i, st.insert, got, content, want)
			}
		}
		checkInvariants(t, c)
	}
	if s := c.Stats(); s.EvictedBlocks != 5 || s.EvictedTokens != 5 || s.RejectedBlocks != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRecentLeafSurvives(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(4))
	store(c, "ab", "")
	store(c, "xy", "")
	c.Lookup(c.NewSequence([]byte("ab"))).Release(nil) // b is now fresher than y
	store(c, "pq", "")
	if peek(c, "ab") != 2 || peek(c, "xy") != 0 || peek(c, "pq") != 2 {
		t.Fatalf("after refresh: ab=%d xy=%d pq=%d, want 2 0 2", peek(c, "ab"), peek(c, "xy"), peek(c, "pq"))
	}
	checkInvariants(t, c)
}

func TestPinnedBlocksAreNeverEvicted(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(6))
	hold := c.Lookup(c.NewSequence([]byte("abcd")))
	hold.Commit()

	full := c.Lookup(c.NewSequence([]byte("wxyz")))
	if ev := full.Commit(); ev != (Eviction{}) {
		t.Fatalf("Commit evicted %+v with only pinned blocks", ev)
	}
	full.Release([]byte("12")) // the output cannot hang off a truncated prompt
	s := c.Stats()
	if s.Blocks != 6 || s.RejectedBlocks != 2+2 || s.EvictedBlocks != 0 || s.PinnedBlocks != 4 {
		t.Fatalf("stats = %+v, want 6 blocks, 4 rejected, 4 pinned", s)
	}
	if peek(c, "abcd") != 4 || peek(c, "wxyz") != 2 {
		t.Fatalf("abcd=%d wxyz=%d, want the pinned chain intact and a valid 2-block prefix", peek(c, "abcd"), peek(c, "wxyz"))
	}
	checkInvariants(t, c)

	// With everything pinned, nothing at all fits.
	third := c.Lookup(c.NewSequence([]byte("wx")))
	third.Commit()
	crowd := c.Lookup(c.NewSequence([]byte("mn")))
	crowd.Commit()
	if s := c.Stats(); s.RejectedBlocks != 6 || s.Blocks != 6 {
		t.Fatalf("stats = %+v, want 2 more rejected", s)
	}
	third.Release(nil)
	crowd.Release(nil)
	hold.Release(nil)

	// Once released, the blocks are evictable again: leaf first, then its
	// parents in order.
	if ev := store(c, "mnop", ""); ev != (Eviction{Blocks: 4, Tokens: 4}) {
		t.Fatalf("Commit evicted %+v, want 4", ev)
	}
	if peek(c, "mnop") != 4 || peek(c, "wxyz") != 0 || peek(c, "abcd") != 2 {
		t.Fatalf("mnop=%d wxyz=%d abcd=%d, want 4 0 2", peek(c, "mnop"), peek(c, "wxyz"), peek(c, "abcd"))
	}
	if s := c.Stats(); s.PinnedBlocks != 0 {
		t.Fatalf("PinnedBlocks = %d after all leases released", s.PinnedBlocks)
	}
	checkInvariants(t, c)
}

func TestCapacitySmallerThanBlock(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{BlockTokens: 16, CapacityTokens: 10})
	store(c, text(200), "")
	if s := c.Stats(); s.Blocks != 0 || s.RejectedBlocks != 3 {
		t.Fatalf("stats = %+v, want nothing stored and 3 rejected", s)
	}
}

func TestOutputAppend(t *testing.T) {
	t.Parallel()
	prompt1 := "system: be brief\nuser: " + text(207) // 230 bytes: 3 blocks + 38
	output := "assistant: " + text(139)               // 150 bytes
	prompt2 := prompt1 + output + "\nuser: and then?" + text(90)
	tests := []struct {
		name   string
		commit bool
		output string
		want   int // blocks of turn 2 found cached
	}{
		{"output re-sent by next turn hits", true, output, (230 + 150) / 64},
		{"failed request stores prompt only", true, "", 230 / 64},
		{"partial output of cancelled request", true, output[:40], (230 + 40) / 64},
		{"cancelled during prefill stores nothing", false, output, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(t, Config{CapacityTokens: 1 << 20})
			l := c.Lookup(c.NewSequence([]byte(prompt1)))
			if tt.commit {
				l.Commit()
			}
			l.Release([]byte(tt.output))
			checkInvariants(t, c)
			if s := c.Stats(); s.Blocks != int64(tt.want) {
				t.Fatalf("Blocks = %d after turn 1, want %d", s.Blocks, tt.want)
			}
			turn2 := c.Lookup(c.NewSequence([]byte(prompt2)))
			defer turn2.Release(nil)
			if got := turn2.CachedTokens(); got != tt.want*16 {
				t.Fatalf("turn 2 CachedTokens() = %d, want %d", got, tt.want*16)
			}
		})
	}
}

func TestOutputIsMostRecent(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(6))
	store(c, "ab", "cd") // a b c d, leaf d
	store(c, "xy", "")   // leaf y is newer than d
	// The output of a later request is newer than both.
	store(c, "ab", "cde")
	store(c, "p", "")
	if peek(c, "abcde") != 5 || peek(c, "xy") != 0 || peek(c, "p") != 1 {
		t.Fatalf("abcde=%d xy=%d p=%d, want 5 0 1", peek(c, "abcde"), peek(c, "xy"), peek(c, "p"))
	}
	checkInvariants(t, c)
}

// TestOutputEvictionKeepsItsChain fills the cache with the request's own
// chain so room for the output can only come from the output itself: the
// blocks it hangs from must survive.
func TestOutputEvictionKeepsItsChain(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(3))
	store(c, "ab", "cdef")
	if peek(c, "ab") != 2 || peek(c, "abc") != 3 {
		t.Fatalf("ab=%d abc=%d, want the prompt and first output block kept", peek(c, "ab"), peek(c, "abc"))
	}
	if s := c.Stats(); s.RejectedBlocks != 3 || s.Blocks != 3 {
		t.Fatalf("stats = %+v, want 3 output blocks rejected", s)
	}
	checkInvariants(t, c)
}

func TestCommitReusesConcurrentInsert(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(100))
	short := c.Lookup(c.NewSequence([]byte("abcd")))
	long := c.Lookup(c.NewSequence([]byte("abcdef")))
	same := c.Lookup(c.NewSequence([]byte("abcd")))
	// Nothing is visible before a prefill completes.
	if short.CachedTokens() != 0 || long.CachedTokens() != 0 || same.CachedTokens() != 0 {
		t.Fatal("concurrent requests hit before any Commit")
	}
	short.Commit()
	if ev := long.Commit(); ev != (Eviction{}) {
		t.Fatalf("Commit evicted %+v", ev)
	}
	same.Commit()
	if s := c.Stats(); s.Blocks != 6 || s.PinnedBlocks != 6 {
		t.Fatalf("stats = %+v, want 6 shared blocks all pinned", s)
	}
	c.mu.Lock()
	pins := c.blocks[long.seq.hashes[0]].pins
	c.mu.Unlock()
	if pins != 3 {
		t.Fatalf("first block has %d pins, want 3", pins)
	}
	short.Release(nil)
	same.Release(nil)
	if s := c.Stats(); s.PinnedBlocks != 6 {
		t.Fatalf("PinnedBlocks = %d, want 6 still held by the long request", s.PinnedBlocks)
	}
	long.Release(nil)
	if s := c.Stats(); s.PinnedBlocks != 0 {
		t.Fatalf("PinnedBlocks = %d after all releases", s.PinnedBlocks)
	}
	checkInvariants(t, c)
	if got := peek(c, "abcdef"); got != 6 {
		t.Fatalf("%d blocks stored, want 6", got)
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(100))
	l := c.Lookup(c.NewSequence([]byte("abc")))
	l.Commit()
	l.Release([]byte("de"))
	before := c.Stats()
	l.Release([]byte("zzzz"))
	if ev := l.Commit(); ev != (Eviction{}) {
		t.Fatalf("Commit after Release = %+v", ev)
	}
	if after := c.Stats(); after != before {
		t.Fatalf("second Release changed stats: %+v -> %+v", before, after)
	}
	if peek(c, "abcde") != 5 || peek(c, "abczz") != 3 {
		t.Fatal("second Release stored its output")
	}
	checkInvariants(t, c)

	var nilLease *Lease
	nilLease.Release([]byte("x"))
	if nilLease.Commit() != (Eviction{}) || nilLease.CachedTokens() != 0 {
		t.Fatal("nil lease is not a no-op")
	}
}

func TestCommitTwice(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(100))
	l := c.Lookup(c.NewSequence([]byte("abc")))
	l.Commit()
	l.Commit()
	if s := c.Stats(); s.PinnedBlocks != 3 {
		t.Fatalf("PinnedBlocks = %d after two Commits, want 3", s.PinnedBlocks)
	}
	l.Release(nil)
	checkInvariants(t, c)
}

func TestResetSafety(t *testing.T) {
	t.Parallel()
	c := newCache(t, byteCfg(100))
	store(c, "xyz", "")
	old := c.Lookup(c.NewSequence([]byte("abc")))
	old.Commit()
	stale := c.Lookup(c.NewSequence([]byte("xyz"))) // looked up, not yet committed

	c.Reset()
	if s := c.Stats(); s != (Stats{CapacityTokens: 100}) {
		t.Fatalf("stats after Reset = %+v", s)
	}
	if peek(c, "abc") != 0 || peek(c, "xyz") != 0 {
		t.Fatal("contents survived Reset")
	}

	// A new request pins the same content; the old leases must not unpin
	// or extend it.
	fresh := c.Lookup(c.NewSequence([]byte("abc")))
	fresh.Commit()
	old.Release([]byte("defg"))
	if ev := stale.Commit(); ev != (Eviction{}) {
		t.Fatalf("stale Commit = %+v", ev)
	}
	stale.Release(nil)
	s := c.Stats()
	if s.PinnedBlocks != 3 || s.Blocks != 3 || s.RejectedBlocks != 0 {
		t.Fatalf("stats = %+v, want only the fresh request's 3 pinned blocks", s)
	}
	checkInvariants(t, c)
	fresh.Release(nil)
	if s := c.Stats(); s.PinnedBlocks != 0 {
		t.Fatalf("PinnedBlocks = %d", s.PinnedBlocks)
	}
	checkInvariants(t, c)
}

func TestCapacityZeroDisablesCaching(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{})
	for range 3 {
		l := c.Lookup(c.NewSequence([]byte(text(500))))
		if l.CachedTokens() != 0 {
			t.Fatalf("CachedTokens() = %d with caching disabled", l.CachedTokens())
		}
		if ev := l.Commit(); ev != (Eviction{}) {
			t.Fatalf("Commit = %+v", ev)
		}
		l.Release([]byte(text(300)))
	}
	s := c.Stats()
	want := Stats{MissCount: 3, QueryTokens: 3 * 125}
	if s != want {
		t.Fatalf("stats = %+v, want %+v", s, want)
	}
}

func TestLookupRejectsForeignSequence(t *testing.T) {
	t.Parallel()
	a := newCache(t, Config{CapacityTokens: 100})
	b := newCache(t, Config{BlockTokens: 32, CapacityTokens: 100})
	defer func() {
		if recover() == nil {
			t.Fatal("Lookup accepted a Sequence cut for another geometry")
		}
	}()
	b.Lookup(a.NewSequence([]byte("hello")))
}

// TestConcurrentRequests runs overlapping conversations from many goroutines;
// under -race it checks the locking, and afterwards that all pins are gone.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{BlockTokens: 4, CharsPerToken: 1, CapacityTokens: 400})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			history := "system prompt shared by all conversations. "
			for turn := range 30 {
				user := string(rune('a'+g)) + text(13+turn%7)
				prompt := history + user
				l := c.Lookup(c.NewSequence([]byte(prompt)))
				if l.CachedTokens() > l.seq.Tokens() {
					t.Errorf("cached %d > prompt %d", l.CachedTokens(), l.seq.Tokens())
				}
				if turn%5 != 4 {
					l.Commit()
				}
				reply := text(10 + turn)
				l.Release([]byte(reply))
				history = prompt + reply
				if turn%11 == 10 {
					history = "system prompt shared by all conversations. "
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, c)
	if s := c.Stats(); s.PinnedBlocks != 0 || s.HitCount == 0 {
		t.Fatalf("stats = %+v, want no pins and some hits", s)
	}
}
