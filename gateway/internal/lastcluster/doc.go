// Package lastcluster remembers which hub cluster served a multi-turn
// session and hints it to the hub on the session's next turn
// (docs/design/sessions.md#last-cluster-tracking). It owns the store key, the store contract (an Olric DMap shared by
// all replicas, or an in-process expirable LRU), the deadline-bounded
// lookup and the asynchronous write after 2xx headers, the cache that
// answers a session's lookups on the replica that last wrote or read it
// and skips rewriting an unchanged cluster (its TTL bounds how stale a
// hint can be across replicas), with their metrics,
// spans and sampled logs. A store failure never fails a request: every
// error becomes a miss, counted and logged without the key.
package lastcluster
