// Package engineproxy is the pylon's data plane: it serves every request the
// hub sends over the tunnel, validates it (headers, published model, JSON
// body, stream:true), applies the local queue admission check against the
// hub's x-stargate-expected-queue-ms, forwards it to an engine over plain
// HTTP, maps the engine's retry signals, and streams the response back as
// its SSE events complete (all the events one read finishes, in one write
// and one flush) while feeding the request's observation event by event.
// The steps and their order are in docs/pylon.md#request-path; the
// admission rule is in docs/design/statistics.md#queue-admission.
//
// A response it must cut short (an SSE timeout, an oversized event, a
// broken upstream body, or a send error after the engine connection was
// made) is aborted with http.ErrAbortHandler, so the hub sees a reset
// stream rather than a truncated body that looks complete.
//
// Several engines serving the same models may stand behind one Proxy
// (Config.UpstreamBaseURLs): with engine affinity on (the default), a
// request with an x-cache-affinity-key goes to the engine its key prefers
// by rendezvous hashing (pkg/affinity) while that engine is up, below its
// share of --max-engine-concurrency and within the load bound, so a
// session's turns find their KV cache; any other request goes to the
// engine with the fewest requests in flight (ties round robin). An
// attempt that fails before a response head marks its engine down for a
// backoff (1 s doubling to 30 s, reset by an answer) and is retried once
// on another eligible engine; the /health probe answers from the first
// healthy engine.
//
// Requests go to the engine through the configured Client's transport, as
// from a reverse proxy: an engine's redirect is relayed to the hub, not
// followed. The request path avoids per-request copies the profile showed
// as the pylon's own garbage: the hub's request head is stripped in place
// and becomes the engine request's head, the engine's response head is
// passed on with its values shared, the engine's URL is parsed once, and
// bodies above 4 KiB are read into pooled buffers that return to their
// pool only once the transport has closed every reader of them.
//
// It owns no statistics: observations go to a Tracker (the stats collector)
// declared here, where it is consumed.
package engineproxy
