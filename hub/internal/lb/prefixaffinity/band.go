package prefixaffinity

import (
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Stride returns the distance in blocks between two checkpoints of the
// request's prompt summary (at least 1): the resolution at which the hub
// knows how much of the prompt a cluster holds. The proxy copies it from
// the parsed summary, so the algorithms need not import the hashing.
func Stride(m *routing.PrefixMatch) int {
	if !m.Known() || m.Stride < 1 {
		return 1
	}
	return m.Stride
}

// Band appends to dst the snapshot positions of the request's selectable
// holders (in the snapshot, not excluded) whose known prefix is within one
// checkpoint of the longest among them, longest first (the index's order).
//
// Why one checkpoint and not only the longest: the index learns holders at
// the checkpoints of the prompts it saw, so a holder reported one
// checkpoint short may hold as much as the longest, and the difference is
// at most one stride (less than a thirty-second of the prompt, or a single
// block for short prompts). Treating such holders alike lets load decide
// among them instead of piling every request of a hot prefix onto the one
// cluster that happened to be marked at the last checkpoint. A holder
// further behind, typically one that holds only a shared system prompt,
// is not in the band: sending the request there copies most of the
// prompt, which is a split and must pass the split guard.
func Band(dst []int, req *routing.Request, snap *routing.Snapshot) []int {
	m := &req.Prefix
	if !m.Known() || len(m.Holders) == 0 {
		return dst
	}
	stride := Stride(m)
	longest := -1
	for _, h := range m.Holders {
		if longest >= 0 && h.Blocks < longest-stride {
			break // holders are sorted longest first
		}
		i := snap.Index(h.ClusterID)
		if i < 0 || (len(req.Excluded) > 0 && req.IsExcluded(h.ClusterID)) || h.Blocks <= 0 {
			continue
		}
		if longest < 0 {
			longest = h.Blocks
		}
		// The index names each cluster once, so no duplicate check: with
		// 64 holders in the band it would cost more than the lookups.
		dst = append(dst, i)
	}
	return dst
}

// Promote moves the members of band to the front of order, after its
// first `from` entries (a returning session's promoted last cluster), and
// returns the reordered order in the same backing array. Band members
// already in order come first, in order's own sequence (the ring or the
// pulsar ranking still spreads keys over equally good holders, so a prefix
// held everywhere, such as a shared system prompt, leaves order as it
// was); with insertMissing the band members order lacks follow, in band
// order (wait-and-widen's fixed-size group), and the order keeps its
// length, dropping its last members; without it they are left out
// (pulsar-wait-and-widen's ranking, which omits clusters it cannot rank).
// Every other member keeps its relative order. band is only read.
func Promote(order, band []int, from int, insertMissing bool) []int {
	if len(band) == 0 || from >= len(order) {
		return order
	}
	// The band is short (a few holders) while the order may be a whole
	// ranking, so the band's positions are looked up, not the order's
	// members: the members after the last band member keep their places,
	// and only the prefix up to it is rearranged. The buffers are small
	// stack arrays (Go zeroes a stack array on every call); a longer band
	// spills to the heap.
	tail := order[from:]
	var pbuf, mbuf [8]int
	pos := pbuf[:0]
	for _, b := range band {
		if p := indexOf(tail, b); p >= 0 {
			pos = insertSorted(pos, p)
		}
	}
	moved := mbuf[:0]
	for _, p := range pos {
		moved = append(moved, tail[p])
	}
	end := 0
	if len(pos) > 0 {
		end = pos[len(pos)-1] + 1
	}
	if insertMissing {
		for _, i := range band {
			if indexOf(order[:from], i) < 0 && indexOf(tail, i) < 0 && indexOf(moved, i) < 0 {
				moved = append(moved, i)
				end = len(tail)
			}
		}
	}
	if len(moved) == 0 || end == len(pos) && len(moved) == len(pos) {
		return order // nothing to insert, and the members lead already
	}
	w, j := 0, 0
	for p := range end {
		if j < len(pos) && pos[j] == p {
			j++
			continue
		}
		tail[w] = tail[p]
		w++
	}
	k := min(len(moved), end)
	keep := min(w, end-k)
	copy(tail[k:k+keep], tail[:keep])
	copy(tail[:k], moved[:k])
	return order
}

// insertSorted inserts p into the ascending s.
func insertSorted(s []int, p int) []int {
	s = append(s, p)
	for i := len(s) - 1; i > 0 && s[i-1] > s[i]; i-- {
		s[i-1], s[i] = s[i], s[i-1]
	}
	return s
}

// Mark returns d, a decision that chose a cluster, with the prefix tier
// and marking wish of the prefix_affinity option of wait-and-widen and
// pulsar-wait-and-widen: with a summary, the serving cluster is always
// recorded as a holder (those algorithms have no split guard), and the
// tier says whether the choice was a known holder (cache) or not (load).
// Without a summary d is returned unchanged.
func Mark(d routing.Decision, m *routing.PrefixMatch) routing.Decision {
	if !m.Known() {
		return d
	}
	d.PrefixMark = true
	d.PrefixTier = routing.PrefixTierLoad
	if m.HeldBlocks(d.ClusterID) > 0 {
		d.PrefixTier = routing.PrefixTierCache
	}
	return d
}
