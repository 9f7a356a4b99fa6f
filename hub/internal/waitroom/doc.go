// Package waitroom owns the hub's waiting rooms: per routing target, the
// requests waiting for a cluster with room, by session class, and the
// overload policy built on them (docs/reliability.md#overload-and-shedding).
//
// The policy protects warm caches. A returning session's next turn reuses
// the KV prefix its last cluster still holds, so serving it costs a
// fraction of the prefill a new session needs, and shedding it throws
// that investment away. When both wait:
//
//   - capacity goes to returning sessions first: a new (or stale, or
//     unclassified) request that is about to take a cluster while
//     returning sessions wait yields once, waking them so they pass first;
//   - a full room sheds new requests, never returning ones while a new one
//     still waits: a returning arrival displaces the newest new waiter,
//     a new arrival is refused.
//
// A room is bounded (Config.Limit), so a burst past the fleet's capacity
// is refused at once instead of piling up bodies and goroutines for the
// whole wait. The package never sleeps and reads no clock: the proxy
// sleeps on the channels it hands out.
package waitroom
