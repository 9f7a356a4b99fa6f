package lastcluster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"),
		// memberlist's Shutdown does not wait for a probe already waiting on
		// its ack timeout; that goroutine ends by itself.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func TestKey(t *testing.T) {
	k := Key("rk", "m", "mt:v1:session:x")
	if !strings.HasPrefix(k, "lc:v1:") || len(k) != 6+64 {
		t.Fatal(k)
	}
	if k != Key("rk", "m", "mt:v1:session:x") {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{Key("rk2", "m", "mt:v1:session:x"), Key("rk", "m2", "mt:v1:session:x"), Key("rk", "m", "mt:v1:session:y")} {
		if other == k {
			t.Fatal("field change kept the key")
		}
	}
	if Key("ab", "c", "") == Key("a", "bc", "") {
		t.Fatal("length prefix does not separate fields")
	}
}

func TestLRUEvictsAtCap(t *testing.T) {
	l := NewLRU(2, time.Minute)
	ctx := context.Background()
	_ = l.Set(ctx, "a", "1", 0)
	_ = l.Set(ctx, "b", "2", 0)
	_, _, _ = l.Get(ctx, "a") // a is now most recent
	_ = l.Set(ctx, "c", "3", 0)
	if _, ok, _ := l.Get(ctx, "b"); ok {
		t.Fatal("least recently used entry survived")
	}
	if v, ok, _ := l.Get(ctx, "a"); !ok || v != "1" {
		t.Fatal("recent entry evicted")
	}
}

func newTracker(store Store, m *metrics.Metrics) *Tracker {
	return New(Config{Enabled: true, TTL: time.Minute, LookupTimeout: 20 * time.Millisecond, WriteTimeout: time.Second},
		store, m, nil, slog.New(slog.DiscardHandler), clock.Real{})
}

func TestTrackerRules(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	// Every series exists at 0 before any traffic.
	n, err := testutil.GatherAndCount(reg, "llm_api_gateway_last_cluster_lookups_total", "llm_api_gateway_last_cluster_writes_total")
	if err != nil || n != 9 {
		t.Fatalf("pre-initialised series = %d (%v), want 9", n, err)
	}
	tr := newTracker(NewLRU(10, time.Minute), m)
	ctx := context.Background()
	eligible := Target{Model: "m", Session: session.Session{ID: "s", Source: session.SourceHeader, AffinityKey: "mt:v1:session:s"}}
	payload := Target{Model: "m", Session: session.Session{ID: "p", Source: session.SourcePayload, AffinityKey: "mt:v1:payload:p"}}
	if v := tr.Lookup(ctx, eligible); v != "" {
		t.Fatal(v)
	}
	tr.Remember(ctx, eligible, strings.Repeat("x", 257), true) // too long: skipped
	tr.Remember(ctx, eligible, "", false)                      // absent: skipped
	tr.Remember(ctx, payload, "c1", true)                      // ineligible: nothing
	tr.Remember(ctx, eligible, "c1", true)
	tr.Wait(ctx)
	if v := tr.Lookup(ctx, eligible); v != "c1" {
		t.Fatalf("hit = %q", v)
	}
	tr.Lookup(ctx, payload)
	tr.Lookup(ctx, Target{Model: "m"}) // no session: not counted
	want := map[string]float64{"hit": 1, "miss": 1, "skipped": 1}
	for r, v := range want {
		if got := testutil.ToFloat64(m.LastClusterLookup.WithLabelValues(r)); got != v {
			t.Errorf("lookups{%s} = %v, want %v", r, got, v)
		}
	}
	if got := testutil.ToFloat64(m.LastClusterWrite.WithLabelValues("skipped")); got != 2 {
		t.Errorf("writes skipped = %v", got)
	}
	// A cancelled client counts as timeout.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tr2 := newTracker(blocking{}, m)
	tr2.Lookup(cctx, eligible)
	if got := testutil.ToFloat64(m.LastClusterLookup.WithLabelValues("timeout")); got != 1 {
		t.Errorf("cancelled lookup counted %v timeouts", got)
	}
}

type blocking struct{}

func (blocking) Get(ctx context.Context, _ string) (string, bool, error) {
	<-ctx.Done()
	return "", false, ctx.Err()
}
func (blocking) Set(context.Context, string, string, time.Duration) error { return nil }

// TestOlricSharedAcrossNodesAndNodeLoss: an entry written through node 1
// is read through nodes 2 and 3; after node 3 leaves, lookups through the
// others keep answering within the deadline (a miss at worst).
func TestOlricSharedAcrossNodesAndNodeLoss(t *testing.T) {
	nodes := olrictest.Cluster(t, 3)
	m := metrics.New(prometheus.NewRegistry())
	var trs []*Tracker
	for _, n := range nodes {
		dm, err := n.Embedded().NewDMap("stargate-last-cluster")
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, newTracker(Olric{DM: dm}, m))
	}
	ctx := context.Background()
	targets := make([]Target, 40)
	for i := range targets {
		id := "s" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		targets[i] = Target{Model: "m", Session: session.Session{ID: id, Source: session.SourcePromptCacheKey, AffinityKey: session.Hashed("session", id)}}
		trs[0].Remember(ctx, targets[i], "cluster-1", true)
	}
	trs[0].Wait(ctx)
	for i, tg := range targets {
		if v := trs[1+i%2].Lookup(ctx, tg); v != "cluster-1" {
			t.Fatalf("target %d: lookup via another node = %q", i, v)
		}
	}
	if err := nodes[2].Shutdown(ctx); err != nil {
		t.Logf("shutdown: %v", err)
	}
	for _, tg := range targets {
		for _, tr := range trs[:2] {
			start := time.Now()
			tr.Lookup(ctx, tg)
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Fatalf("lookup took %v after node loss", d)
			}
		}
	}
}

// mapStore is a shared store that counts its calls and can fail writes.
type mapStore struct {
	mu         sync.Mutex
	m          map[string]string
	gets, sets int
	failSets   bool
}

func (s *mapStore) Get(_ context.Context, key string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	v, ok := s.m[key]
	return v, ok, nil
}

func (s *mapStore) Set(_ context.Context, key, value string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets++
	if s.failSets {
		return errors.New("down")
	}
	s.m[key] = value
	return nil
}

func (s *mapStore) calls() (gets, sets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.sets
}

func newCachedTracker(store Store, clk clock.Clock) (*Tracker, *metrics.Metrics) {
	m := metrics.New(prometheus.NewRegistry())
	return New(Config{Enabled: true, TTL: time.Minute, LookupTimeout: time.Second, WriteTimeout: time.Second, LocalTTL: 5 * time.Second, LocalMaxEntries: 10},
		store, m, nil, slog.New(slog.DiscardHandler), clk), m
}

var sessionTarget = Target{Model: "m", Session: session.Session{ID: "s", Source: session.SourceHeader, AffinityKey: "mt:v1:session:s"}}

// TestLocalCache: a cluster this replica wrote answers its lookups without
// the store, an unchanged cluster is not rewritten within the cache TTL, a
// changed one is, and past the TTL both go to the store again (so the
// store's entry is renewed while the session is served here).
func TestLocalCache(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := &mapStore{m: map[string]string{}}
	tr, m := newCachedTracker(store, clk)
	ctx := context.Background()
	tr.Remember(ctx, sessionTarget, "c1", true)
	tr.Wait(ctx)
	if v := tr.Lookup(ctx, sessionTarget); v != "c1" {
		t.Fatalf("lookup = %q", v)
	}
	tr.Remember(ctx, sessionTarget, "c1", true) // unchanged: suppressed
	tr.Wait(ctx)
	if gets, sets := store.calls(); gets != 0 || sets != 1 {
		t.Fatalf("store saw %d gets and %d sets, want 0 and 1", gets, sets)
	}
	tr.Remember(ctx, sessionTarget, "c2", true) // changed: written
	tr.Wait(ctx)
	if _, sets := store.calls(); sets != 2 || store.m[Key("", "m", "mt:v1:session:s")] != "c2" {
		t.Fatalf("changed cluster not written: %d sets", sets)
	}
	clk.Advance(5 * time.Second)
	if v := tr.Lookup(ctx, sessionTarget); v != "c2" {
		t.Fatalf("lookup after the TTL = %q", v)
	}
	tr.Remember(ctx, sessionTarget, "c2", true) // read, not written, here: written
	tr.Wait(ctx)
	if gets, sets := store.calls(); gets != 1 || sets != 3 {
		t.Fatalf("after the TTL the store saw %d gets and %d sets, want 1 and 3", gets, sets)
	}
	for op, want := range map[[2]string]float64{{"lookup", "hit"}: 1, {"lookup", "miss"}: 1, {"write", "stored"}: 3, {"write", "suppressed"}: 1} {
		if got := testutil.ToFloat64(m.LastClusterCache.WithLabelValues(op[0], op[1])); got != want {
			t.Errorf("cache{%s,%s} = %v, want %v", op[0], op[1], got, want)
		}
	}
	if got := testutil.ToFloat64(m.LastClusterLookup.WithLabelValues("hit")); got != 2 {
		t.Errorf("lookups{hit} = %v, want 2 (local and store hits alike)", got)
	}
}

// TestLocalCacheStalenessAcrossGateways: a session served on gateway A
// moves to gateway B, which serves it elsewhere; A's hint for it is the
// old cluster for at most the cache TTL after A last read or wrote it,
// then the new one. Hits never renew the entry, so a session that keeps
// coming back to A still sees B's write in time.
func TestLocalCacheStalenessAcrossGateways(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := &mapStore{m: map[string]string{}}
	a, _ := newCachedTracker(store, clk)
	b, _ := newCachedTracker(store, clk)
	ctx := context.Background()
	a.Remember(ctx, sessionTarget, "c1", true)
	a.Wait(ctx)
	if v := b.Lookup(ctx, sessionTarget); v != "c1" {
		t.Fatalf("B reads %q", v)
	}
	b.Remember(ctx, sessionTarget, "c2", true)
	b.Wait(ctx)
	for range 4 {
		clk.Advance(time.Second)
		if v := a.Lookup(ctx, sessionTarget); v != "c1" {
			t.Fatalf("A within its TTL: %q", v)
		}
	}
	clk.Advance(time.Second)
	if v := a.Lookup(ctx, sessionTarget); v != "c2" {
		t.Fatalf("A 5 s after its write still hints %q, want B's c2", v)
	}
}

// TestLocalCacheFailedWrite: a write the store refused is not suppressed
// next time.
func TestLocalCacheFailedWrite(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := &mapStore{m: map[string]string{}, failSets: true}
	tr, _ := newCachedTracker(store, clk)
	ctx := context.Background()
	tr.Remember(ctx, sessionTarget, "c1", true)
	tr.Wait(ctx)
	store.failSets = false
	tr.Remember(ctx, sessionTarget, "c1", true)
	tr.Wait(ctx)
	if _, sets := store.calls(); sets != 2 || store.m[Key("", "m", "mt:v1:session:s")] != "c1" {
		t.Fatalf("%d sets, stored %q: the failed write was suppressed", sets, store.m[Key("", "m", "mt:v1:session:s")])
	}
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	*LRU
	gets, sets int
	mu         sync.Mutex
}

func (c *countingStore) Get(ctx context.Context, key string) (string, bool, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.LRU.Get(ctx, key)
}

func (c *countingStore) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	c.mu.Lock()
	c.sets++
	c.mu.Unlock()
	return c.LRU.Set(ctx, key, value, ttl)
}

// TestTrackerAnchor: a payload session is tracked under its
// conversation anchor, never its payload key; a first turn never asks
// the store (it cannot find anything) but records, so a one-shot keyless
// request costs one write; a later turn reads what the first recorded.
// A payload session without an anchor is skipped as before.
func TestTrackerAnchor(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	store := &countingStore{LRU: NewLRU(10, time.Minute)}
	tr := newTracker(store, m)
	ctx := context.Background()
	anchor := session.AnchorPrefix + strings.Repeat("a", 64)
	first := Target{Model: "m", Session: session.Session{Source: session.SourcePayload, AffinityKey: "mt:v1:payload:1", Anchor: session.Anchor{Key: anchor}}}
	if got := tr.Lookup(ctx, first); got != "" || store.gets != 0 {
		t.Fatalf("first turn: %q after %d gets, want no store call", got, store.gets)
	}
	tr.Remember(ctx, first, "c1", true)
	tr.Wait(ctx)
	if v, ok, _ := store.LRU.Get(ctx, Key("", "m", anchor)); !ok || v != "c1" || store.sets != 1 || store.Len() != 1 {
		t.Fatalf("stored %q %v after %d sets, %d entries; want c1 under the anchor", v, ok, store.sets, store.Len())
	}
	later := first
	later.Session.AffinityKey, later.Session.Anchor.Later = "mt:v1:payload:2", true
	if got := tr.Lookup(ctx, later); got != "c1" || store.gets != 1 {
		t.Fatalf("later turn: %q after %d gets, want c1 from one", got, store.gets)
	}
	none := first
	none.Session.Anchor = session.Anchor{}
	tr.Lookup(ctx, none)
	tr.Remember(ctx, none, "c2", true)
	tr.Wait(ctx)
	if store.gets != 1 || store.sets != 1 {
		t.Errorf("no anchor: %d gets, %d sets; want none", store.gets, store.sets)
	}
	if got := testutil.ToFloat64(m.LastClusterLookup.WithLabelValues("skipped")); got != 2 {
		t.Errorf("skipped %v, want 2 (the first turn and the session without an anchor)", got)
	}
}
