// Package ratelimit admits requests against per-(API key, model) request
// and token limits shared by every gateway replica
// (docs/design/sessions.md#rate-limits).
//
// Algorithm: fixed one-minute windows of atomic counters. Admission adds
// the request's units to the window's counter and, when the new value
// exceeds the limit, takes them back and refuses; because each add runs
// atomically on the counter's owner (an Olric cluster-client Incr routed to
// the partition owner, or a mutex in process), concurrent replicas in the
// exact mode together never admit more than the limit per window. Token admission
// reserves the input estimate plus the output maximum, and Settle later
// replaces the reservation with the usage the backend reported (reserve,
// then settle). The bounds on over-admission are documented in
// docs/design/sessions.md#bound-across-replicas.
//
// Two modes share that algorithm. In the exact mode (chosen with
// --rate-limit-mode exact) every add is a store call, as above. In the
// local mode (Synced, the gateway's default) each replica admits from the
// last cluster total it saw plus its own adds since, within its share of
// what is left under the limit, and reconciles with the store in
// background rounds: one add per active key per interval, whose answer is
// the new total. Over-admission is then
// bounded by what the other replicas admit in two intervals plus two
// rounds (docs/gateway.md#rate-limit-modes); anything the local state
// cannot decide goes to the store as in the exact mode.
//
// A store failure never crashes a request: by default the limiter fails
// open (admits, counts the error); configured fail-closed it reports the
// error and the caller answers 503.
package ratelimit
