// Package mockengine is an OpenAI-compatible LLM engine whose costs are
// modelled rather than computed, so routing decisions change measured
// outcomes on one machine.
//
// It owns the HTTP surface (chat, legacy completions and Responses, streaming
// and not, embeddings, /v1/models, /health, vLLM-named metrics, the NDJSON
// engine stats stream, /kv-cache/stats and /test-control) and the request
// lifecycle: admission to a bounded number of running slots with a bounded
// FIFO behind them (429 beyond), a content-addressed KV prefix cache (package
// kvcache) that pins a running request's blocks and appends its output for
// the next turn, an instance-wide processor-sharing prefill (package
// prefill), then a per-token decode. Timing comes from an injected clock and
// every modelled duration is divided by the time scale. Test control can
// also make it fail as real engines do (5xx answers, hangs, connections
// dropped mid-stream, poisoned statistics), for the fault-injection suite.
// See docs/mock-engine.md.
package mockengine
