// Package clock is the only source of time for timing logic in this project:
// waits, TTLs, staleness, token buckets and the mock engine's prefill model.
//
// Production code receives a Clock (Real in main) instead of calling the time
// package, so tests drive time with a Fake and never sleep to prove timing.
// The package owns nothing else.
package clock
