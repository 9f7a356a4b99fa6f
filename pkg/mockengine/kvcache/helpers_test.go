package kvcache

import (
	"strings"
	"testing"
)

// byteCfg makes every byte one block of one token, so tests can spell block
// chains as strings: "abc" is the chain a -> b -> c.
func byteCfg(capacity int64) Config {
	return Config{BlockTokens: 1, CharsPerToken: 1, CapacityTokens: capacity}
}

func newCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return c
}

// store runs a whole request for prompt: lookup, commit, release with output.
func store(c *Cache, prompt, output string) Eviction {
	l := c.Lookup(c.NewSequence([]byte(prompt)))
	ev := l.Commit()
	l.Release([]byte(output))
	return ev
}

// peek counts how many leading blocks of content are stored, without
// pinning or touching recency, so tests can observe without disturbing.
func peek(c *Cache, content string) int {
	seq := c.NewSequence([]byte(content))
	c.mu.Lock()
	defer c.mu.Unlock()
	var parent *block
	n := 0
	for _, h := range seq.hashes {
		b, ok := c.blocks[h]
		if !ok || b.parent != parent {
			break
		}
		parent = b
		n++
	}
	return n
}

// checkInvariants verifies the structure the cache relies on: counters match
// the map, every parent is stored, child and pin counts are right and the
// evictable list holds exactly the unpinned leaves.
func checkInvariants(t testing.TB, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	children := make(map[*block]int32, len(c.blocks))
	var pinned int64
	for h, b := range c.blocks {
		if b.hash != h {
			t.Fatalf("block keyed %x has hash %x", h, b.hash)
		}
		if b.parent != nil {
			if c.blocks[b.parent.hash] != b.parent {
				t.Fatalf("block %x has a parent that is not stored", h)
			}
			children[b.parent]++
		}
		if b.pins < 0 {
			t.Fatalf("block %x has %d pins", h, b.pins)
		}
		if b.pins > 0 {
			pinned++
		}
	}
	inList := make(map[*block]bool)
	for b := c.lru.next; b != &c.lru; b = b.next {
		if b.next.prev != b {
			t.Fatalf("evictable list broken at %x", b.hash)
		}
		inList[b] = true
	}
	for _, b := range c.blocks {
		if b.children != children[b] {
			t.Fatalf("block %x counts %d children, has %d", b.hash, b.children, children[b])
		}
		want := b.pins == 0 && b.children == 0
		if inList[b] != want {
			t.Fatalf("block %x (pins %d, children %d) in evictable list = %v", b.hash, b.pins, b.children, inList[b])
		}
	}
	if len(inList) > len(c.blocks) {
		t.Fatalf("evictable list holds %d blocks, cache %d", len(inList), len(c.blocks))
	}
	s := c.stats
	if s.Blocks != int64(len(c.blocks)) || s.UsedTokens != s.Blocks*int64(c.cfg.BlockTokens) || s.PinnedBlocks != pinned {
		t.Fatalf("stats %+v disagree with %d blocks, %d pinned", s, len(c.blocks), pinned)
	}
	if s.UsedTokens > s.CapacityTokens {
		t.Fatalf("used %d tokens over capacity %d", s.UsedTokens, s.CapacityTokens)
	}
}

func text(n int) string { return strings.Repeat("0123456789abcdef", n/16+1)[:n] }
