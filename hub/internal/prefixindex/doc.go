// Package prefixindex is the hub's bounded memory of which clusters hold
// which prompt prefixes, so that a request without a session can be sent
// where its prompt is already cached. It answers one question, "which
// clusters hold how much of this prompt?" (Match), from what the proxy
// tells it: Mark when a response's headers arrive from a cluster,
// RemoveCluster when a cluster leaves. It does not route, does not parse
// headers and exports no metrics (Stats feeds the caller's); the
// prefix-aware algorithms read its answer from routing.Request.Prefix.
//
// A prompt arrives as a prefixhash.Summary: the chain hashes of its blocks
// at every Stride-th block plus the last. A chain hash covers every byte
// before it, so one checkpoint hash names a whole prefix, and the prefixes
// of all prompts form a tree whose nodes are checkpoints and whose parent
// links go to the previous checkpoint. The index stores that tree
// flattened into a hash map keyed by the checkpoint hash mixed with the
// model (and the summary's block size and version), each node holding its
// holders: a cluster and when it was last marked. Matching a prompt is
// one lookup per checkpoint, never a walk, so no parent link is stored.
//
// Memory has a hard bound, Config.MaxBytes, and the bound is what the
// index takes when full. Nodes are split in 16 shards by key; each shard
// keeps at most MaxNodes/16 of them in a pointer-free arena with room for
// MaxHoldersPerNode one-word holders reserved per node, and finds them
// through its own open-addressing table (a Go map's tombstones grow it
// under constant eviction). A full shard evicts its least recently marked
// node. Mark refreshes a prompt's checkpoints from the longest to the
// shortest, so the heads many prompts share stay the most recent and the
// tails of abandoned conversations go first. A full node replaces the
// holder marked longest ago. A holder older than Config.TTL counts as
// absent in Match at once; Sweep, which the owner calls from a ticker,
// frees the nodes left with no live holder.
//
// Clusters are stored as 16-bit slots. RemoveCluster drops the slot from
// every node before freeing it, so a cluster that later gets the same
// slot never inherits the departed cluster's prefixes.
//
// Match takes read locks only and does not allocate when its destination
// has room; Mark takes the write lock of each shard it touches once. Time
// comes from the injected clock. docs/design/prefix-index.md has the
// design, the memory figures and the benchmark numbers.
package prefixindex
