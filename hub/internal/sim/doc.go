// Package sim is the offline routing simulator behind bin/routing-sim: a
// single-threaded discrete-event replay of a workload file (pkg/workload)
// through the hub's real routing code on simulated clusters.
//
// What is real and what is modelled:
//   - Routing is the hub's own: the arm's lb-config.json goes through
//     lbconfig.Parse and lbconfig.NewResolver with lbfactory.New, and every
//     routing pass is dispatch.Decide, the pass the proxy runs
//     (docs/design/hub-request.md#routing-pass), on a routing.Snapshot
//     published by the hub's own state store (hub/internal/state), which
//     aggregates the pylons' reports
//     (docs/design/routing-state.md#cluster-aggregation) and applies
//     pending reservations (docs/design/routing-state.md#reservations:
//     made at dispatch on the chosen backend, dropped when that backend's
//     next report is applied). So input-work admission, the pick, the
//     timed waits and the set-once session classification are the hub's;
//     only the reaction differs: a wait schedules the next pass as an
//     event where the proxy sleeps, and a refusal or a pass with no choice
//     and no wait is a 503. The wake rule is the proxy's too: a waiting
//     request passes again at its wait's end or when the hub applies the
//     next report, whichever is first (docs/design/hub-request.md#waits).
//   - Engines are the mock engine's models: the KV prefix cache is
//     pkg/mockengine/kvcache itself (prompts rendered as the mock renders
//     chat, "role:content\n", with workload.UserText messages and
//     synthetic replies of OutputTokens·4 bytes, so prefixes chain exactly
//     like the real mock's), prefill is processor sharing at the cold and
//     cached rates (procShare, checked against
//     pkg/mockengine/prefill.Scheduler to the nanosecond), then the TTFT
//     base and one token per token delay, holding one of the engine's
//     slots from admission to the last token behind an unbounded FIFO.
//   - A cluster is pylons (the hub's backends) in front of one or more
//     engines each. A pylon picks the engine for each request as the live
//     pylon does (pkg/affinity by the affinity key, bounded by load, or
//     least outstanding), and reports one snapshot for all its engines
//     (phase counts, input sums and KV counters summed, their slots as
//     max_engine_concurrency, and the input TPS it learns as the live
//     pylon does: the running mean of its requests' prompt tokens over
//     slot-to-first-token time, seeded by --initial-input-tps, or that
//     seed pinned) every interval and after a change (a request arriving,
//     its response head, each output chunk, its end), no sooner than the
//     change gap; the hub applies a report half a transit RTT after it is
//     sent. Options.Warmup replays the workloads a live stack served
//     before, so the pylons start with the rate those taught them.
//   - The gateway sends the session's affinity key (a payload key of its
//     own for a request without a session id: a one-shot, or a turn of an
//     anonymous conversation), with last_cluster_affinity the last
//     cluster that answered one of the session's requests with a 2xx
//     (sessions named by prompt_cache_key, conversation or header only),
//     learned when the response headers arrive, and the prompt's summary
//     (pkg/prefixhash, from the same block hashes the engines' caches
//     key, in the gateway's 16-token geometry).
//   - For a route that reads prefixes (lb.Route.UsesPrefix) the hub keeps
//     the hub's own prefix index (hub/internal/prefixindex) on the
//     virtual clock, does what the proxy does with it
//     (hub/internal/proxy/prefix.go): looks the summary up once when the
//     request arrives, chooses the backend and the engine inside the
//     cluster by the prompt's anchor key when the request has no session
//     key, and marks the chosen cluster as a holder when its 2xx headers
//     reach the hub (after the prompt's prefill, as with the mock engine)
//     if the decision asked for it.
//   - The greedy-ttft arm replaces the hub and the pylons' choice: it sees
//     every engine's exact cached tokens, slots, queue and prefill backlog
//     and sends each request to the engine with the lowest predicted TTFT.
//     It is a baseline, not a bound; the bound on cache hits is the
//     workload's ceiling (WorkloadCeiling).
//
// A run reads no clock and draws randomness only from a stream seeded by
// Options.Seed, so the same workload, fleet and seed give the same report
// byte for byte.
package sim
