// Package loadgen replays workload files (package workload) against the
// gateway or the hub and measures what came back: per request TTFT,
// latency, cached and output tokens, status, retries and serving cluster;
// per run the statistics of docs/loadgen.md#reporting-rules (nearest-rank
// percentiles, cache-hit %, new/returning sessions, cluster shares,
// sessions that escaped their cluster and whether they followed it,
// requests rejected before their first byte), the cached tokens as a share
// of the run's cache ceiling, and the copies per block across clusters
// (how many clusters received each prompt block), both of which it counts
// itself from the prompts it sends; per campaign the same across arms,
// with repeats aggregated by medians, the engines' and the hub's counters
// (evictions, escapes by reason) per run and per arm, and sweeps of rates
// relative to a capacity figure with each arm's saturation point.
//
// It only sends what a workload file says, to the URL it is given, within
// the bounds it is given (request count, per-request timeout, run
// deadline). It never starts the stack itself: a campaign's ArmStack
// (loadgen campaign --compare) or its --before-arm/--after-arm hooks start
// and stop the stack around each arm. Open-loop sends, deadlines and
// timeouts are scheduled on an injected clock.Clock so tests drive them
// with clock.Fake.
package loadgen
