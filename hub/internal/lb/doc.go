// Package lb decides which cluster of a routing snapshot serves a request.
//
// It holds the one seam every algorithm implements (Picker), the queue and
// time-to-first-token estimates every algorithm shares and the comparators
// built on them (docs/design/algorithms.md#estimates). Each algorithm lives
// in its own subpackage (powerofn, …) as a small type behind Picker.
//
// Everything here is pure: a decision is a function of the request, the
// snapshot, the time passed in and the random source passed in. The package
// does no I/O, reads no clock, uses no global random source and never blocks,
// and it imports only routing and the wire types, never the state store or the
// proxy.
package lb
