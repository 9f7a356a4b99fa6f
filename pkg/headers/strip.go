package headers

import "net/http"

// inboundExact lists the names, besides the StargatePrefix and
// InferenceServerPrefix families, that StripInbound removes. Each is one the
// gateway derives itself and a later tier trusts
// (docs/design/headers.md#who-strips-what):
//   - Model, RoutingKey, RoutingMethod: from the body's model and the
//     model's config;
//   - InputTokens, TokenEstimate: the gateway's estimate;
//   - CacheAffinityKey: the hashed session key; a raw client value would
//     let a caller pick its own affinity, and so the cache of another
//     tenant's session;
//   - Priority: only the gateway may set it; 0 is the most urgent value;
//   - RequestSLOMs, MaxWaitMs: they decide how long the hub holds the
//     request, which is the operator's choice per model, not the caller's;
//   - DynamoRequestPriority, DynamoRequestStrictPriority: engine priority,
//     written only by pylon;
//   - TunnelMethod, TunnelPath: upstream Stargate's raw-QUIC framing
//     fields, which share the request header map, so a client copy could
//     collide with them.
var inboundExact = [...]string{
	Model, RoutingKey, RoutingMethod, InputTokens, TokenEstimate, CacheAffinityKey,
	Priority, RequestSLOMs, MaxWaitMs, DynamoRequestPriority, DynamoRequestStrictPriority,
	TunnelMethod, TunnelPath,
}

// inboundByLen indexes inboundExact by name length. Comparing a key only
// with the few names of its length, case-folding as it goes and stopping at
// the first differing byte, keeps the per-header check to a handful of byte
// compares with no lower-cased copy and no hashing: the typical client
// header (X-Stainless-*, Accept, ...) fails on length or within its first
// bytes. It is built once and only read afterwards.
var inboundByLen = func() (t [maxNameLen + 1][]string) {
	for _, n := range inboundExact {
		t[len(n)] = append(t[len(n)], n)
	}
	return t
}()

// InboundReserved reports whether a client entering the system at the
// gateway must not be able to set the header name (any letter case): every
// x-stargate-* and x-inference-server-* header, and the hub-facing headers
// the gateway derives itself. It is false for the headers the gateway reads
// from clients (x-request-id, x-multi-turn-session-id,
// x-claude-code-session-id, the region headers), for x-output-tokens, which
// only sizes the mock engine's output and steers no routing, and for every
// non-x-* header such as Authorization.
func InboundReserved(name string) bool {
	if !hasPrefixFold(name, "x-") {
		return false
	}
	if hasPrefixFold(name, StargatePrefix) || hasPrefixFold(name, InferenceServerPrefix) {
		return true
	}
	if len(name) > maxNameLen {
		return false
	}
	for _, n := range inboundByLen[len(name)] {
		if hasPrefixFold(name, n) {
			return true
		}
	}
	return false
}

// StripInbound removes from h every header for which InboundReserved is
// true, matching keys in any letter case so a key stored without
// canonicalisation cannot slip through. The hub acts on these headers
// without checking their sender, so a relay that forwards a copy of the
// client's headers must call this on every request, on all paths, whether
// or not a feature that sets the header is enabled (a spoofed hint must not
// reach the hub just because the feature that would overwrite it is off),
// and then set its own values. With httputil.ReverseProxy that is inside
// Rewrite on the outbound header, which runs after hop-by-hop removal.
//
// It keeps the headers the gateway reads from clients, so it may also run
// on the inbound request before the handler derives the session. The
// gateway's separate 400 for a client-supplied x-priority must be checked
// before this removes the header.
func StripInbound(h http.Header) {
	for k := range h {
		if InboundReserved(k) {
			delete(h, k)
		}
	}
}

// StripSessionIDs removes the raw client session ids, x-multi-turn-session-id
// and x-claude-code-session-id, in any letter case. The gateway reads them to
// derive the session and then sends only the hashed x-cache-affinity-key,
// since a raw session id carries whatever the client put in it, so it calls
// this on the outbound copy after session derivation. StripInbound leaves
// them alone because running it first would hide the session from the
// gateway itself.
func StripSessionIDs(h http.Header) {
	for k := range h {
		if equalFoldASCII(k, MultiTurnSessionID) || equalFoldASCII(k, ClaudeCodeSessionID) {
			delete(h, k)
		}
	}
}

// InternalResponse reports whether the response header name (any letter
// case) is internal to the tiers behind the gateway: every x-stargate-*
// header (the serving cluster, error codes, retry metadata) and every
// x-inference-server-* header (the serving backend), which would expose the
// serving topology to clients, plus upstream Stargate's raw-QUIC x-status
// framing field. No x-stargate-* header is meant for clients. It is false
// for the mock engine's x-kv-cache-* headers, which the load generator
// reads, and for the gateway's own x-request-id, x-multi-turn-session-id
// and x-ratelimit-* headers.
func InternalResponse(name string) bool {
	return hasPrefixFold(name, StargatePrefix) ||
		hasPrefixFold(name, InferenceServerPrefix) ||
		equalFoldASCII(name, TunnelStatus)
}

// StripInternalResponse removes from h every header for which
// InternalResponse is true, in any letter case. The gateway calls it on the
// hub's response headers before copying them to the client, after it has
// read x-stargate-cluster-id for last-cluster tracking. It never touches a
// header the gateway itself sets, so it is also safe on the client
// response's header map.
func StripInternalResponse(h http.Header) {
	for k := range h {
		if InternalResponse(k) {
			delete(h, k)
		}
	}
}
