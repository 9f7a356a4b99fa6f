package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
	"github.com/stargate-router/stargate/pkg/clock"
)

// memberlist's Shutdown does not wait for a probe already waiting on its
// ack timeout; that goroutine ends by itself within the probe timeout.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func newLimiter(c Counter, clk clock.Clock, failOpen bool) (*Limiter, *metrics.Metrics) {
	m := metrics.New(prometheus.NewRegistry())
	return New(c, Config{FailOpen: failOpen, StoreTimeout: time.Second}, clk, m, nil), m
}

var t0 = time.Unix(1_700_000_020, 0) // 40 s into a minute window

func TestRequestsAndTokens(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newLimiter(NewLocal(clk), clk, true)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 3, TokensPerMinute: 100}
	res, d := l.Reserve(ctx, "p", "m", lim, 60)
	if !d.Allowed || d.Tokens.Remaining != 40 || d.Requests.Remaining != 2 || d.Tokens.Reset != 20*time.Second {
		t.Fatalf("%+v %+v %+v", d, d.Tokens, d.Requests)
	}
	// 60 more tokens do not fit; the refused reservation is taken back.
	// The headers then describe the counters after the take-back: the
	// refused request does not count against the request limit.
	if _, d := l.Reserve(ctx, "p", "m", lim, 60); d.Allowed || d.RetryAfter != 20*time.Second ||
		d.Tokens.Remaining != 40 || d.Requests.Remaining != 2 || d.Requests.Limit != 3 || d.Tokens.Limit != 100 {
		t.Fatalf("over tokens admitted: %+v %+v %+v", d, d.Tokens, d.Requests)
	}
	// Settling at 10 actual tokens refunds 50.
	res.Settle(ctx, 10)
	res.Settle(ctx, 1000) // second settle is a no-op
	if _, d := l.Reserve(ctx, "p", "m", lim, 60); !d.Allowed || d.Tokens.Remaining != 30 {
		t.Fatalf("after refund: %+v %+v", d, d.Tokens)
	}
	if _, d := l.Reserve(ctx, "p", "m", lim, 1); !d.Allowed || d.Requests.Remaining != 0 {
		t.Fatalf("third admitted request refused: %+v", d.Requests)
	}
	if _, d := l.Reserve(ctx, "p", "m", lim, 1); d.Allowed {
		t.Fatal("fourth request admitted with 3 rpm")
	}
	// Other principal and model have their own counters.
	if _, d := l.Reserve(ctx, "q", "m", lim, 1); !d.Allowed {
		t.Fatal("other principal limited")
	}
	clk.Advance(20 * time.Second)
	if _, d := l.Reserve(ctx, "p", "m", lim, 60); !d.Allowed {
		t.Fatal("new window still limited")
	}
}

// TestOverrunChargedToCurrentWindow: usage above the reservation settled
// after the window rolled is charged to the new window.
func TestOverrunChargedToCurrentWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newLimiter(NewLocal(clk), clk, true)
	ctx := context.Background()
	lim := Limits{TokensPerMinute: 100}
	res, _ := l.Reserve(ctx, "p", "m", lim, 10)
	clk.Advance(30 * time.Second)
	res.Settle(ctx, 90) // 80 over
	if _, d := l.Reserve(ctx, "p", "m", lim, 30); d.Allowed {
		t.Fatalf("overrun not charged: %+v", d.Tokens)
	}
}

type failing struct{ err error }

func (f failing) Add(context.Context, string, int64, time.Duration) (int64, error) { return 0, f.err }

func TestStoreDown(t *testing.T) {
	clk := clock.NewFake(t0)
	lim := Limits{RequestsPerMinute: 1}
	l, m := newLimiter(failing{errors.New("down")}, clk, true)
	if _, d := l.Reserve(context.Background(), "p", "m", lim, 1); !d.Allowed || d.Err != nil {
		t.Fatalf("fail open refused: %+v", d)
	}
	if testutil.ToFloat64(m.RateLimitErrors.WithLabelValues("reserve", "error")) != 1 ||
		testutil.ToFloat64(m.RateLimitDecision.WithLabelValues("fail_open", "none")) != 1 {
		t.Fatal("store error not counted")
	}
	l, _ = newLimiter(failing{context.DeadlineExceeded}, clk, false)
	if _, d := l.Reserve(context.Background(), "p", "m", lim, 1); d.Allowed || d.Err == nil {
		t.Fatalf("fail closed admitted: %+v", d)
	}
}

// TestExactAcrossThreeOlricNodes: 3 replicas, each with its own limiter
// on its own node's cluster client, race 300 requests against a limit of
// 50 per window and 2000 tokens: together they admit exactly the limit,
// neither more (the atomic adds on the key's owner) nor fewer (a refused
// add is taken back, so it can only delay a concurrent request's add,
// never take its place).
//
// Exactly, not "at most": the store's per-call bounds are far above any
// loopback round trip even on a loaded machine, so no call may fail. A
// failed call (a timeout whose add may still have landed) would make the
// count unknowable, and is a failure here rather than a reason to skip
// the lower bound.
func TestExactAcrossThreeOlricNodes(t *testing.T) {
	nodes := threeNodes(t, 30*time.Second)
	clk := clock.NewFake(t0)
	var limiters []*Limiter
	var ms []*metrics.Metrics
	for _, n := range nodes {
		dm, err := n.Cluster().NewDMap("rl")
		if err != nil {
			t.Fatal(err)
		}
		m := metrics.New(prometheus.NewRegistry())
		limiters = append(limiters, New(Olric{DM: dm}, Config{FailOpen: false, StoreTimeout: 30 * time.Second}, clk, m, nil))
		ms = append(ms, m)
	}
	for _, tc := range []struct {
		name      string
		lim       Limits
		tokens    int64
		wantAdmit int64
	}{
		{"requests", Limits{RequestsPerMinute: 50}, 1, 50},
		{"tokens", Limits{TokensPerMinute: 2000}, 30, 66},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 300 {
				l := limiters[i%3]
				wg.Go(func() {
					if _, d := l.Reserve(context.Background(), "p-"+tc.name, "m", tc.lim, tc.tokens); d.Allowed {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if n := storeErrors(ms); n != 0 {
				t.Fatalf("%v store calls failed within a 30 s bound on loopback", n)
			}
			if got := admitted.Load(); got != tc.wantAdmit {
				t.Fatalf("admitted %d, want exactly %d", got, tc.wantAdmit)
			}
		})
	}
}

// threeNodes starts a 3-node cluster whose cluster clients wait up to
// opTimeout per call (olrictest's default is short, to fail fast).
func threeNodes(t testing.TB, opTimeout time.Duration) []*olrictest.Node {
	t.Helper()
	cfg := olrictest.Config(nil)
	cfg.ClientOpTimeout = opTimeout
	cfg.DMapTTL = map[string]time.Duration{"rl": KeyTTL, "rl-backups": KeyTTL}
	nodes := []*olrictest.Node{olrictest.StartWith(t, cfg)}
	cfg.Peers = []string{nodes[0].Gossip}
	for range 2 {
		nodes = append(nodes, olrictest.StartWith(t, cfg))
	}
	olrictest.WaitMembers(t, nodes, 3)
	return nodes
}

// storeErrors is the number of failed store calls the limiters counted.
func storeErrors(ms []*metrics.Metrics) float64 {
	var n float64
	for _, m := range ms {
		for _, op := range []string{"reserve", "settle"} {
			for _, kind := range []string{"error", "timeout"} {
				n += testutil.ToFloat64(m.RateLimitErrors.WithLabelValues(op, kind))
			}
		}
	}
	return n
}

type slow struct{}

func (slow) Add(ctx context.Context, _ string, _ int64, _ time.Duration) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestSlowStoreFailsOpenWithinTimeout: a store slower than the timeout
// admits (fail open) after the timeout and counts a timeout.
func TestSlowStoreFailsOpenWithinTimeout(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	l := New(slow{}, Config{FailOpen: true, StoreTimeout: 10 * time.Millisecond}, clock.NewFake(t0), m, nil)
	if _, d := l.Reserve(context.Background(), "p", "m", Limits{TokensPerMinute: 10}, 1); !d.Allowed {
		t.Fatalf("%+v", d)
	}
	if got := testutil.ToFloat64(m.RateLimitErrors.WithLabelValues("reserve", "timeout")); got != 1 {
		t.Fatalf("timeouts = %v", got)
	}
}

// TestOlricCounterWithBackups: with two copies of every partition (the
// default), adds through every node's cluster client count every unit,
// and the key carries the DMap's TTL from its first add on every read:
// Olric's Expire, which the counter no longer uses, blanked the backup
// copy and restarted the count from 0 at the next add.
func TestOlricCounterWithBackups(t *testing.T) {
	nodes := threeNodes(t, 5*time.Second)
	ctx := context.Background()
	var counters []Olric
	for _, n := range nodes {
		dm, err := n.Cluster().NewDMap("rl-backups")
		if err != nil {
			t.Fatal(err)
		}
		counters = append(counters, Olric{DM: dm})
	}
	for k := range 5 {
		key := "rl:test:" + string(rune('a'+k))
		for i := range 60 {
			v, err := counters[i%3].Add(ctx, key, 1, KeyTTL)
			if err != nil {
				t.Fatal(err)
			}
			if v != int64(i+1) {
				t.Fatalf("key %s add %d returned %d, want %d", key, i+1, v, i+1)
			}
		}
		dm, _ := nodes[k%3].Embedded().NewDMap("rl-backups")
		gr, err := dm.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// TTL is the absolute expiry in Unix ms.
		if left := time.Until(time.UnixMilli(gr.TTL())); left <= KeyTTL-time.Minute || left > KeyTTL {
			t.Fatalf("key %s expires in %v, want about %v after its first add", key, left, KeyTTL)
		}
	}
}

// TestCachedKeys: the key cache answers what key builds, per window and
// dimension, and past its bound still answers correctly.
func TestCachedKeys(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := newLimiter(NewLocal(clk), clk, true)
	for _, w := range []int64{7, 7, 8} {
		for _, dim := range []string{dimRequests, dimTokens} {
			if got, want := l.cachedKey("p", "m", dim, w), l.key("p", "m", dim, w); got != want {
				t.Fatalf("window %d %s: %q, want %q", w, dim, got, want)
			}
		}
	}
	for i := range maxCachedKeys + 10 {
		m := "m" + strconv.Itoa(i)
		if got, want := l.cachedKey("p", m, dimTokens, 8), l.key("p", m, dimTokens, 8); got != want {
			t.Fatalf("model %d: %q, want %q", i, got, want)
		}
	}
	if n := len(l.keys.keys); n != maxCachedKeys {
		t.Fatalf("cache holds %d callers, want the bound %d", n, maxCachedKeys)
	}
}

// TestReserveAllocations: admitting and settling a request against the
// in-process counter builds no key and starts no timer once the caller's
// keys are cached: what is left is the decision's and reservation's own
// objects and the metric's label lookup.
func TestReserveAllocations(t *testing.T) {
	clk := clock.NewFake(t0)
	// As the gateway wires the in-process counter: no store timeout.
	l := New(NewLocal(clk), Config{FailOpen: true}, clk, metrics.New(prometheus.NewRegistry()), nil)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 50}
	allocs := testing.AllocsPerRun(100, func() {
		res, d := l.Reserve(ctx, "p", "m", lim, 60)
		if !d.Allowed {
			t.Fatal("refused")
		}
		res.Settle(ctx, 10)
	})
	if allocs > 4 {
		t.Fatalf("%v allocations per reserve and settle, want at most 4 (before the key cache and the in-process counter's untimed adds: 22)", allocs)
	}
}
