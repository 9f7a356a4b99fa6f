// Command benchpath measures what each tier of the request path costs,
// against the machine's own floor: in one run it starts fresh processes
// per round (pkg/internal/stack: a mock engine with every modelled delay
// at zero, or only its tokens paced with -token-delay-ms, one to three relay-floor hops of bin/baseline-proxy chained in
// front of it, a hub, a pylon and a gateway with Olric, last-cluster
// tracking and rate limits on), and for each body size, client count and
// streaming mode drives every path (engine direct, one to three floor
// hops, hub + pylon, the whole chain without and with a session key) in
// an order rotated per round, with a warm-up before each measured row.
//
// It owns the load (an HTTP/1.1 keep-alive client per concurrent user,
// closed loop; streamed answers parsed as server-sent events to time the
// first event and the gaps between events), the per-process counters it
// reads from /proc around each row (CPU time, read/write-class syscalls,
// context switches), the Go benchmarks of each tier's request path it
// runs for allocations per request, the optional pprof capture, and the
// results folder: raw JSON per row and a markdown report with the ratios
// against one floor hop. It changes nothing in the tiers it measures.
// make bench-path runs it; docs/performance/path.md keeps its passes.
//
// Exit status: 0 when every row was measured, 1 otherwise (the report
// then holds what was), 2 for bad flags.
package main
