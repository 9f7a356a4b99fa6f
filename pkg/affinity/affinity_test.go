package affinity

import (
	"fmt"
	"math"
	"testing"
)

func places(n int, name string) []Place {
	ps := make([]Place, n)
	for i := range ps {
		ps[i] = Place{ID: HashID(fmt.Sprintf("%s-%d", name, i))}
	}
	return ps
}

// TestHashesArePinned keeps the hash layout fixed: every hub replica and
// pylon, of any version, must give a key the same preferred place.
func TestHashesArePinned(t *testing.T) {
	if got := HashID(""); got != 14695981039346656037 {
		t.Errorf("HashID(\"\") = %d, want the FNV-1a offset basis", got)
	}
	if got := HashID("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("HashID(a) = %#x, want 0xaf63dc4c8601ec8c", got)
	}
	if got := Score(HashKey("mt:v1:pck:abc"), HashID("engine-0")); got != Score(HashKey("mt:v1:pck:abc"), HashID("engine-0")) {
		t.Fatal("Score is not a function of its inputs")
	}
	if got, want := Score(1, 2), mix(1^mix(2)); got != want {
		t.Errorf("Score(1, 2) = %#x, want %#x", got, want)
	}
}

func TestPickSpreadsKeysEvenly(t *testing.T) {
	ps := places(4, "b")
	counts := make([]int, len(ps))
	const keys = 20000
	for i := range keys {
		counts[Pick(HashKey(fmt.Sprintf("session-%d", i)), ps, 0)]++
	}
	for i, c := range counts {
		if c < keys/4*85/100 || c > keys/4*115/100 {
			t.Errorf("place %d got %d of %d keys, want within 15 %% of %d", i, c, keys, keys/4)
		}
	}
}

// TestPickMovesOnlyTheLostPlacesKeys: removing a place moves exactly the
// keys that preferred it, the property round robin and modulo hashing lack.
func TestPickMovesOnlyTheLostPlacesKeys(t *testing.T) {
	all := places(5, "e")
	without := append(append([]Place{}, all[:2]...), all[3:]...)
	moved, lost := 0, 0
	for i := range 5000 {
		k := HashKey(fmt.Sprintf("k%d", i))
		before := all[Pick(k, all, 0)].ID
		after := without[Pick(k, without, 0)].ID
		if before == all[2].ID {
			lost++
			continue
		}
		if before != after {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys moved between surviving places", moved)
	}
	if lost == 0 {
		t.Error("no key preferred the removed place; the test proves nothing")
	}
}

func TestPickBound(t *testing.T) {
	ps := places(4, "p")
	k := HashKey("hot")
	pref := Pick(k, ps, 0)

	// 4 places, 11 in flight: ceil(1.25·12/4) = 4 at c = 1.25, so the preferred place
	// keeps the key up to 3 in flight and sheds it at 4.
	for _, tc := range []struct {
		load int
		stay bool
	}{{3, true}, {4, false}} {
		ps[pref].Load = tc.load
		for i := range ps {
			if i != pref {
				ps[i].Load = 0
			}
		}
		rest := 11 - tc.load
		for i := range ps {
			if i != pref && rest > 0 {
				n := min(rest, 3)
				ps[i].Load, rest = n, rest-n
			}
		}
		got := Pick(k, ps, 1.25)
		if (got == pref) != tc.stay {
			t.Errorf("preferred place at load %d of 11: picked %d, preferred %d, want stay=%v", tc.load, got, pref, tc.stay)
		}
	}
	// The default, c = 2: the same 4 of 11 in flight is under
	// ceil(2·12/4) = 6, so the key stays.
	if got := Pick(k, ps, 0); got != pref {
		t.Errorf("default factor at load 4 of 11: picked %d, want the preferred %d", got, pref)
	}
	// A negative, infinite or NaN factor disables the bound.
	ps[pref].Load = 1000
	for _, f := range []float64{-1, math.Inf(1), math.NaN()} {
		if got := Pick(k, ps, f); got != pref {
			t.Errorf("factor %v: picked %d, want the preferred %d", f, got, pref)
		}
	}
}

func TestPickSkipsFullAndFallsBackToLeastLoaded(t *testing.T) {
	ps := places(3, "f")
	k := HashKey("s")
	pref := Pick(k, ps, 0)
	ps[pref].Full = true
	if got := Pick(k, ps, 0); got == pref || got < 0 {
		t.Fatalf("full preferred place still picked (%d)", got)
	}
	for i := range ps {
		ps[i].Full = true
		ps[i].Load = 5
	}
	ps[(pref+1)%3].Load = 2
	if got := Pick(k, ps, 0); got != (pref+1)%3 {
		t.Errorf("all full: picked %d, want the least loaded %d", got, (pref+1)%3)
	}
	if got := Pick(k, nil, 0); got != -1 {
		t.Errorf("no places: %d, want -1", got)
	}
}

func TestPickLeastLoaded(t *testing.T) {
	ps := []Place{{Load: 3}, {Load: 1, Full: true}, {Load: 2}, {Load: 2}}
	if got := PickLeastLoaded(ps); got != 2 {
		t.Errorf("got %d, want 2 (least loaded not full, lowest index on ties)", got)
	}
	for i := range ps {
		ps[i].Full = true
	}
	if got := PickLeastLoaded(ps); got != 1 {
		t.Errorf("all full: got %d, want 1", got)
	}
	if got := PickLeastLoaded(nil); got != -1 {
		t.Errorf("empty: got %d, want -1", got)
	}
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ps := places(n, "bench")
			for i := range ps {
				ps[i].Load = i % 3
			}
			k := HashKey("mt:v1:pck:0123456789abcdef")
			b.ReportAllocs()
			for b.Loop() {
				_ = Pick(k, ps, 0)
			}
		})
	}
}

// TestPreferredIsPicksUnloadedChoice: Preferred names the place Pick returns
// when no place is full and loads are equal, so "preferred" in the pick
// metrics means what Pick would have done undisturbed; and Preferred
// ignores fullness and load, which Pick must not.
func TestPreferredIsPicksUnloadedChoice(t *testing.T) {
	ps := places(7, "e")
	id := func(i int) uint64 { return ps[i].ID }
	if got := Preferred(1, 0, id); got != -1 {
		t.Fatalf("Preferred over no place = %d, want -1", got)
	}
	moved := 0
	for i := range 2000 {
		k := HashKey(fmt.Sprintf("key-%d", i))
		want := Pick(k, ps, 0)
		if got := Preferred(k, len(ps), id); got != want {
			t.Fatalf("key %d: Preferred = %d, Pick on an idle fleet = %d", i, got, want)
		}
		busy := append([]Place(nil), ps...)
		busy[want].Full = true
		if Pick(k, busy, 0) != want {
			moved++
		}
		if got := Preferred(k, len(busy), func(i int) uint64 { return busy[i].ID }); got != want {
			t.Fatalf("key %d: Preferred moved to %d when its place was full, want %d", i, got, want)
		}
	}
	if moved != 2000 {
		t.Fatalf("Pick kept %d keys on a full place", 2000-moved)
	}
}
