// Package e2e holds the end-to-end acceptance tests of the hub, pylon and
// mock engine: registration, live load, both statistics sources,
// queue-mismatch retries, KV reuse, staleness, failures (hub restart, pylon
// killed, client gone), TLS and tokens, and session affinity, each seen
// through the hub's request path (docs/design/hub-request.md#routing-pass).
// It decides nothing and ships nothing: its tests build the three binaries
// once, run them as child processes on free loopback ports and talk to them
// over HTTP only, so they assert what a client, an operator reading
// GET /debug/state or a Prometheus scrape would see, never internal state.
//
// Run them from hub/ with
//
//	go test -race -count=1 ./e2e
//
// TestE2E runs the 31-second staleness check in parallel with the rest of
// the suite; the suite runs one scenario at a time so that the
// timing-sensitive checks do not compete for CPU. Select one scenario with
// -run 'TestE2E/Suite/KV'.
package e2e
