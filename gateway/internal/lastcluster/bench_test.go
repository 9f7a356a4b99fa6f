package lastcluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
	"github.com/stargate-router/stargate/gateway/internal/session"
	"github.com/stargate-router/stargate/pkg/clock"
)

func benchTargets(n int) []Target {
	out := make([]Target, n)
	for i := range out {
		id := fmt.Sprintf("session-%d", i)
		out[i] = Target{Model: "m", Session: session.Session{ID: id, Source: session.SourcePromptCacheKey, AffinityKey: session.Hashed("session", id)}}
	}
	return out
}

// benchLookups runs tracker lookups (half hits, half misses) and reports
// p50/p99 per lookup.
func benchLookups(b *testing.B, stores []Store) {
	m := metrics.New(prometheus.NewRegistry())
	log := slog.New(slog.DiscardHandler)
	var trs []*Tracker
	for _, s := range stores {
		trs = append(trs, New(Config{Enabled: true, TTL: time.Minute, LookupTimeout: 20 * time.Millisecond, WriteTimeout: time.Second}, s, m, nil, log, clock.Real{}))
	}
	targets := benchTargets(1024)
	ctx := context.Background()
	for _, tg := range targets[:512] {
		trs[0].Remember(ctx, tg, "cluster-1", true)
	}
	trs[0].Wait(ctx)
	durs := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr := trs[i%len(trs)]
		start := time.Now()
		tr.Lookup(ctx, targets[i%len(targets)])
		if len(durs) < cap(durs) {
			durs = append(durs, time.Since(start))
		}
		i++
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkLookupLRU is a lookup against the in-process store.
func BenchmarkLookupLRU(b *testing.B) {
	benchLookups(b, []Store{NewLRU(100000, time.Minute)})
}

// BenchmarkLookupOlric3 is a lookup through each of three embedded Olric
// nodes in turn (about 2/3 of the keys live on another node).
func BenchmarkLookupOlric3(b *testing.B) {
	nodes := olrictest.Cluster(b, 3)
	var stores []Store
	for _, n := range nodes {
		dm, err := n.Embedded().NewDMap("stargate-last-cluster")
		if err != nil {
			b.Fatal(err)
		}
		stores = append(stores, Olric{DM: dm})
	}
	benchLookups(b, stores)
}
