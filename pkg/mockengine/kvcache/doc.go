// Package kvcache models the KV prefix cache of the mock LLM engine: it decides
// how many prompt tokens a request finds already cached, by content alone, the
// way vLLM's automatic prefix caching does, and it must not look at headers,
// session keys or any routing hint.
//
// Prompt text is cut into fixed-size blocks of estimated tokens (no real
// tokenizer, so the mock stays dependency-free and cheap). Each full block is
// named by a chain hash over its bytes and the hash of the block before it,
// so a block only matches when its whole prefix matches, exactly like vLLM's
// block hashes. A trailing partial block is never cached.
//
// The request lifecycle mirrors an engine's: Cache.Lookup at admission pins
// the longest cached prefix, Lease.Commit after the modelled prefill publishes
// the rest of the prompt, and Lease.Release at the end unpins everything and
// appends the generated output, so the next turn of a conversation, which
// re-sends that output, hits it. Capacity is enforced by evicting the least
// recently used unpinned leaf block.
package kvcache
