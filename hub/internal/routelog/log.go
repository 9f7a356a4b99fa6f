package routelog

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// SlotBytes is the memory of one ring slot: a sequence word and six record
// words.
const SlotBytes = 7 * 8

// DefaultRecords is the ring's default size: about 3.5 MiB, some eleven
// minutes of records at 100 requests per second.
const DefaultRecords = 1 << 16

// MaxRecords bounds the ring's size (about 56 MiB).
const MaxRecords = 1 << 20

// Selection is how a request's last choice ranked in its algorithm's order.
type Selection uint8

// The selections; SelectionNone is a request that ended without a choice.
const (
	SelectionNone Selection = iota
	SelectionPrimary
	SelectionFallback
)

// String is the selection's name in stargate_routing_selections_total, ""
// for SelectionNone.
func (s Selection) String() string {
	switch s {
	case SelectionPrimary:
		return "primary"
	case SelectionFallback:
		return "fallback"
	}
	return ""
}

// Request is what the log keeps of a request as the proxy reported it:
// the part an Entry and the Record read back from it share.
type Request struct {
	// At is when the request arrived and Duration how long it took to end.
	At       time.Time
	Duration time.Duration
	// Model, RoutingKey and Algorithm name the route.
	Model, RoutingKey, Algorithm string
	// Cluster answered the request ("" when none did); Hint is the
	// session's last cluster the gateway sent.
	Cluster, Hint string
	Class         routing.SessionState
	Selection     Selection
	RankDepth     int
	Waits         int
	Retries       int
	// Escape is why the session was answered away from its own cluster.
	Escape string
	Status int
	// PrefixTier is the tier of a prefix-aware choice; PrefixBlocks the
	// most blocks of the prompt any cluster was known to hold.
	PrefixTier   routing.PrefixTier
	PrefixBlocks int
}

// Entry is one request as the proxy reports it when the request ends. The
// strings are not kept: they are interned, and keys are hashed.
type Entry struct {
	Request
	// Session is the request's affinity key ("" for none), stored hashed.
	Session string
	// Prefix is the prompt's first checkpoint hash (0: no summary), stored
	// rehashed with the log's key.
	Prefix uint64
}

// Record is an Entry read back: strings restored, keys as hashes.
type Record struct {
	Request
	// Session is the keyed hash of the affinity key; 0 means none.
	Session uint64
	// Prefix is the keyed hash of the prompt's first checkpoint; 0 means
	// none.
	Prefix uint64
}

// End is when the request ended.
func (r *Record) End() time.Time { return r.At.Add(r.Duration) }

// route is the interned identity of a request's route.
type route struct{ model, routingKey, algorithm string }

// slot is one ring entry. seq is 2i+1 while record i is being written and
// 2i+2 once it is complete; 0 means never written.
type slot struct {
	seq atomic.Uint64
	w   [6]atomic.Uint64
}

// Log is a fixed ring of request records. Append and the readers are safe
// for concurrent use.
type Log struct {
	slots []slot
	mask  uint64
	next  atomic.Uint64
	// dropped counts the records a writer gave up (its slot was busy or
	// already newer).
	dropped  atomic.Uint64
	seed     maphash.Seed
	routes   *interner[route]
	clusters *interner[string]
	escapes  *interner[string]
}

// New returns a log of n records, rounded up to a power of two and
// clamped to [1024, MaxRecords].
func New(n int) *Log {
	size := 1024
	for size < n && size < MaxRecords {
		size <<= 1
	}
	return &Log{slots: make([]slot, size), mask: uint64(size - 1), seed: maphash.MakeSeed(),
		routes: newInterner(MaxInterned, func(r route) int { return len(r.model) + len(r.routingKey) + len(r.algorithm) },
			route{Overflow, Overflow, Overflow}),
		clusters: newInterner(MaxInterned, strlen, Overflow),
		escapes:  newInterner(64, strlen, Overflow)}
}

// Capacity is the number of records the ring holds.
func (l *Log) Capacity() int { return len(l.slots) }

// Bytes is the ring's fixed memory.
func (l *Log) Bytes() int64 { return int64(len(l.slots)) * SlotBytes }

// Total is the records appended since the log was made, dropped or not.
func (l *Log) Total() uint64 { return l.next.Load() }

// Dropped is the records lost to a busy slot.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// hash is the keyed hash of s; never 0, which means "none".
func (l *Log) hash(s string) uint64 {
	return nonZero(maphash.String(l.seed, s))
}

// rehash is the keyed hash of an already hashed value.
func (l *Log) rehash(v uint64) uint64 {
	var b [8]byte
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return nonZero(maphash.Bytes(l.seed, b[:]))
}

func strlen(s string) int { return len(s) }

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// Append records e. It never blocks and never allocates once e's strings
// have been seen; it drops e, counting it, when e's slot is busy.
func (l *Log) Append(e Entry) {
	var w [6]uint64
	l.encode(&e, &w)
	i := l.next.Add(1) - 1
	s := &l.slots[i&l.mask]
	old := s.seq.Load()
	if old&1 == 1 || old > 2*i || !s.seq.CompareAndSwap(old, 2*i+1) {
		l.dropped.Add(1)
		return
	}
	for k := range w {
		s.w[k].Store(w[k])
	}
	s.seq.Store(2*i + 2)
}

// The bit layout of words 3 and 4.
const (
	maxID     = 1<<16 - 1
	maxSmall  = 1<<8 - 1
	maxDurUs  = 1<<32 - 1
	maxBlocks = 1<<32 - 1
)

func (l *Log) encode(e *Entry, w *[6]uint64) {
	w[0] = uint64(e.At.UnixNano()) //nolint:gosec // a wall time after 1970 is positive
	if e.Session != "" {
		w[1] = l.hash(e.Session)
	}
	if e.Prefix != 0 {
		w[2] = l.rehash(e.Prefix)
	}
	rid := l.routes.id(route{e.Model, e.RoutingKey, e.Algorithm})
	cid := l.clusterID(e.Cluster)
	hid := l.clusterID(e.Hint)
	w[3] = uint64(rid) | uint64(cid)<<16 | uint64(hid)<<32 | clamp(e.Status, maxID)<<48
	dur := max(e.Duration.Microseconds(), 0)
	w[4] = uint64(min(dur, maxDurUs)) | clamp(e.RankDepth, maxSmall)<<32 | clamp(e.Waits, maxSmall)<<40 |
		clamp(e.Retries, maxSmall)<<48 | uint64(e.Class&0xf)<<56 | uint64(e.Selection&0x3)<<60
	var eid uint32
	if e.Escape != "" {
		eid = l.escapes.id(e.Escape)
	}
	w[5] = clamp(e.PrefixBlocks, maxBlocks) | uint64(eid&0xff)<<32 | uint64(e.PrefixTier&0xf)<<40
}

func (l *Log) clusterID(id string) uint32 {
	if id == "" {
		return noString
	}
	return l.clusters.id(id)
}

// clamp bounds v to [0, limit].
func clamp(v int, limit uint64) uint64 {
	if v <= 0 {
		return 0
	}
	return min(uint64(v), limit)
}

// tables are the intern tables' values, read once per walk.
type tables struct {
	routes            []route
	clusters, escapes []string
}

func (l *Log) tables() tables {
	return tables{routes: l.routes.values(), clusters: l.clusters.values(), escapes: l.escapes.values()}
}

func (t *tables) decode(w *[6]uint64, r *Record) {
	r.At = time.Unix(0, int64(w[0])) //nolint:gosec // written from a positive UnixNano
	r.Session, r.Prefix = w[1], w[2]
	rt := lookup(t.routes, uint32(w[3]&maxID))
	r.Model, r.RoutingKey, r.Algorithm = rt.model, rt.routingKey, rt.algorithm
	r.Cluster = lookup(t.clusters, uint32(w[3]>>16&maxID))
	r.Hint = lookup(t.clusters, uint32(w[3]>>32&maxID))
	r.Status = int(w[3] >> 48)
	r.Duration = time.Duration(w[4]&maxDurUs) * time.Microsecond
	r.RankDepth = int(w[4] >> 32 & maxSmall)
	r.Waits = int(w[4] >> 40 & maxSmall)
	r.Retries = int(w[4] >> 48 & maxSmall)
	r.Class = routing.SessionState(w[4] >> 56 & 0xf)
	r.Selection = Selection(w[4] >> 60 & 0x3)
	r.PrefixBlocks = int(w[5] & maxBlocks)
	r.Escape = lookup(t.escapes, uint32(w[5]>>32&0xff))
	r.PrefixTier = routing.PrefixTier(w[5] >> 40 & 0xf)
}

// Each calls fn with the records the ring holds, newest first, until fn
// returns false. A record being written, or overwritten while it is read,
// is skipped. Records come out in the order they were appended, which is
// the order their requests ended.
func (l *Log) Each(fn func(*Record) bool) {
	end := l.next.Load()
	size := uint64(len(l.slots))
	var r Record
	var w [6]uint64
	tab := l.tables()
	for i := end; i > 0 && end-i < size; i-- {
		idx := i - 1
		s := &l.slots[idx&l.mask]
		want := 2*idx + 2
		if s.seq.Load() != want {
			continue
		}
		for k := range w {
			w[k] = s.w[k].Load()
		}
		if s.seq.Load() != want {
			continue
		}
		tab.decode(&w, &r)
		if !fn(&r) {
			return
		}
	}
}

// Oldest returns the arrival time of the oldest complete record the ring
// holds, and false when it holds none.
func (l *Log) Oldest() (time.Time, bool) {
	end := l.next.Load()
	size := uint64(len(l.slots))
	start := uint64(0)
	if end > size {
		start = end - size
	}
	for idx := start; idx < end; idx++ {
		s := &l.slots[idx&l.mask]
		want := 2*idx + 2
		if s.seq.Load() != want {
			continue
		}
		at := s.w[0].Load()
		if s.seq.Load() != want {
			continue
		}
		return time.Unix(0, int64(min(at, math.MaxInt64))), true //nolint:gosec // bounded above
	}
	return time.Time{}, false
}
