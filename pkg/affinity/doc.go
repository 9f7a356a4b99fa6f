// Package affinity chooses one of several interchangeable places for a
// request — the backends (pylons) of one cluster at the hub, the engines
// behind one pylon — so that the turns of one session keep landing where
// the previous turn left its KV cache.
//
// Places inside a cluster do not share their caches. Spreading a session's
// turns by round robin or least load splits its cache across engines and
// pays most of the prefill again; sending every turn to one place by a
// plain hash piles hot sessions onto one engine. The package does what
// "consistent hashing with bounded loads" (Mirrokni, Thorup and Zadimoghaddam,
// 2017) does, over rendezvous hashing rather than a ring:
//
//   - each place gets a score for the key, a hash of the key and the
//     place's name, and the key prefers the places in descending score;
//     a place joining or leaving moves only the keys whose best place it
//     is, and every process computes the same order without sharing state;
//   - a place is skipped while it carries more than its share: with L
//     requests in flight over n places, a place may carry at most
//     ceil(c·(L+1)/n) of them, c being the load factor (2 by default); a
//     place the caller reports full is skipped too;
//   - when every place is skipped, the least loaded one that is not full
//     takes the request (or, all full, the least loaded of all): a key never
//     waits for its preferred place.
//
// The bound is what keeps a popular set of sessions from overloading one
// place while others idle: at c = 2 no place carries more than twice the
// average plus one, and a key leaves its preferred place only while that
// place is that busy (or full).
// Requests without a key keep a plain load-based choice (PickLeastLoaded).
//
// Hashes are FNV-1a with a 64-bit finalizer, fixed so that every replica
// and every version agree; they are not a defence against a client that
// crafts keys to collide, which can at most make its own sessions share a
// place.
package affinity
