package prefixindex

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// model is the obvious implementation the index is checked against: every
// checkpoint ever marked, with its holders and their mark times, no
// bound on nodes, the same holder cap and TTL.
type model struct {
	cap   int
	ttl   time.Duration
	nodes map[modelKey][]modelHolder
}

type modelKey struct {
	model string
	hash  uint64
}

type modelHolder struct {
	cluster string
	at      time.Time
}

func (m *model) mark(name string, s prefixhash.Summary, cluster string, now time.Time) {
	for _, h := range s.Hashes {
		k := modelKey{name, h}
		hs := m.nodes[k]
		i := slices.IndexFunc(hs, func(h modelHolder) bool { return h.cluster == cluster })
		switch {
		case i >= 0:
			hs[i].at = now
		case len(hs) < m.cap:
			hs = append(hs, modelHolder{cluster, now})
		default:
			oldest := 0
			for j := range hs {
				if hs[j].at.Before(hs[oldest].at) {
					oldest = j
				}
			}
			hs[oldest] = modelHolder{cluster, now}
		}
		m.nodes[k] = hs
	}
}

func (m *model) match(name string, s prefixhash.Summary, now time.Time) []routing.PrefixHolder {
	best := map[string]int{}
	for i, h := range s.Hashes {
		for _, hd := range m.nodes[modelKey{name, h}] {
			if now.Sub(hd.at) <= m.ttl {
				best[hd.cluster] = max(best[hd.cluster], s.Blocks(i))
			}
		}
	}
	out := []routing.PrefixHolder{}
	for c, b := range best {
		out = append(out, routing.PrefixHolder{ClusterID: c, Blocks: b})
	}
	slices.SortFunc(out, func(a, b routing.PrefixHolder) int {
		if c := cmp.Compare(b.Blocks, a.Blocks); c != 0 {
			return c
		}
		return cmp.Compare(a.ClusterID, b.ClusterID)
	})
	return out
}

func (m *model) removeCluster(cluster string) {
	for k, hs := range m.nodes {
		m.nodes[k] = slices.DeleteFunc(hs, func(h modelHolder) bool { return h.cluster == cluster })
	}
}

// held reports whether the model has cluster as a live holder of a
// checkpoint of s covering blocks.
func (m *model) held(name string, s prefixhash.Summary, cluster string, blocks int, now time.Time) bool {
	for i, h := range s.Hashes {
		if s.Blocks(i) != blocks {
			continue
		}
		for _, hd := range m.nodes[modelKey{name, h}] {
			if hd.cluster == cluster && now.Sub(hd.at) <= m.ttl {
				return true
			}
		}
	}
	return false
}

// TestPropertyRandomOperations runs random Marks, Matches, Sweeps,
// RemoveClusters and clock steps, checking the index's invariants after
// every operation and its answers against the model. With room for every
// node, answers must equal the model's; with a small index that evicts,
// every answer must still be true (a cluster reported holds what is
// reported), and the node and byte bounds must hold.
func TestPropertyRandomOperations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		exact bool
	}{
		{"roomy", 1 << 15, true},
		{"evicting", MinNodes, false},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed%d", tc.name, seed), func(t *testing.T) {
				t.Parallel()
				runProperty(t, seed, tc.nodes, tc.exact)
			})
		}
	}
}

func runProperty(t *testing.T, seed uint64, maxNodes int, exact bool) {
	cfg := Config{MaxNodes: maxNodes, MaxHoldersPerNode: 3, TTL: time.Minute}
	x, clk := newIndex(t, cfg)
	ref := &model{cap: cfg.MaxHoldersPerNode, ttl: cfg.TTL, nodes: map[modelKey][]modelHolder{}}
	rng := rand.New(rand.NewPCG(seed, 42))
	models := []string{"a", "b"}
	clusters := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	prompt := func() (string, prefixhash.Summary) {
		return models[rng.IntN(len(models))], summary(uint64(rng.IntN(24)), 1+rng.IntN(3000))
	}
	for op := range 2000 {
		// Every operation at its own time, so no two holders of a node
		// tie on their mark time and the replaced holder is unambiguous.
		clk.Advance(time.Millisecond)
		switch r := rng.IntN(100); {
		case r < 45:
			name, s := prompt()
			c := clusters[rng.IntN(len(clusters))]
			x.Mark(name, s, c)
			ref.mark(name, s, c, clk.Now())
		case r < 85:
			name, s := prompt()
			got := x.Match(name, s, make([]routing.PrefixHolder, 0, 4))
			want := ref.match(name, s, clk.Now())
			if exact && !reflect.DeepEqual(got, want) {
				t.Fatalf("op %d: Match(%s, %d blocks) = %v, want %v", op, name, s.TotalBlocks, got, want)
			}
			for _, h := range got {
				if !ref.held(name, s, h.ClusterID, h.Blocks, clk.Now()) {
					t.Fatalf("op %d: Match reports %v, which the model does not hold", op, h)
				}
			}
		case r < 90:
			x.Sweep()
			if n := expiredTails(x); n > 0 {
				t.Fatalf("op %d: %d shards end with an expired node after Sweep", op, n)
			}
		case r < 93:
			c := clusters[rng.IntN(len(clusters))]
			x.RemoveCluster(c)
			ref.removeCluster(c)
		default:
			clk.Advance(time.Duration(rng.Int64N(int64(cfg.TTL / 2))))
		}
		if err := invariants(x); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	st := x.Stats()
	if st.Marks == 0 || st.Hits == 0 || (!exact && st.Evictions.Capacity == 0) || st.Evictions.TTL == 0 {
		t.Fatalf("the run did not exercise the index: %+v", st)
	}
	if exact && st.Evictions.Capacity != 0 {
		t.Fatalf("the roomy index evicted, so its answers cannot be compared: %+v", st)
	}
}
