// Package estimate computes the gateway's token estimates
// (docs/design/sessions.md#token-estimate): x-input-tokens, x-token-estimate and the output reservation of the rate
// limiter. The gateway never tokenizes; these are byte-length heuristics
// that the backend's reported usage later corrects. Pure functions only.
package estimate
