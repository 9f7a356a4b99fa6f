package headers

import "net/http"

// inboundExact lists the names, besides the StargatePrefix and
// InferenceServerPrefix families, that StripInbound removes. Each is one the
// gateway derives itself and a later tier trusts:
//   - Model, RoutingKey, RoutingMethod: from the body's model and the model
//     spec (gateway.md §1.2, §2.7);
//   - InputTokens, TokenEstimate: the gateway's estimate (gateway.md §2.5);
//   - CacheAffinityKey: the hashed session key (gateway.md §2.3); a raw
//     client value would let a caller pick its own affinity (gateway.md §8);
//   - Priority: from auth only; the inbound value is always deleted
//     (gateway.md §2.7, §3.3);
//   - RequestSLOMs, MaxWaitMs: stripped from client input (gateway.md §2.6,
//     §8);
//   - DynamoRequestPriority, DynamoRequestStrictPriority: engine priority,
//     written only by pylon (hub.md §6.7);
//   - TunnelMethod, TunnelPath: raw-QUIC framing fields that share the
//     request header map (pylon.md §1.6), so a client copy could collide
//     with them.
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
// only sizes the mock engine's output (pylon.md §7.3 step 6) and steers no
// routing, and for every non-x-* header such as Authorization.
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
// canonicalisation cannot slip through. The hub trusts these headers without
// checking their sender (hub.md §3.2 step 12), so the gateway must call this
// on every request it forwards, on all paths, whether or not a feature that
// sets the header is enabled (gateway.md §7.6 step 1), and then set its own
// values. With httputil.ReverseProxy that is inside Rewrite on the outbound
// header, which runs after hop-by-hop removal (style guide A3).
//
// It keeps the headers the gateway reads from clients, so it may also run
// on the inbound request before the handler derives the session. The
// gateway's separate 400 for a client-supplied x-priority (gateway.md §0.1)
// must be checked before this removes the header.
func StripInbound(h http.Header) {
	for k := range h {
		if InboundReserved(k) {
			delete(h, k)
		}
	}
}

// StripSessionIDs removes the raw client session ids, x-multi-turn-session-id
// and x-claude-code-session-id, in any letter case. The gateway reads them to
// derive the session and then sends only the hashed x-cache-affinity-key
// (gateway.md §2.3, §6.4), so it calls this on the outbound copy after
// session derivation. StripInbound leaves them alone because running it
// first would hide the session from the gateway itself.
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
// x-inference-server-* header (the serving backend), which gateway.md §3.3,
// §6.4 and §8 call a leak when they reach clients, plus the raw-QUIC
// x-status framing field (pylon.md §1.6). The specs expose none of the
// x-stargate-* family to clients. It is false for the mock engine's
// x-kv-cache-* headers, which the load generator reads (hub.md §9.1), and
// for the gateway's own x-request-id, x-multi-turn-session-id and
// x-ratelimit-* headers.
func InternalResponse(name string) bool {
	return hasPrefixFold(name, StargatePrefix) ||
		hasPrefixFold(name, InferenceServerPrefix) ||
		equalFoldASCII(name, TunnelStatus)
}

// StripInternalResponse removes from h every header for which
// InternalResponse is true, in any letter case. The gateway calls it on the
// hub's response headers before copying them to the client, after it has
// read x-stargate-cluster-id for last-cluster tracking (gateway.md §7.6 step
// 3) and x-stargate-error-code for its error mapping. It never touches a
// header the gateway itself sets, so it is also safe on the client
// response's header map.
func StripInternalResponse(h http.Header) {
	for k := range h {
		if InternalResponse(k) {
			delete(h, k)
		}
	}
}
