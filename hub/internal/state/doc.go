// Package state is the single owner of the hub's routing state: which
// backends (pylon registrations) serve which routing targets, their latest
// statistics and RTT, the per-cluster aggregates, the pending reservations
// and the marks of backends that refused a request for its queue
// estimate (MarkFull). docs/design/routing-state.md is the contract it implements.
//
// Statistics are brought within MaxStatCount and MaxStatRate before they
// are stored, so no value a pylon sends can make an estimate or a sum
// overflow. The store also remembers, within a bound, every target a
// registration has listed since it was built (Known), and signals when a
// target gains its first active backend (Activated), so a request for a
// model whose pylons are restarting can wait for them, and when a
// target's state changes in a way that may give a waiting request room
// (Publications, PublishedAfter), so routing waits end on a change
// instead of polling.
//
// Writers (registration streams and the proxy's reservations) serialise on
// one mutex and publish, after every change, an immutable *routing.Snapshot
// per affected target through an atomic pointer. Readers (Snapshot,
// Registered, NextBackend, ActiveModels) never take that mutex, never block
// and never allocate on the hot path, so a routing decision never waits on a
// heartbeat.
//
// The package knows nothing about load-balancing algorithms (it never imports
// lb) and keeps no per-target load-balancer state: the proxy owns pickers and
// can key their state on Snapshot.Generation. Time comes from the injected
// clock.Clock; reservations have no timer (a backend's next registration
// snapshot replaces them) and no other staleness rule lives here (the
// registration idle timeout is the caller's).
package state
