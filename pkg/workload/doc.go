// Package workload is the workload file format shared by the load
// generator (bin/loadgen) and the routing simulator (bin/routing-sim): a
// seeded workload is generated once, written as JSON Lines, fingerprinted
// (SHA-256 of the file's bytes) and replayed byte-identically by every arm
// of a comparison, live or simulated.
//
// A file holds structure, not text: each request says which session and
// turn it is and how many new input and output tokens it has. Text is
// materialised deterministically from (seed, session, turn) by UserText, so
// a 120k-token prompt costs a line in the file, and the simulator can reason
// in tokens while the load generator sends real prompts whose byte length
// matches (the mock engine counts CharsPerToken bytes per token).
//
// Every name a workload carries comes from its seed and salt (NameTag), so
// two seeds share no session key and no prompt. Within one workload the
// prefix suites share text on purpose: a request may open with a named
// shared prefix (a system prompt, a document; PrefixText), and a keyless
// conversation (source none) is linked by its re-sent content alone.
// CacheCeiling says how much of a workload's prompt tokens any prefix
// cache could serve at all, in the mock engine's block model: the ceiling
// a router's cache hits are measured against.
package workload
