package lastcluster

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
	"github.com/stargate-router/stargate/pkg/clock"
)

// BenchmarkTurnOlric3 is a returning session's turn as the gateway runs
// it, a lookup and then the write of the cluster that served it, through
// three trackers each on its own node of one Olric cluster, with the
// gateway's default settings. Each session keeps to one gateway, as a
// client holding its connection does.
func BenchmarkTurnOlric3(b *testing.B) {
	nodes := olrictest.Cluster(b, 3)
	m := metrics.New(prometheus.NewRegistry())
	log := slog.New(slog.DiscardHandler)
	var trs []*Tracker
	for _, n := range nodes {
		dm, err := n.Embedded().NewDMap("stargate-last-cluster")
		if err != nil {
			b.Fatal(err)
		}
		trs = append(trs, New(turnConfig(), Olric{DM: dm}, m, nil, log, clock.Real{}))
	}
	targets := benchTargets(1023) // a multiple of 3: each session keeps to one tracker
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1))
		for pb.Next() {
			tr := trs[i%len(trs)]
			tg := targets[i%len(targets)]
			tr.Lookup(ctx, tg)
			tr.Remember(ctx, tg, "cluster-1", true)
			i += len(trs)
		}
	})
	b.StopTimer()
	for _, tr := range trs {
		tr.Wait(ctx)
	}
}

// turnConfig is the tracker's configuration at the gateway's defaults.
func turnConfig() Config {
	return Config{Enabled: true, TTL: 10 * time.Minute, LookupTimeout: 20 * time.Millisecond, WriteTimeout: time.Second,
		LocalTTL: 5 * time.Second, LocalMaxEntries: 100000}
}
