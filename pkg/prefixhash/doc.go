// Package prefixhash owns the prompt fingerprint that content-prefix
// affinity routes on (docs/design/prefix-summary.md): the prompt layout (the
// bytes a chat, Responses or completions request's prompt renders to), the
// block chain hashing the mock engine's KV cache model uses (fixed-size
// blocks of estimated tokens, each hashed with the hash of the block before
// it), the compact Summary of a prompt the gateway sends to the hub, and
// that Summary's header encoding and parser.
//
// The gateway and the mock engine share this one implementation so that a
// prefix the gateway names is exactly a prefix the engine caches: the engine
// renders the layout into a buffer and cuts it with AppendBlocks, the
// gateway renders it straight into a Hasher, which keeps only what a
// Summary needs. Version changes whenever the layout, blocking or hashing
// does, so a hub can tell summaries made by another implementation apart.
//
// Each block is hashed with 64-bit XXH3 seeded with the previous block's
// hash: a fast non-cryptographic hash, because the gateway hashes every
// byte of every prompt, and SHA-256 (version 1) cost it up to twice as
// much as parsing the request body. A collision is never a correctness problem:
// in the hub it sends a request to a cluster believed to hold its prefix,
// which then prefills the prompt in full, as it would without affinity;
// in the mock engine it fakes a cache hit. Real engines key their KV
// blocks by their own hashes of the tokens and never see these. Two
// unrelated prompts collide with a chance of 2^-64. XXH3 does not resist
// chosen collisions, though, and the seed is public, so a client can make
// prompts whose hashes collide. With its own prompts it only steers its
// own requests, which sending the same prefix would do anyway. To collide
// with another tenant's prefix it has to know that prefix's bytes, and
// then it can at most make the hub believe some cluster holds that prefix,
// so that the tenant's next requests lose their cache affinity (a prefill,
// until the index learns where the prefix really is or forgets it). No
// prompt, reply or cache content crosses tenants either way.
//
// The package decides nothing about routing and holds no state.
package prefixhash
