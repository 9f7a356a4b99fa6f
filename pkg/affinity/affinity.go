package affinity

import "math"

// DefaultLoadFactor is the bound c used when a caller sets none: a place
// may carry up to twice the average load (plus the request being placed)
// before its keys spill to their next place. With the two places per
// level of a typical cluster (two pylons, two engines each) that bound
// never binds, and only a full place moves a key: tighter factors spill
// at the small in-flight counts of a lightly loaded cluster and split
// sessions' caches for no gain (docs/design/routing-state.md#backends-inside-a-cluster).
const DefaultLoadFactor = 2.0

// Key is a hashed affinity key. The zero Key is a valid key like any
// other; callers decide separately whether a request has a key at all.
type Key uint64

// HashKey hashes an affinity key (for example x-cache-affinity-key).
func HashKey(s string) Key { return Key(fnv(s)) }

// HashID hashes a place's stable name (a backend id, an engine URL). Callers
// hash their places once and keep the result.
func HashID(s string) uint64 { return fnv(s) }

// Score is key k's preference for the place whose hashed name is id:
// higher is preferred. It mixes both hashes so that the order of places
// differs from key to key.
func Score(k Key, id uint64) uint64 { return mix(uint64(k) ^ mix(id)) }

// Place is one candidate as the picker sees it.
type Place struct {
	// ID is HashID of the place's stable name.
	ID uint64
	// Load is the requests in flight on the place (started and waiting),
	// in whatever unit the caller counts consistently for every place.
	Load int
	// Full reports that the place cannot take a request now (no free slot,
	// marked down); a full place is chosen only when every place is.
	Full bool
}

// Pick returns the index in places of the place for key k under the load
// bound factor (DefaultLoadFactor when factor is 0; a negative or infinite
// factor, or NaN, disables the bound, leaving only Full to move a key), or
// -1 when places is empty. See the package comment for the rule.
func Pick(k Key, places []Place, factor float64) int {
	if len(places) == 0 {
		return -1
	}
	if factor == 0 {
		factor = DefaultLoadFactor
	}
	bound := math.MaxInt
	if factor > 0 && !math.IsInf(factor, 1) {
		total := 0
		for _, p := range places {
			total += max(p.Load, 0)
		}
		bound = int(math.Ceil(factor * float64(total+1) / float64(len(places))))
	}
	best, bestScore := -1, uint64(0)
	for i, p := range places {
		if p.Full || p.Load+1 > bound {
			continue
		}
		if s := Score(k, p.ID); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	if best >= 0 {
		return best
	}
	return leastLoaded(k, places)
}

// Preferred returns the index of k's first choice among n places, ignoring
// load and fullness, where id(i) is HashID of place i's name; -1 when n is
// 0. It is the place Pick returns whenever nothing pushes the key off it,
// so callers use it to tell a preferred pick from a spilled one.
func Preferred(k Key, n int, id func(i int) uint64) int {
	best, bestScore := -1, uint64(0)
	for i := range n {
		if s := Score(k, id(i)); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// PickLeastLoaded returns the least loaded place that is not full (or, all
// full, the least loaded of all), ties going to the lowest index; -1 when
// places is empty. It is the choice for requests without a key.
func PickLeastLoaded(places []Place) int {
	best := -1
	for pass := 0; pass < 2 && best < 0; pass++ {
		for i, p := range places {
			if pass == 0 && p.Full {
				continue
			}
			if best < 0 || p.Load < places[best].Load {
				best = i
			}
		}
	}
	return best
}

// leastLoaded is PickLeastLoaded with ties broken by k's score, so the
// spill of one key is as stable as its preference.
func leastLoaded(k Key, places []Place) int {
	best := -1
	var bestScore uint64
	for pass := 0; pass < 2 && best < 0; pass++ {
		for i, p := range places {
			if pass == 0 && p.Full {
				continue
			}
			s := Score(k, p.ID)
			if best < 0 || p.Load < places[best].Load || (p.Load == places[best].Load && s > bestScore) {
				best, bestScore = i, s
			}
		}
	}
	return best
}

// fnv is 64-bit FNV-1a.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is the splitmix64 finalizer: FNV's low bits mix poorly for short,
// similar names such as "engine-1" and "engine-2".
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
