// Package routelog is the hub's short memory of the requests it routed:
// a fixed ring of compact records, one per request that reached the
// routing loop, that the live routing page (hub/internal/routepage) reads
// to show decisions, session flows and hot prefixes.
//
// The request path pays for a record with one lock-free append and no
// allocation: a record is six 64-bit words written with atomic stores
// into a slot claimed with one atomic add and one compare-and-swap. Its
// strings (model, routing key, algorithm, clusters, escape reason) are
// replaced by small numbers from bounded intern tables, whose lookups are
// lock-free once a string is known; the first sight of a string takes a
// mutex. Session keys and prompt prefixes are stored only as keyed hashes
// whose key is drawn at random when the log is made, so a raw
// conversation id or prompt_cache_key never leaves the request and the
// hashes mean nothing outside this hub process.
//
// Readers copy records out newest first. A slot's sequence word tells a
// reader whether the slot still holds the record it expects and whether
// a writer is in it, so a reader never returns a torn record. A writer
// that finds its slot still being written by another (the ring has gone
// round during one write: it is too small for the request rate) drops its
// record and counts it, rather than wait.
//
// Memory is fixed when the log is made: Bytes per slot times the slots,
// plus intern tables bounded by MaxInterned strings each of at most
// maxInternBytes bytes.
package routelog
