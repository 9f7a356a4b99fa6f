package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/pkg/clock"
)

// countingCounter counts the adds that reach the shared counter.
type countingCounter struct {
	Counter
	calls atomic.Int64
}

func (c *countingCounter) Add(ctx context.Context, key string, delta int64, ttl time.Duration) (int64, error) {
	c.calls.Add(1)
	return c.Counter.Add(ctx, key, delta, ttl)
}

// newSynced returns a limiter in the local mode over remote and its
// Synced state.
func newSynced(remote Counter, clk clock.Clock, failOpen bool, replicas int) (*Limiter, *Synced, *metrics.Metrics) {
	return newSyncedWithin(remote, clk, failOpen, replicas, time.Second)
}

// newSyncedWithin is newSynced with a store timeout.
func newSyncedWithin(remote Counter, clk clock.Clock, failOpen bool, replicas int, timeout time.Duration) (*Limiter, *Synced, *metrics.Metrics) {
	m := metrics.New(prometheus.NewRegistry())
	s := NewSynced(remote, SyncConfig{Interval: 100 * time.Millisecond, StoreTimeout: timeout}, clk, m)
	s.SetReplicas(replicas)
	return New(remote, Config{FailOpen: failOpen, StoreTimeout: timeout, Synced: s}, clk, m, nil), s, m
}

// TestSyncedOneReplicaIsExact: alone, the local mode admits exactly the
// limit, asks the store only for a key's first use, and a round brings
// the store to the count.
func TestSyncedOneReplicaIsExact(t *testing.T) {
	clk := clock.NewFake(t0)
	remote := &countingCounter{Counter: NewLocal(clk)}
	l, s, m := newSynced(remote, clk, true, 1)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 10}
	admitted := 0
	for range 15 {
		if _, d := l.Reserve(ctx, "p", "m", lim, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of a limit of 10", admitted)
	}
	// Only the first use asked the store: the 9 admissions after it and
	// the 5 refusals were decided locally.
	if got := testutil.ToFloat64(m.RateLimitChecks.WithLabelValues("local")); got != 14 || remote.calls.Load() != 1 {
		t.Fatalf("local checks = %v and %d store calls, want 14 and 1", got, remote.calls.Load())
	}
	s.Sync(ctx)
	key := l.key("p", "m", "requests", t0.UnixMilli()/Window.Milliseconds())
	if v, _ := remote.Counter.Add(ctx, key, 0, KeyTTL); v != 10 {
		t.Fatalf("store holds %d after a round, want the 10 admitted (refusals taken back)", v)
	}
}

// TestSyncedRemainingHeaders: the headers count what this replica knows:
// the last total seen plus its own pending adds.
func TestSyncedRemainingHeaders(t *testing.T) {
	clk := clock.NewFake(t0)
	l, s, _ := newSynced(NewLocal(clk), clk, true, 1)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 3, TokensPerMinute: 100}
	res, d := l.Reserve(ctx, "p", "m", lim, 60)
	if !d.Allowed || d.Tokens.Remaining != 40 || d.Requests.Remaining != 2 {
		t.Fatalf("%+v %+v %+v", d, d.Tokens, d.Requests)
	}
	if _, d := l.Reserve(ctx, "p", "m", lim, 60); d.Allowed || d.Tokens.Remaining != 40 || d.Requests.Remaining != 2 {
		t.Fatalf("over tokens admitted: %+v %+v %+v", d, d.Tokens, d.Requests)
	}
	res.Settle(ctx, 10) // a refund of 50, applied locally
	s.Sync(ctx)
	if _, d := l.Reserve(ctx, "p", "m", lim, 60); !d.Allowed || d.Tokens.Remaining != 30 {
		t.Fatalf("after refund: %+v %+v", d, d.Tokens)
	}
}

// TestSyncedShareAcrossReplicas: two replicas sharing one store each
// admit locally only their share of what is left (the limit minus the
// total, halved); past it, and past the limit, they ask the store. So a
// burst on both before any round admits at most the limit plus the other
// replica's share (1.5 times the limit), where admitting up to the limit
// locally would let each replica take all of it.
func TestSyncedShareAcrossReplicas(t *testing.T) {
	clk := clock.NewFake(t0)
	shared := NewLocal(clk)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 100}
	var ls []*Limiter
	for range 2 {
		l, _, _ := newSynced(shared, clk, true, 2)
		ls = append(ls, l)
	}
	admitted := 0
	for range 200 {
		for _, l := range ls {
			if _, d := l.Reserve(ctx, "p", "m", lim, 1); d.Allowed {
				admitted++
			}
		}
	}
	t.Logf("a burst on 2 replicas without a round admitted %d of a limit of 100", admitted)
	if admitted < 100 || admitted > 150 {
		t.Fatalf("a burst on 2 replicas admitted %d of a limit of 100, want 100 to 150", admitted)
	}
}

// TestSyncedKeyIdleForARoundAsksTheStore: a total not refreshed by the
// latest or the previous round is not trusted.
func TestSyncedKeyIdleForARoundAsksTheStore(t *testing.T) {
	clk := clock.NewFake(t0)
	remote := &countingCounter{Counter: NewLocal(clk)}
	l, s, _ := newSynced(remote, clk, true, 1)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 100}
	l.Reserve(ctx, "p", "m", lim, 1) // first use: the store
	l.Reserve(ctx, "p", "m", lim, 1) // local
	if remote.calls.Load() != 1 {
		t.Fatalf("%d store calls, want 1", remote.calls.Load())
	}
	s.Sync(ctx) // pushes 1, refreshes
	s.Sync(ctx) // key unused since: dropped
	if s.Len() != 0 {
		t.Fatalf("%d keys kept after an idle round", s.Len())
	}
	before := remote.calls.Load()
	l.Reserve(ctx, "p", "m", lim, 1)
	if remote.calls.Load() != before+1 {
		t.Fatal("a key idle for a round was admitted from its old total")
	}
}

// flaky fails every add while down is set.
type flaky struct {
	Counter
	down atomic.Bool
}

func (f *flaky) Add(ctx context.Context, key string, delta int64, ttl time.Duration) (int64, error) {
	if f.down.Load() {
		return 0, errors.New("down")
	}
	return f.Counter.Add(ctx, key, delta, ttl)
}

// TestSyncedStoreDown: a failed store check fails open (or closed, as
// configured) like the exact mode; a failed round keeps its deltas and
// pushes them when the store is back.
func TestSyncedStoreDown(t *testing.T) {
	clk := clock.NewFake(t0)
	remote := &flaky{Counter: NewLocal(clk)}
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 100}
	l, s, m := newSynced(remote, clk, true, 1)
	remote.down.Store(true)
	if _, d := l.Reserve(ctx, "p", "m", lim, 1); !d.Allowed || d.Err != nil {
		t.Fatalf("fail open refused: %+v", d)
	}
	if testutil.ToFloat64(m.RateLimitDecision.WithLabelValues("fail_open", "none")) != 1 {
		t.Fatal("fail open not counted")
	}
	closed, _, _ := newSynced(remote, clk, false, 1)
	if _, d := closed.Reserve(ctx, "p", "m", lim, 1); d.Allowed || d.Err == nil {
		t.Fatalf("fail closed admitted: %+v", d)
	}

	remote.down.Store(false)
	for range 5 {
		l.Reserve(ctx, "p", "m", lim, 1)
	}
	remote.down.Store(true)
	s.Sync(ctx)
	if testutil.ToFloat64(m.RateLimitErrors.WithLabelValues("sync", "error")) != 1 {
		t.Fatal("failed push not counted")
	}
	remote.down.Store(false)
	s.Sync(ctx)
	key := l.key("p", "m", "requests", t0.UnixMilli()/Window.Milliseconds())
	if v, _ := remote.Counter.Add(ctx, key, 0, KeyTTL); v != 5 {
		t.Fatalf("store holds %d after the store came back, want 5", v)
	}
}

// TestSyncedRunPushesOnTickAndAtTheEnd: Run pushes every interval on its
// clock, and once more when its context ends.
func TestSyncedRunPushesOnTickAndAtTheEnd(t *testing.T) {
	clk := clock.NewFake(t0)
	remote := NewLocal(clk)
	l, s, _ := newSynced(remote, clk, true, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	lim := Limits{RequestsPerMinute: 100}
	key := l.key("p", "m", "requests", t0.UnixMilli()/Window.Milliseconds())
	read := func() int64 {
		v, _ := remote.Add(context.Background(), key, 0, KeyTTL)
		return v
	}
	l.Reserve(context.Background(), "p", "m", lim, 1) // store: 1
	l.Reserve(context.Background(), "p", "m", lim, 1) // local
	clk.WaitForTimers(1)
	if read() != 1 {
		t.Fatal("pushed before the interval")
	}
	clk.Advance(100 * time.Millisecond)
	clk.WaitForTimers(1) // the round ran and the timer is armed again
	if v := read(); v != 2 {
		t.Fatalf("after a tick the store holds %d, want 2", v)
	}
	l.Reserve(context.Background(), "p", "m", lim, 1) // local
	cancel()
	<-done
	if v := read(); v != 3 {
		t.Fatalf("after the end the store holds %d, want 3", v)
	}
}

// TestLocalModeBoundThreeOlricNodes drives 3 limiters in the local mode,
// each on its own node of one Olric cluster, at 3 times a limit, and
// checks the documented bound: at most the limit plus what the other
// replicas admit in two sync periods (N-1 x rate x 2 x (interval + round)),
// and at least the limit (a refusal reads a fresh total). A period here is
// a step: each replica takes perStep concurrent requests, then every
// replica runs a round, so rate x (interval + round) is perStep.
func TestLocalModeBoundThreeOlricNodes(t *testing.T) {
	nodes := threeNodes(t, 30*time.Second)
	clk := clock.NewFake(t0)
	for _, tc := range []struct {
		name    string
		lim     Limits
		tokens  int64
		perStep int
		steps   int
	}{
		{"requests", Limits{RequestsPerMinute: 300}, 1, 20, 15},
		{"requests-burst", Limits{RequestsPerMinute: 300}, 1, 150, 3},
		{"tokens", Limits{TokensPerMinute: 9000}, 30, 20, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls []*Limiter
			var ss []*Synced
			var ms []*metrics.Metrics
			for _, n := range nodes {
				dm, err := n.Cluster().NewDMap("rl")
				if err != nil {
					t.Fatal(err)
				}
				// Fail closed, with the store's bound far above any loopback
				// round trip: a failed call would make the count unknowable.
				l, s, m := newSyncedWithin(Olric{DM: dm}, clk, false, len(nodes), 30*time.Second)
				ls, ss, ms = append(ls, l), append(ss, s), append(ms, m)
			}
			var admitted atomic.Int64
			for range tc.steps {
				var wg sync.WaitGroup
				for _, l := range ls {
					for range tc.perStep {
						wg.Go(func() {
							if _, d := l.Reserve(context.Background(), "p-"+tc.name, "m", tc.lim, tc.tokens); d.Allowed {
								admitted.Add(1)
							}
						})
					}
				}
				wg.Wait()
				for _, s := range ss {
					wg.Go(func() { s.Sync(context.Background()) })
				}
				wg.Wait()
			}
			if n := storeErrors(ms); n != 0 {
				t.Fatalf("%v store calls failed within a 30 s bound on loopback", n)
			}
			limit := max(tc.lim.RequestsPerMinute, tc.lim.TokensPerMinute/tc.tokens)
			bound := limit + int64(len(nodes)-1)*2*int64(tc.perStep)
			var local, store float64
			for _, m := range ms {
				local += testutil.ToFloat64(m.RateLimitChecks.WithLabelValues("local"))
				store += testutil.ToFloat64(m.RateLimitChecks.WithLabelValues("store"))
			}
			got := admitted.Load()
			t.Logf("%s: offered %d, admitted %d, limit %d, bound %d; %v checks local, %v on the store",
				tc.name, len(ls)*tc.perStep*tc.steps, got, limit, bound, local, store)
			if got < limit || got > bound {
				t.Fatalf("admitted %d, want from the limit %d to the bound %d", got, limit, bound)
			}
		})
	}
}
