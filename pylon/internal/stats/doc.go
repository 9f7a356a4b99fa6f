// Package stats is pylon's statistics engine: it turns the engine stats
// stream, pylon's own request observations and the optional KV-cache poll
// into one protocol.ModelStats per model generation (pylon.md §2).
//
// A Collector owns all of it behind one mutex:
//   - the live request projection (§2.6): every request the relay accepts
//     enters as Pending through Begin and moves forward through Headers and
//     Output until Finish removes it; queue_size, the phase counts, the input
//     sums and the priority map are computed from it, and LocalQueueMs
//     serves queue admission (§4 step 3) from the same data;
//   - per-request counters (§2.5) fed by the engine stats stream (modes
//     auto, required, off; §2.2) or, in OpenAI-fallback mode, by explicit
//     usage counters parsed from response chunks (§2.4);
//   - per-generation aggregates: the Welford input-TPS distribution behind
//     last_mean_input_tps, the output-TPS window of 8, max_output_tps, the
//     KV values and the sticky capability/source labels.
//
// Observations are applied synchronously (the reference sends them over a
// bounded channel to one collector task; here nothing can be dropped and a
// snapshot always reflects every call that returned). Run drives the only
// background work: the engine-stream consumer, the 1 s KV poll and the 1 s
// stale sweep, all timed by the injected clock.
//
// With several engines behind the pylon (Config.UpstreamBaseURLs) the
// stream and the KV poll run against each: KV values are summed over the
// engines, an engine's stream events count only for requests dispatched to
// it (Observer.Dispatched), and the auto-mode fallback is decided per
// engine. Each model still has one set of statistics for the whole pylon.
//
// The package decides what the statistics are; it does not decide routing,
// admission outcomes (the relay compares LocalQueueMs with the hub's
// estimate) or when a registration is sent (Changed only says that the
// published stats may have moved).
package stats
