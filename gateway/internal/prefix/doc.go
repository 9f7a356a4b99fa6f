// Package prefix computes the prompt prefix summary the gateway sends the
// hub as x-stargate-prompt-prefix (docs/design/prefix-summary.md): it
// renders a parsed request's prompt in prefixhash's layout, the bytes the
// mock engine's KV cache model hashes, straight into a pooled
// prefixhash.Hasher, and encodes the Summary.
//
// It decides nothing about routing and never fails a request: a prompt it
// cannot render exactly as the engine would (a body the engine refuses, an
// embeddings request, a prompt shorter than one block) simply has no
// summary, and the hub then routes without one.
package prefix
