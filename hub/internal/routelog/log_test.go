package routelog

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func full() Entry {
	return Entry{Request: Request{At: t0, Duration: 1500 * time.Millisecond, Model: "m", RoutingKey: "rk", Algorithm: "pulsar",
		Cluster: "c-2", Hint: "c-1", Class: routing.SessionReturning,
		Selection: SelectionFallback, RankDepth: 3, Waits: 2, Retries: 1, Escape: "group_saturated",
		Status: 200, PrefixTier: routing.PrefixTierSplit, PrefixBlocks: 77}, Session: "conv-1", Prefix: 0xfeed}
}

func records(l *Log) []Record {
	var out []Record
	l.Each(func(r *Record) bool { out = append(out, *r); return true })
	return out
}

func TestRoundTrip(t *testing.T) {
	l := New(0)
	e := full()
	l.Append(e)
	l.Append(Entry{Request: Request{At: t0.Add(time.Second), Model: "m", Status: 503}})
	got := records(l)
	if len(got) != 2 {
		t.Fatalf("records = %d, want 2", len(got))
	}
	r := got[1]
	if !r.At.Equal(e.At) || r.Duration != e.Duration || r.Model != "m" || r.RoutingKey != "rk" || r.Algorithm != "pulsar" ||
		r.Cluster != "c-2" || r.Hint != "c-1" || r.Class != routing.SessionReturning || r.Selection != SelectionFallback ||
		r.RankDepth != 3 || r.Waits != 2 || r.Retries != 1 || r.Escape != "group_saturated" || r.Status != 200 ||
		r.PrefixTier != routing.PrefixTierSplit || r.PrefixBlocks != 77 {
		t.Fatalf("read back %+v from %+v", r, e)
	}
	if r.Session == 0 || r.Prefix == 0 || r.Prefix == 0xfeed {
		t.Fatalf("session %x, prefix %x: want keyed hashes, not 0 or the raw value", r.Session, r.Prefix)
	}
	anon := got[0]
	if anon.Session != 0 || anon.Prefix != 0 || anon.Cluster != "" || anon.Hint != "" || anon.Escape != "" || anon.Status != 503 {
		t.Fatalf("empty fields read back as %+v", anon)
	}
	if !got[1].End().Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("End = %v", got[1].End())
	}
}

func TestKeyedHashes(t *testing.T) {
	a, b := New(0), New(0)
	ha, hb := a.hash("conv-1"), b.hash("conv-1")
	if ha != a.hash("conv-1") {
		t.Fatal("one log hashes a key two ways")
	}
	if ha == hb {
		t.Fatal("two logs share a hash key: a session id would be comparable across hubs")
	}
	if a.hash("conv-1") == a.hash("conv-2") {
		t.Fatal("two keys hash alike")
	}
}

func TestClampsLargeValues(t *testing.T) {
	l := New(0)
	e := Entry{Request: Request{At: t0, Duration: 2 * time.Hour, RankDepth: 1000, Waits: -3, Retries: 300, Status: 70000, PrefixBlocks: 1 << 40}}
	l.Append(e)
	r := records(l)[0]
	if r.Duration != time.Duration(maxDurUs)*time.Microsecond || r.RankDepth != 255 || r.Waits != 0 ||
		r.Retries != 255 || r.Status != maxID || r.PrefixBlocks != maxBlocks {
		t.Fatalf("clamped read back %+v", r)
	}
}

func TestRingKeepsNewest(t *testing.T) {
	l := New(1000) // rounds up to 1024
	if l.Capacity() != 1024 || l.Bytes() != 1024*SlotBytes {
		t.Fatalf("capacity %d bytes %d", l.Capacity(), l.Bytes())
	}
	for i := range 3000 {
		l.Append(Entry{Request: Request{At: t0.Add(time.Duration(i) * time.Millisecond), Waits: i % 200}})
	}
	got := records(l)
	if len(got) != 1024 {
		t.Fatalf("records = %d, want the ring's 1024", len(got))
	}
	if !got[0].At.Equal(t0.Add(2999*time.Millisecond)) || !got[1023].At.Equal(t0.Add(1976*time.Millisecond)) {
		t.Fatalf("newest %v oldest %v", got[0].At, got[1023].At)
	}
	if oldest, ok := l.Oldest(); !ok || !oldest.Equal(got[1023].At) {
		t.Fatalf("Oldest = %v %v, want %v", oldest, ok, got[1023].At)
	}
	if l.Total() != 3000 || l.Dropped() != 0 {
		t.Fatalf("total %d dropped %d", l.Total(), l.Dropped())
	}
	n := 0
	l.Each(func(*Record) bool { n++; return n < 5 })
	if n != 5 {
		t.Fatalf("Each went on after false: %d calls", n)
	}
}

func TestEmpty(t *testing.T) {
	l := New(0)
	if _, ok := l.Oldest(); ok {
		t.Fatal("an empty log has an oldest record")
	}
	if got := records(l); len(got) != 0 {
		t.Fatalf("records = %d", len(got))
	}
}

// TestBusySlotDrops: a writer whose slot another writer is still filling
// (the ring went round during that write) drops its record and counts it;
// a reader skips the slot being written.
func TestBusySlotDrops(t *testing.T) {
	l := New(1024)
	e := full()
	l.Append(e)                      // record 0 in slot 0
	l.slots[0].seq.Store(2*1024 + 1) // record 1024 is "being written" there
	l.next.Store(1025)
	l.Append(e) // record 1025 goes to slot 1
	if len(records(l)) != 1 {
		t.Fatalf("a slot being written was read: %d records", len(records(l)))
	}
	l.next.Store(2048)
	l.Append(e) // record 2048 wants slot 0, still busy
	if l.Dropped() != 1 {
		t.Fatalf("dropped = %d, want 1", l.Dropped())
	}
	// A late writer must not overwrite a newer record.
	l.slots[2].seq.Store(2*3074 + 2)
	l.next.Store(2)
	l.Append(e) // record 2 wants slot 2, which holds record 3074
	if l.Dropped() != 2 || l.slots[2].seq.Load() != 2*3074+2 {
		t.Fatalf("a late writer overwrote a newer record: dropped %d seq %d", l.Dropped(), l.slots[2].seq.Load())
	}
}

// TestConcurrentNoTornRecords: writers append records whose fields all
// encode one number while readers walk the ring; every record a reader
// gets is whole.
func TestConcurrentNoTornRecords(t *testing.T) {
	l := New(1024)
	const writers, each = 4, 3000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v := (w*each + i) % 250
				l.Append(Entry{Request: Request{At: t0.Add(time.Duration(v)), Duration: time.Duration(v) * time.Microsecond,
					RankDepth: v, Waits: v, Retries: v, Status: v, PrefixBlocks: v, Cluster: "c" + strconv.Itoa(v%7),
					Hint: "c" + strconv.Itoa(v%7)}})
			}
		})
	}
	stop := make(chan struct{})
	var torn []string
	var rg sync.WaitGroup
	rg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			l.Each(func(r *Record) bool {
				v := int(r.At.Sub(t0))
				if int(r.Duration/time.Microsecond) != v || r.RankDepth != v || r.Waits != v || r.Retries != v ||
					r.Status != v || r.PrefixBlocks != v || r.Cluster != r.Hint || r.Cluster != "c"+strconv.Itoa(v%7) {
					torn = append(torn, fmt.Sprintf("%+v", *r))
				}
				return true
			})
		}
	})
	wg.Wait()
	close(stop)
	rg.Wait()
	if len(torn) > 0 {
		t.Fatalf("%d torn records, first %s", len(torn), torn[0])
	}
	if l.Total() != writers*each {
		t.Fatalf("total %d", l.Total())
	}
}

func TestInternBounds(t *testing.T) {
	l := New(2 * MaxInterned)
	for i := range MaxInterned + 10 {
		l.Append(Entry{Request: Request{At: t0, Cluster: "cluster-" + strconv.Itoa(i)}})
	}
	long := string(make([]byte, maxInternBytes+1))
	l.Append(Entry{Request: Request{At: t0, Model: long, Cluster: "cluster-0"}})
	got := records(l)
	if got[0].Model != Overflow || got[0].Cluster != "cluster-0" {
		t.Fatalf("a too-long model read back as %q (cluster %q)", got[0].Model, got[0].Cluster)
	}
	if got[1].Cluster != Overflow || got[len(got)-1].Cluster != "cluster-0" {
		t.Fatalf("past the bound: %q, first: %q", got[1].Cluster, got[len(got)-1].Cluster)
	}
	if n := len(l.clusters.values()); n != MaxInterned+2 {
		t.Fatalf("cluster table holds %d values, bound %d", n, MaxInterned+2)
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	l := New(0)
	e := full()
	l.Append(e)
	if n := testing.AllocsPerRun(1000, func() { l.Append(e) }); n != 0 {
		t.Fatalf("Append allocates %.1f times once its strings are known", n)
	}
}

func BenchmarkAppend(b *testing.B) {
	l := New(DefaultRecords)
	e := full()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Append(e)
		}
	})
}

// heap is the live heap after a collection.
func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc) //nolint:gosec // a heap fits in int64
}

// The ring's memory is what Bytes says, allocated once: a million appends
// over a few hundred distinct strings leave the heap where it was.
func TestMemoryIsFixed(t *testing.T) {
	before := heap()
	l := New(DefaultRecords)
	made := heap() - before
	if made < l.Bytes()-l.Bytes()/20 || made > l.Bytes()+l.Bytes()/20 {
		t.Fatalf("New(%d) took %d bytes, Bytes() says %d", DefaultRecords, made, l.Bytes())
	}
	clusters := make([]string, 200)
	for i := range clusters {
		clusters[i] = "cluster-" + strconv.Itoa(i)
	}
	e := full()
	for i := range 1 << 20 {
		e.Cluster = clusters[i%len(clusters)]
		l.Append(e)
	}
	grown := heap() - before - made
	if grown > 256<<10 {
		t.Fatalf("the heap grew %d bytes over a million appends", grown)
	}
	runtime.KeepAlive(l)
}
