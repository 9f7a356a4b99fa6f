package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/pkg/clock"
)

// BenchmarkReserveSettleOlric3 is one request's rate limiting (a reserve
// under both limits, then its settlement) through three limiters, each on
// its own node of one Olric cluster, 64 principals under limits never
// reached, in the local mode.
func BenchmarkReserveSettleOlric3(b *testing.B) {
	benchReserveSettle(b, benchLimiter)
}

// BenchmarkReserveSettleOlric3Exact is the same in the exact mode.
func BenchmarkReserveSettleOlric3Exact(b *testing.B) {
	benchReserveSettle(b, func(b *testing.B, c Counter, m *metrics.Metrics) *Limiter {
		return New(c, Config{FailOpen: true, StoreTimeout: time.Second}, clock.Real{}, m, nil)
	})
}

// benchLimiter is a limiter over c in the local mode, its rounds
// running until the benchmark ends.
func benchLimiter(b *testing.B, c Counter, m *metrics.Metrics) *Limiter {
	s := NewSynced(c, SyncConfig{Interval: 100 * time.Millisecond, StoreTimeout: time.Second}, clock.Real{}, m)
	s.SetReplicas(3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	return New(c, Config{FailOpen: true, StoreTimeout: time.Second, Synced: s}, clock.Real{}, m, nil)
}

func benchReserveSettle(b *testing.B, build func(*testing.B, Counter, *metrics.Metrics) *Limiter) {
	nodes := threeNodes(b, 5*time.Second)
	var ls []*Limiter
	for _, n := range nodes {
		dm, err := n.Cluster().NewDMap("rl")
		if err != nil {
			b.Fatal(err)
		}
		ls = append(ls, build(b, Olric{DM: dm}, metrics.New(prometheus.NewRegistry())))
	}
	lim := Limits{RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 50}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1))
		ctx := context.Background()
		for pb.Next() {
			l := ls[i%len(ls)]
			res, d := l.Reserve(ctx, "p"+strconv.Itoa(i%64), "m", lim, 300)
			if !d.Allowed {
				b.Fatal("refused under a limit never reached")
			}
			res.Settle(ctx, 200)
			i++
		}
	})
}
