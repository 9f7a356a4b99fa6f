package prefixindex

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// The warm index the benchmarks run against: the default Config, 64
// clusters, 100k sessions of three turns each. A session starts at 1k to
// 100k tokens and grows by 256 to 4096 tokens a turn; each turn is marked
// on the session's cluster, one turn in ten on another (a split). That is
// about 14M checkpoint marks, far more than the default 1M nodes, so the
// index is full and evicting, as a busy hub's would be.
const (
	warmSessions = 100_000
	warmClusters = 64
	blockTokens  = 16
	// The benchmarked prompt: 128k tokens, 8192 blocks, 64 checkpoints
	// at stride 128.
	longBlocks = 128 * 1024 / blockTokens
	hotConv    = 1 << 40
)

type warmIndex struct {
	x            *Index
	clk          *clock.Fake
	hit, miss    prefixhash.Summary
	bytesPerNode float64
	bytesPerBlk  float64
	checkpoints  int
}

var (
	warmOnce sync.Once
	warm     warmIndex
)

var clusterIDs = func() []string {
	ids := make([]string, warmClusters)
	for i := range ids {
		ids[i] = "cluster-" + strconv.Itoa(i)
	}
	return ids
}()

func clusterID(i int) string { return clusterIDs[i] }

// warmUp builds the warm index once per test binary and measures its heap
// footprint.
func warmUp(b *testing.B) *warmIndex {
	warmOnce.Do(func() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := &warm
		var err error
		w.clk = clock.NewFake(epoch)
		w.x, err = New(DefaultConfig(), w.clk)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range warmSessions {
			home := rng.IntN(warmClusters)
			tokens := 1024 + rng.IntN(99*1024)
			for range 3 {
				c := home
				if rng.IntN(10) == 0 {
					c = rng.IntN(warmClusters)
				}
				s := summary(uint64(i), tokens/blockTokens)
				w.x.Mark("model", s, clusterID(c))
				w.checkpoints += len(s.Hashes)
				tokens += 256 + rng.IntN(3840)
			}
		}
		// The benchmarked conversation: two earlier turns, marked last so
		// they are still in the index, on three clusters.
		for turn, blocks := range []int{longBlocks - 600, longBlocks - 300} {
			for c := range 3 {
				w.x.Mark("model", summary(hotConv, blocks), clusterID(turn+c))
			}
		}
		w.hit = summary(hotConv, longBlocks)
		w.miss = summary(hotConv+1, longBlocks)
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := w.x.Stats()
		used := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		w.bytesPerNode = used / float64(st.Nodes)
		w.bytesPerBlk = used / float64(st.Blocks)
		b.Logf("warm index: %d checkpoint marks, %+v, heap %.0f B", w.checkpoints, st, used)
	})
	return &warm
}

func (w *warmIndex) report(b *testing.B) {
	b.ReportMetric(w.bytesPerNode, "heapB/node")
	b.ReportMetric(w.bytesPerBlk, "heapB/block")
}

// BenchmarkMatch is the request path's cost: one 128k-token prompt (64
// checkpoints) against the warm index, found on four clusters (hit) or
// not at all (miss), into a reused slice.
func BenchmarkMatch(b *testing.B) {
	w := warmUp(b)
	for _, tc := range []struct {
		name string
		s    prefixhash.Summary
		want int
	}{{"hit", w.hit, 4}, {"miss", w.miss, 0}} {
		b.Run(tc.name, func(b *testing.B) {
			dst := make([]routing.PrefixHolder, 0, warmClusters)
			if dst = w.x.Match("model", tc.s, dst); len(dst) != tc.want {
				b.Fatalf("Match = %v, want %d holders", dst, tc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				dst = w.x.Match("model", tc.s, dst)
			}
			w.report(b)
		})
	}
}

// BenchmarkMatchParallel is BenchmarkMatch/hit from every P at once: Match
// takes read locks only, so it should scale with cores.
func BenchmarkMatchParallel(b *testing.B) {
	w := warmUp(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]routing.PrefixHolder, 0, warmClusters)
		for pb.Next() {
			dst = w.x.Match("model", w.hit, dst)
		}
	})
}

// BenchmarkMark is the cost of recording one answered request on the
// warm, full index: "refresh" re-marks a 128k-token prompt whose 64
// checkpoints are all known (a session's turn landing where it was
// before), "new" marks a new 128k-token conversation, creating 64 nodes
// and evicting 64.
func BenchmarkMark(b *testing.B) {
	w := warmUp(b)
	b.Run("refresh", func(b *testing.B) {
		known := make([]prefixhash.Summary, 1024)
		for i := range known {
			known[i] = summary(hotConv+2+uint64(i), longBlocks)
			w.x.Mark("model", known[i], clusterID(i%warmClusters))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			w.x.Mark("model", known[i%len(known)], clusterID(i%warmClusters))
			i++
		}
	})
	b.Run("new", func(b *testing.B) {
		fresh := make([]prefixhash.Summary, 1024)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%len(fresh) == 0 {
				b.StopTimer()
				for j := range fresh {
					fresh[j] = summary(hotConv<<1+uint64(i+j), longBlocks)
				}
				b.StartTimer()
			}
			w.x.Mark("model", fresh[i%len(fresh)], clusterID(i%warmClusters))
			i++
		}
	})
}

// BenchmarkSweep is the owner's ticker: "live" is a pass over the warm
// index with nothing expired (each shard's tail is live, so the pass
// stops at once); "expired" frees an index of 65536 nodes, 1024 prompts
// of 64 checkpoints all older than the TTL, and reports the time per node
// freed, which is how long a shard's write lock is held per node it
// frees.
func BenchmarkSweep(b *testing.B) {
	b.Run("live", func(b *testing.B) {
		w := warmUp(b)
		b.ReportAllocs()
		for b.Loop() {
			w.x.Sweep()
		}
	})
	b.Run("expired", func(b *testing.B) {
		cfg := DefaultConfig()
		cfg.MaxNodes = 1 << 16
		x, clk := newIndex(b, cfg)
		prompts := make([]prefixhash.Summary, 1024)
		for i := range prompts {
			prompts[i] = summary(uint64(i), 64)
		}
		b.ReportAllocs()
		freed := 0
		for b.Loop() {
			b.StopTimer()
			for i, s := range prompts {
				x.Mark("model", s, clusterID(i%warmClusters))
			}
			clk.Advance(cfg.TTL + time.Second)
			nodes := x.Stats().Nodes
			b.StartTimer()
			x.Sweep()
			freed += nodes
		}
		if x.Stats().Nodes != 0 {
			b.Fatal("Sweep left nodes")
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(freed), "ns/node")
	})
}
