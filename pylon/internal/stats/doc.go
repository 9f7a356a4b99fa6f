// Package stats is pylon's statistics engine: it turns the engine stats
// stream, pylon's own request observations and the optional KV-cache poll
// into one protocol.ModelStats per model generation. The published fields
// and how each is computed are specified in docs/design/statistics.md.
//
// A Collector owns all of it behind one mutex:
//   - the live request projection (docs/design/statistics.md#live-request-projection):
//     every request the engine proxy accepts enters as Pending through
//     Begin and moves forward through Headers and Output until Finish
//     removes it; queue_size, the phase counts, the input sums and the
//     priority map are computed from it, and LocalQueueMs serves queue
//     admission from the same data;
//   - per-request counters fed by the engine stats stream (modes auto,
//     required, off) or, in OpenAI-fallback mode, by explicit usage
//     counters parsed from response chunks, sampled as in
//     docs/design/statistics.md#aggregation;
//   - per-generation aggregates: the Welford input-TPS distribution behind
//     last_mean_input_tps, the output-TPS window of 8, max_output_tps, the
//     KV values and the sticky capability/source labels.
//
// Observations are applied synchronously. Upstream Stargate sends them over
// a bounded channel to one collector task and drops them when it is full;
// here nothing can be dropped and a snapshot always reflects every call
// that returned. Run drives the only background work: the engine-stream
// consumer, the 1 s KV poll and the 1 s stale sweep (which looks only at
// the request memory that is due, not at all of it), all timed by the
// injected clock.
//
// With several engines behind the pylon (Config.UpstreamBaseURLs) the
// stream and the KV poll run against each: KV values are summed over the
// engines, an engine's stream events count only for requests dispatched to
// it (Observer.Dispatched), and the auto-mode fallback is decided per
// engine. Each model still has one set of statistics for the whole pylon.
//
// The package decides what the statistics are; it does not decide routing,
// admission outcomes (the engine proxy compares LocalQueueMs with the
// hub's estimate) or when a registration is sent (Changed only says that
// the published stats may have moved).
package stats
