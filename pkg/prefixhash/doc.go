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
// The package decides nothing about routing and holds no state.
package prefixhash
