package prefixindex

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// TestConcurrentUse runs Match, Mark, Sweep, RemoveCluster, Stats and
// clock steps at once (run it with -race), on an index small enough to
// evict. Every Match answer must be well formed, and the index must be
// consistent when the goroutines stop. A departed cluster's prefixes must
// not reappear under another cluster: clusters mark only their own
// conversations, so a Match naming a cluster for another one's
// conversation would be an inherited slot.
func TestConcurrentUse(t *testing.T) {
	cfg := Config{MaxNodes: MinNodes, MaxHoldersPerNode: 4, TTL: time.Second}
	x, clk := newIndex(t, cfg)
	const clusters = 8
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 2000 {
				c := rng.IntN(clusters)
				// Conversation c*1000+k belongs to cluster c.
				x.Mark("m", summary(uint64(c*1000+rng.IntN(20)), 1+rng.IntN(4000)), "c"+strconv.Itoa(c))
			}
		})
	}
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			dst := make([]routing.PrefixHolder, 0, clusters)
			for range 2000 {
				c := rng.IntN(clusters)
				s := summary(uint64(c*1000+rng.IntN(20)), 1+rng.IntN(4000))
				dst = x.Match("m", s, dst)
				for i, h := range dst {
					if h.ClusterID != "c"+strconv.Itoa(c) || h.Blocks < 1 || h.Blocks > s.TotalBlocks || i > 0 {
						select {
						case errs <- "Match " + strconv.Itoa(c) + " reported " + h.ClusterID + " " + strconv.Itoa(h.Blocks):
						default:
						}
					}
				}
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(3, 3))
		for range 200 {
			switch rng.IntN(4) {
			case 0:
				x.Sweep()
			case 1:
				x.RemoveCluster("c" + strconv.Itoa(rng.IntN(clusters)))
			case 2:
				clk.Advance(time.Duration(rng.Int64N(int64(cfg.TTL / 4))))
			default:
				_ = x.Stats()
			}
		}
	})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	checkInvariants(t, x)
	if st := x.Stats(); st.Marks != 8000 || st.Matches != 8000 {
		t.Fatalf("Stats %+v: want every call counted", st)
	}
}
