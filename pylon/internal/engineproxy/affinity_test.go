package engineproxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/affinity"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// preferredEngine is the index in urls of the engine key prefers,
// computed from the pinned hashes rather than from the pool.
func preferredEngine(key string, urls []string) int {
	k := affinity.HashKey(key)
	best, bestScore := 0, affinity.Score(k, affinity.HashID(urls[0]))
	for i := 1; i < len(urls); i++ {
		if s := affinity.Score(k, affinity.HashID(urls[i])); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// keyPreferring returns a session key whose preferred engine is urls[want].
func keyPreferring(t *testing.T, urls []string, want int) string {
	t.Helper()
	for i := range 1000 {
		if key := fmt.Sprintf("mt:v1:session:%d", i); preferredEngine(key, urls) == want {
			return key
		}
	}
	t.Fatal("no key prefers the engine")
	return ""
}

// postKey sends one chat request with an affinity key and returns its
// status once the proxy handler has returned.
func (h *harness) postKey(id, key string) int {
	h.t.Helper()
	hd := validHeaders(id)
	hd.Set(headers.CacheAffinityKey, key)
	resp, _ := h.post("/v1/chat/completions", hd, chatBody)
	h.waitServed(1)
	return resp.StatusCode
}

func (h *harness) picks(outcome string) float64 {
	h.t.Helper()
	return h.metric("pylon_engine_affinity_picks_total", "outcome="+outcome)
}

func urlsOf(engines []*scripted) []string {
	out := make([]string, len(engines))
	for i, e := range engines {
		out[i] = e.srv.URL
	}
	return out
}

// TestEngineAffinitySameKeySameEngine: the turns of one session land on
// the engine its key prefers, where least outstanding with round-robin
// ties would rotate them over all three; other keys spread over the
// engines.
func TestEngineAffinitySameKeySameEngine(t *testing.T) {
	engines := []*scripted{newScripted(t, okJSON), newScripted(t, okJSON), newScripted(t, okJSON)}
	urls := urlsOf(engines)
	h := newEnginesHarness(t, urls, options{})
	key := "mt:v1:session:abc"
	pref := preferredEngine(key, urls)
	for i := range 6 {
		if s := h.postKey("t"+strconv.Itoa(i), key); s != http.StatusOK {
			t.Fatalf("turn %d: %d", i, s)
		}
	}
	if got := strings.Join(engines[pref].ids(), ","); got != "t0,t1,t2,t3,t4,t5" {
		t.Fatalf("preferred engine %d got %q, want every turn", pref, got)
	}
	for i := range 60 {
		h.postKey("k"+strconv.Itoa(i), fmt.Sprintf("mt:v1:session:k%d", i))
	}
	for i, e := range engines {
		if n := len(e.received()); n < 10 {
			t.Errorf("engine %d got %d requests of 66, want the keys spread", i, n)
		}
	}
	if p, s, n := h.picks("preferred"), h.picks("spilled"), h.picks("no_key"); p != 66 || s != 0 || n != 0 {
		t.Errorf("picks preferred %v spilled %v no_key %v, want 66 0 0", p, s, n)
	}
}

// fullPreferred starts a pool of two engines with --max-engine-concurrency
// 2 (one request each) and sends a session's "slow" request, which holds
// its preferred engine, engines[1], until unblock. done receives its
// status.
func fullPreferred(t *testing.T, cfg func(*Config)) (h *harness, engines []*scripted, key string, unblock func(), done chan int) {
	t.Helper()
	release := make(chan struct{})
	handle := func(w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.Header.Get(headers.RequestID) == "slow" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		okJSON(w, r, rec)
	}
	engines = []*scripted{newScripted(t, handle), newScripted(t, handle)}
	urls := urlsOf(engines)
	h = newEnginesHarness(t, urls, options{proxy: func(c *Config) {
		c.MaxEngineConcurrency = 2
		cfg(c)
	}})
	var once sync.Once
	unblock = func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the servers close, should the test fail first
	key = keyPreferring(t, urls, 1)
	done = make(chan int, 1)
	go func() {
		hd := validHeaders("slow")
		hd.Set(headers.CacheAffinityKey, key)
		resp, _ := h.post("/v1/chat/completions", hd, chatBody)
		done <- resp.StatusCode
	}()
	engines[1].next(t)
	return h, engines, key, unblock, done
}

// TestEngineAffinityFullPreferredSpills: with --max-engine-concurrency 2
// over two engines each runs one request; while the preferred engine holds
// one, the session's next request goes to the other engine, and it comes
// back once the first ends.
func TestEngineAffinityFullPreferredSpills(t *testing.T) {
	h, engines, key, unblock, done := fullPreferred(t, func(*Config) {})
	if s := h.postKey("while-full", key); s != http.StatusOK {
		t.Fatalf("status %d", s)
	}
	if got := strings.Join(engines[0].ids(), ","); got != "while-full" {
		t.Fatalf("engine 0 got %q, want the request the full engine could not take", got)
	}
	unblock()
	if s := <-done; s != http.StatusOK {
		t.Fatalf("slow request: %d", s)
	}
	h.waitServed(1)
	if s := h.postKey("after", key); s != http.StatusOK {
		t.Fatalf("status %d", s)
	}
	if got := strings.Join(engines[1].ids(), ","); got != "slow,after" {
		t.Fatalf("engine 1 got %q, want the session back", got)
	}
	if p, s := h.picks("preferred"), h.picks("spilled"); p != 2 || s != 1 {
		t.Errorf("picks preferred %v spilled %v, want 2 1", p, s)
	}
}

// TestEngineAffinityFullPreferredQueues: with
// --engine-affinity-when-full=queue the same session's request stays on
// its full engine (it queues there, where its prefix is cached) instead of
// spilling to the other one. The load bound is off so that only the limit
// is in play.
func TestEngineAffinityFullPreferredQueues(t *testing.T) {
	h, engines, key, unblock, done := fullPreferred(t, func(c *Config) {
		c.EngineAffinityLoadFactor, c.EngineAffinityQueueWhenFull = 0, true
	})
	if s := h.postKey("while-full", key); s != http.StatusOK {
		t.Fatalf("status %d", s)
	}
	if got := engines[0].ids(); len(got) != 0 {
		t.Fatalf("engine 0 got %q, want nothing: the session queues on its own engine", got)
	}
	unblock()
	if s := <-done; s != http.StatusOK {
		t.Fatalf("slow request: %d", s)
	}
	if got := strings.Join(engines[1].ids(), ","); got != "slow,while-full" {
		t.Fatalf("engine 1 got %q, want both of the session's requests", got)
	}
	if p, s := h.picks("preferred"), h.picks("spilled"); p != 2 || s != 0 {
		t.Errorf("picks preferred %v spilled %v, want 2 0", p, s)
	}
}

// TestEngineAffinityRetryExcludesFailedEngine: a session whose preferred
// engine is dead is retried on another engine, never the failed one; the
// next turn goes straight to a live engine while the dead one is down.
func TestEngineAffinityRetryExcludesFailedEngine(t *testing.T) {
	dead := closedURL(t)
	a, b := newScripted(t, okJSON), newScripted(t, okJSON)
	urls := []string{a.srv.URL, dead, b.srv.URL}
	h := newEnginesHarness(t, urls, options{})
	key := keyPreferring(t, urls, 1)
	for i := range 3 {
		if s := h.postKey("t"+strconv.Itoa(i), key); s != http.StatusOK {
			t.Fatalf("turn %d: %d", i, s)
		}
	}
	if n := len(a.received()) + len(b.received()); n != 3 {
		t.Fatalf("live engines got %d of 3 turns", n)
	}
	if got := h.metric("pylon_upstream_engine_requests_total", "engine="+label(t, dead)+",status=retried"); got != 1 {
		t.Errorf("dead engine tried %v times, want once: down, it is skipped", got)
	}
	// The first turn: its preferred engine (counted preferred), then the
	// retry elsewhere; the two next turns spill at once.
	if p, s := h.picks("preferred"), h.picks("spilled"); p != 1 || s != 3 {
		t.Errorf("picks preferred %v spilled %v, want 1 3", p, s)
	}
}

// TestEngineAffinityRetryNeverPicksExcluded checks the pool itself: a
// retry for a key never returns the engine it excludes, even when that
// engine is the key's only up engine.
func TestEngineAffinityRetryNeverPicksExcluded(t *testing.T) {
	urls := []string{"http://e0:1", "http://e1:1", "http://e2:1"}
	cfg := Defaults()
	cfg.UpstreamBaseURLs, cfg.Clock = urls, clock.NewFake(epoch)
	p := newPool(&cfg, nil)
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		first := p.acquire(key, nil, false)
		if first.idx != preferredEngine(key, urls) {
			t.Fatalf("%s: first pick %d, want its preferred %d", key, first.idx, preferredEngine(key, urls))
		}
		alt := p.acquire(key, first, true)
		if alt == nil || alt == first {
			t.Fatalf("%s: retry picked %v, excluded %d", key, alt, first.idx)
		}
		p.release(first)
		p.release(alt)
	}
	p.failed(p.engines[1])
	p.failed(p.engines[2])
	if alt := p.acquire("k", p.engines[0], true); alt != nil {
		t.Fatalf("only down engines left besides the excluded one: got %d, want none", alt.idx)
	}
}

// TestEngineAffinityNoKeyAndOff: a request without a key keeps the least
// outstanding rule (ties round robin) and counts as no_key; with
// --engine-affinity off a key changes nothing and nothing is counted.
func TestEngineAffinityNoKeyAndOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		on     bool
		key    string
		noKeys float64
	}{{"no key", true, "", 6}, {"off", false, "mt:v1:session:abc", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			engines := []*scripted{newScripted(t, okJSON), newScripted(t, okJSON), newScripted(t, okJSON)}
			h := newEnginesHarness(t, urlsOf(engines), options{proxy: func(c *Config) { c.EngineAffinity = tc.on }})
			for i := range 6 {
				hd := validHeaders("r" + strconv.Itoa(i))
				if tc.key != "" {
					hd.Set(headers.CacheAffinityKey, tc.key)
				}
				if resp, b := h.post("/v1/chat/completions", hd, chatBody); resp.StatusCode != http.StatusOK {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
				h.waitServed(1)
			}
			want := [][]string{{"r0", "r3"}, {"r1", "r4"}, {"r2", "r5"}}
			for i, e := range engines {
				if got := strings.Join(e.ids(), ","); got != strings.Join(want[i], ",") {
					t.Errorf("engine %d got %s, want %v", i, got, want[i])
				}
			}
			if got := h.picks("no_key"); got != tc.noKeys {
				t.Errorf("no_key picks %v, want %v", got, tc.noKeys)
			}
			if got := h.picks("preferred") + h.picks("spilled"); got != 0 {
				t.Errorf("keyed picks %v, want 0", got)
			}
		})
	}
}

// The per-engine limit is the flag's equal share, rounded up.
func TestEngineAffinityLimitShare(t *testing.T) {
	for _, tc := range []struct {
		total uint64
		n     int
		want  int
	}{{0, 2, 0}, {32, 2, 16}, {33, 2, 17}, {5, 3, 2}, {1, 4, 1}} {
		cfg := Defaults()
		cfg.Clock, cfg.MaxEngineConcurrency = clock.NewFake(time.Unix(0, 0)), tc.total
		for i := range tc.n {
			cfg.UpstreamBaseURLs = append(cfg.UpstreamBaseURLs, fmt.Sprintf("http://e%d:1", i))
		}
		if got := newPool(&cfg, nil).limit; got != tc.want {
			t.Errorf("%d over %d engines: limit %d, want %d", tc.total, tc.n, got, tc.want)
		}
	}
}

func TestCheckLoadFactor(t *testing.T) {
	for f, ok := range map[float64]bool{0: true, 1: true, 1.5: true, 0.99: false, -1: false} {
		if err := CheckLoadFactor(f); (err == nil) != ok {
			t.Errorf("%v: %v", f, err)
		}
	}
	cfg := Defaults()
	cfg.UpstreamBaseURL = "http://e:1"
	cfg.EngineAffinityLoadFactor = 0.5
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--engine-affinity-load-factor") {
		t.Errorf("Validate = %v", err)
	}
}

// BenchmarkPoolAcquire is one engine pick and its release, under the
// pool's lock: by key, without a key, and with affinity off (the pool's
// earlier rule).
func BenchmarkPoolAcquire(b *testing.B) {
	for _, n := range []int{2, 8} {
		for _, tc := range []struct {
			name string
			on   bool
			key  string
		}{{"key", true, "mt:v1:session:0123456789abcdef0123456789abcdef"}, {"no_key", true, ""}, {"off", false, "mt:v1:session:0"}} {
			b.Run(fmt.Sprintf("%d/%s", n, tc.name), func(b *testing.B) {
				cfg := Defaults()
				cfg.Clock, cfg.EngineAffinity = clock.NewFake(epoch), tc.on
				for i := range n {
					cfg.UpstreamBaseURLs = append(cfg.UpstreamBaseURLs, fmt.Sprintf("http://10.0.0.%d:8000", i))
				}
				p := newPool(&cfg, nil)
				b.ReportAllocs()
				for b.Loop() {
					p.release(p.acquire(tc.key, nil, false))
				}
			})
		}
	}
}
