package wnw

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// appendTag is lb.AppendTag.
func appendTag(dst []byte, t, v string) []byte { return lb.AppendTag(dst, t, v) }

// appendPrefix appends P = 0x01 ‖ tag("seed") ‖ tag("routing_key") ‖
// tag("model_id"), the prefix of every ring hash of one target.
func appendPrefix(dst []byte, seed string, t routing.Target) []byte {
	dst = append(dst, 0x01)
	dst = appendTag(dst, "seed", seed)
	dst = appendTag(dst, "routing_key", t.RoutingKey)
	return appendTag(dst, "model_id", t.Model)
}

// vnodeHash is XXH3-64(P ‖ tag("cluster_id", id) ‖ tag("virtual_node",
// u64-LE(v))): the 8 bytes of v are length-prefixed like any other value.
func vnodeHash(buf []byte, prefix []byte, clusterID string, v uint64) ([]byte, uint64) {
	buf = append(buf[:0], prefix...)
	buf = appendTag(buf, "cluster_id", clusterID)
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], v)
	buf = appendTag(buf, "virtual_node", string(le[:]))
	return buf, xxh3.Hash(buf)
}

// keyHash is XXH3-64(P ‖ tag("cache_affinity_key", key)).
func keyHash(prefix []byte, key string) uint64 {
	var stack [256]byte
	buf := append(stack[:0], prefix...)
	buf = appendTag(buf, "cache_affinity_key", key)
	return xxh3.Hash(buf)
}

// ringIDs numbers ring builds process-wide.
var ringIDs atomic.Uint64

// vnode is one point on the ring.
type vnode struct {
	hash    uint64
	cluster int // index into Snapshot.Clusters
}

// ring is the consistent-hash ring of one target and one ordered cluster
// list. It is immutable once built and shared by every request that sees
// the same cluster list.
type ring struct {
	id      uint64 // identifies the build; copies that only move version keep it
	target  routing.Target
	ids     []string // the ordered cluster ids the ring was built for
	prefix  []byte
	nodes   []vnode // sorted by (hash, cluster id, cluster index)
	version uint64  // the last snapshot version checked against ids
}

func buildRing(seed string, snap *routing.Snapshot, virtualNodes int) *ring {
	r := &ring{id: ringIDs.Add(1), target: snap.Target, version: snap.Version}
	r.prefix = appendPrefix(nil, seed, snap.Target)
	r.ids = make([]string, len(snap.Clusters))
	r.nodes = make([]vnode, 0, len(snap.Clusters)*virtualNodes)
	var buf []byte
	for i := range snap.Clusters {
		id := snap.Clusters[i].ClusterID
		r.ids[i] = id
		for v := range virtualNodes {
			var h uint64
			buf, h = vnodeHash(buf, r.prefix, id, uint64(v))
			r.nodes = append(r.nodes, vnode{hash: h, cluster: i})
		}
	}
	slices.SortFunc(r.nodes, func(a, b vnode) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		if c := strings.Compare(r.ids[a.cluster], r.ids[b.cluster]); c != 0 {
			return c
		}
		return a.cluster - b.cluster
	})
	return r
}

// matches reports whether r was built for snap's target and cluster list.
func (r *ring) matches(snap *routing.Snapshot) bool {
	if r.target != snap.Target || len(r.ids) != len(snap.Clusters) {
		return false
	}
	for i := range snap.Clusters {
		if r.ids[i] != snap.Clusters[i].ClusterID {
			return false
		}
	}
	return true
}

// selectGroup appends to dst up to k distinct cluster indices found walking
// clockwise from the key's point, skipping excluded clusters so that a
// failed member is replaced by its ring successor and a retry still has k
// clusters near the key, as upstream Stargate's code does
// (docs/design/algorithms.md#affinity-group).
func (r *ring) selectGroup(dst []int, key string, k int, req *routing.Request) []int {
	if len(r.nodes) == 0 || k <= 0 {
		return dst
	}
	h := keyHash(r.prefix, key)
	start, _ := slices.BinarySearchFunc(r.nodes, h, func(n vnode, h uint64) int {
		switch {
		case n.hash < h:
			return -1
		case n.hash > h:
			return 1
		}
		return 0
	})
	k = min(k, len(r.ids))
	base := len(dst)
	for step := 0; step < len(r.nodes) && len(dst)-base < k; step++ {
		c := r.nodes[(start+step)%len(r.nodes)].cluster
		if slices.Contains(dst[base:], c) || (len(req.Excluded) > 0 && req.IsExcluded(r.ids[c])) {
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// maxCachedKeyBytes is the longest affinity key whose group is cached; a
// longer key is recomputed every time so one client cannot fill the cache
// with huge keys.
const maxCachedKeyBytes = 256

// maxCachedGroups bounds the per-ring group cache, as upstream Stargate
// bounds its own; caching never changes a group, so this only caps memory.
const maxCachedGroups = 4096

// affinity owns the ring of one picker instance and the cache of affinity
// groups computed on it. Caching changes no result: a group is a pure
// function of (ring, key, k) when nothing is excluded.
type affinity struct {
	seed         string
	virtualNodes int
	k            int

	ring atomic.Pointer[ring]

	mu     sync.Mutex
	owner  uint64           // the ring build the cached groups belong to
	groups map[string][]int // affinity key → group, for requests with no exclusions
	order  []string         // insertion order, for FIFO eviction
	next   int              // the oldest entry in order once the cache is full
}

// currentRing returns the ring for snap, building it when the target or the
// ordered cluster list changed. Snapshot versions make the common case a
// single comparison.
func (a *affinity) currentRing(snap *routing.Snapshot) *ring {
	r := a.ring.Load()
	if r != nil && r.version == snap.Version && r.target == snap.Target {
		return r
	}
	if r != nil && r.matches(snap) {
		// Same clusters, newer stats: remember the version so the next
		// reader of this snapshot skips the comparison.
		nr := *r
		nr.version = snap.Version
		a.ring.CompareAndSwap(r, &nr)
		return &nr
	}
	nr := buildRing(a.seed, snap, a.virtualNodes)
	a.ring.Store(nr)
	return nr
}

// group appends the affinity group of key to dst.
func (a *affinity) group(dst []int, snap *routing.Snapshot, req *routing.Request) []int {
	r := a.currentRing(snap)
	if len(req.Excluded) > 0 || len(req.AffinityKey) > maxCachedKeyBytes {
		return r.selectGroup(dst, req.AffinityKey, a.k, req)
	}
	a.mu.Lock()
	if a.owner != r.id {
		a.owner, a.groups, a.order, a.next = r.id, make(map[string][]int), a.order[:0], 0
	}
	if g, ok := a.groups[req.AffinityKey]; ok {
		dst = append(dst, g...)
		a.mu.Unlock()
		return dst
	}
	a.mu.Unlock()
	base := len(dst)
	dst = r.selectGroup(dst, req.AffinityKey, a.k, req)
	g := slices.Clone(dst[base:])
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owner != r.id {
		return dst // the ring moved on while we computed; don't cache
	}
	if _, ok := a.groups[req.AffinityKey]; ok {
		return dst
	}
	if len(a.order) < maxCachedGroups {
		a.order = append(a.order, req.AffinityKey)
	} else {
		delete(a.groups, a.order[a.next])
		a.order[a.next] = req.AffinityKey
		a.next = (a.next + 1) % maxCachedGroups
	}
	a.groups[req.AffinityKey] = g
	return dst
}
