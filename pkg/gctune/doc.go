// Package gctune sets the garbage collector's target for the router's
// long-running tiers when the operator has not.
//
// A relay allocates per request but keeps little: the gateway, hub and
// pylon each hold a few MiB of live heap. With the runtime's default
// (GOGC=100) the next collection starts when the heap has doubled, so a
// tier with 6 MiB live collects after every 6 MiB of garbage, dozens of
// times a second under load, and each cycle has a cost that does not
// shrink with the heap (stacks, globals, the mark workers' start). The
// tuner instead gives the heap a fixed headroom above what is live: the
// next collection starts at live + headroom, or at twice live when that is
// more, so a large heap (a gateway's Olric members holding millions of
// sessions) is collected exactly as by default. Memory grows by at most
// the headroom; GOMEMLIMIT, which the charts set, still caps the whole.
//
// GOGC set in the environment wins: the tuner then does nothing.
package gctune
