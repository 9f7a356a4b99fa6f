// Package routepage is the hub's live routing page: the JSON view of one
// hub's recent routing (GET /debug/routing on the admin listener) and the
// self-contained page that polls it (GET /ui).
//
// A view is built per poll, off the request path, from two sources: the
// request records of hub/internal/routelog (decisions, waits, retries,
// session classes, escapes, the turns of recent sessions, hot prompt
// prefixes over a time window) and the routing state's clusters now
// (health, load, KV use, RTT, reservations). Building reads the ring once,
// newest first, and stops at the first record older than the window, so
// its cost is bounded by the records in the window, never by the ring.
//
// The view names sessions and prefixes by the record log's keyed hashes
// only. It is one hub's view: with several hub replicas, each page shows
// the requests its own hub routed, and says so.
//
// The page (assets/) is plain HTML, CSS and JavaScript served with a
// Content-Security-Policy that allows nothing but its own files and
// fetches to its own listener. docs/routing-page.md documents the JSON
// schema and what each panel means.
package routepage
