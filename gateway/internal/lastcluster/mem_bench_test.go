package lastcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
	"github.com/stargate-router/stargate/gateway/internal/session"
)

// BenchmarkLiveSessionMemory fills the last-cluster DMap of one embedded
// Olric node (one copy of every entry: a lone member keeps no backup)
// with live session entries as the tracker writes them: the 70-byte
// lc:v1: key, a cluster id of 18 bytes, the 10-minute TTL. It reports
// the memory each entry costs: the Go heap in use and the process RSS
// (VmRSS in /proc/self/status), both after a GC, minus the empty node's.
// Run it once per size, e.g.
//
//	go test -run '^$' -bench BenchmarkLiveSessionMemory -benchtime 1x ./internal/lastcluster
//
// The sizes and the storage settings are sub-benchmarks: the gateway's
// defaults (23 partitions, 64 KiB tables) and Olric's (271 partitions,
// 1 MiB tables).
func BenchmarkLiveSessionMemory(b *testing.B) {
	for _, st := range []struct {
		name       string
		partitions uint64
		table      uint64
	}{{"gateway-defaults", 23, 1 << 16}, {"olric-defaults", 271, 1 << 20}} {
		for _, n := range []int{100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/entries=%d", st.name, n), func(b *testing.B) {
				for b.Loop() {
					heap, rss := fillAndMeasure(b, n, st.partitions, st.table)
					b.ReportMetric(heap/float64(n), "heap-B/entry")
					b.ReportMetric(rss/float64(n), "rss-B/entry")
					b.ReportMetric(heap/(1<<20)*100_000/float64(n), "heap-MiB/100k")
				}
			})
		}
	}
}

// fillAndMeasure starts a node, writes n entries and returns the heap and
// RSS growth in bytes over the empty node.
func fillAndMeasure(b *testing.B, n int, partitions, table uint64) (heap, rss float64) {
	b.Helper()
	cfg := olrictest.Config(nil)
	cfg.PartitionCount, cfg.TableSize = partitions, table
	node := olrictest.StartWith(b, cfg)
	defer func() { _ = node.Shutdown(context.Background()) }()
	dm, err := node.Embedded().NewDMap("stargate-last-cluster")
	if err != nil {
		b.Fatal(err)
	}
	store := Olric{DM: dm}
	ctx := context.Background()
	heap0, rss0 := memNow(b)
	for i := range n {
		id := "conversation-" + strconv.Itoa(i)
		key := Key("", "meta/llama-3.1-70b-instruct", session.Hashed("session", id))
		if err := store.Set(ctx, key, "cluster-us-east-1a", 10*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	heap1, rss1 := memNow(b)
	return float64(heap1) - float64(heap0), float64(rss1) - float64(rss0)
}

// memNow returns the heap in use and the resident set size after a full
// GC that also returns freed pages to the OS.
func memNow(b *testing.B) (heapInuse, rss uint64) {
	b.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return ms.HeapInuse, kb * 1024
		}
	}
	b.Fatal("no VmRSS line in /proc/self/status")
	return 0, 0
}
