package headers

import (
	"net/http"
	"slices"
)

// Client -> gateway. The gateway reads these from untrusted callers, so
// StripInbound keeps them; they are validated, never trusted.
const (
	// RequestID is the request id. The gateway takes the client's value or
	// generates one and echoes it on the response (gateway.md §0.1); the hub
	// and pylon require it (hub.md §3.2 step 1, pylon.md §5.1 step 2), and
	// the mock engine uses it to seed jitter and classify pylon's own
	// traffic (pylon.md §7.3 steps 2 and 10).
	RequestID = "x-request-id"

	// MultiTurnSessionID carries the client's session id. The gateway reads
	// it as the third session source (gateway.md §2.1, validated per §2.2)
	// and echoes the session id back on responses (§2.4). It is never
	// forwarded raw to the hub (§6.4); see StripSessionIDs.
	MultiTurnSessionID = "x-multi-turn-session-id"

	// ClaudeCodeSessionID is the session header Claude Code sends on every
	// request. gateway.md §2.8 infers it as a later session source that is
	// hashed like the others and is never eligible for last-cluster
	// tracking (§7.3).
	ClaudeCodeSessionID = "x-claude-code-session-id"

	// NVCFTargetRegion is the caller's target region, read by the gateway
	// and sent to the hub, which forwards it without looking at it
	// (gateway.md §0.1 and §2.7, hub.md §7).
	NVCFTargetRegion = "x-nvcf-target-region"

	// GroqRegion is the legacy duplicate of NVCFTargetRegion, read as its
	// fallback and set to the same value (gateway.md §0.1 and §2.7);
	// gateway.md §9.1 lists it as safe to drop.
	GroqRegion = "x-groq-region"
)

// Gateway -> hub. The gateway derives every one of these itself and the hub
// trusts them without checking who sent them (hub.md §3.2 step 12), so
// StripInbound removes any client-supplied value. The hub forwards all of
// them to pylon except RoutingMethod and StargateLastClusterID.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// Model is the routed model id without the routing-key prefix
	// (gateway.md §1.2). Required text header (hub.md §3.2 step 3).
	Model = "x-model"

	// RoutingKey is the authorised routing key (function id) taken from the
	// body's model prefix (gateway.md §1.2, §2.7). Optional text header;
	// blank means unscoped (hub.md §3.2 step 3).
	RoutingKey = "x-routing-key"

	// RoutingMethod selects a load-balancing algorithm, or a routing
	// expression with parameters, per request (hub.md §3.2 step 4, §5.9).
	// The gateway sets it from the model spec (gateway.md §1.2); the hub
	// consumes it and never forwards it (hub.md §3.2 step 12).
	RoutingMethod = "x-routing-method"

	// InputTokens is the gateway's estimate of prompt tokens (gateway.md
	// §2.5). Required u64 at the hub (hub.md §3.2 step 2) and pylon
	// (pylon.md §5.1 step 2); it drives prefill and queue estimates.
	InputTokens = "x-input-tokens"

	// TokenEstimate is the gateway's token estimate: input tokens on chat,
	// input plus maximum output on Responses (gateway.md §2.5). The hub
	// forwards it without reading it (hub.md §7).
	TokenEstimate = "x-token-estimate"

	// CacheAffinityKey is the hashed session key mt:v1:<source>:<sha256>
	// (gateway.md §2.3). Optional text header at the hub (hub.md §3.2 step
	// 7); it also keys the mock engine's KV cache (pylon.md §7.4).
	CacheAffinityKey = "x-cache-affinity-key"

	// Priority is the request priority as a decimal u32; lower is more
	// urgent and absent means 0 at the hub (hub.md §3.2 step 5) but the
	// lowest engine priority (pylon.md §5.1 step 7). The gateway sets it
	// only from auth, never synthesises 0, and rejects a client-supplied
	// value with 400 (gateway.md §0.1, §2.7).
	Priority = "x-priority"

	// RequestSLOMs is the request's latency SLO in ms (u64). Wait-and-widen
	// interpolates its queue-time bound from floor to ceiling as
	// elapsed/SLO grows (hub.md §5.5, gateway.md §2.6).
	RequestSLOMs = "x-request-slo-ms"

	// MaxWaitMs is the routing wait budget in ms (u64) for temporarily
	// infeasible routing, capped at 60 s by the hub (hub.md §3.3, §5.7;
	// gateway.md §2.6).
	MaxWaitMs = "x-max-wait-ms"

	// StargateMaxWaitMs is the hub's retry budget in ms from request start
	// (u64; 0 disables retries). The gateway derives it from the remaining
	// deadline (hub.md §3.2 step 10, §7). This is the default of the hub's
	// --proxy-retry-budget-header flag; it is independent of MaxWaitMs
	// (hub.md §11).
	StargateMaxWaitMs = "x-stargate-max-wait-ms"

	// StargateLastClusterID is the session's last serving cluster, looked
	// up by the gateway (gateway.md §7.6). The hub consumes it and never
	// forwards it (hub.md §10.2); blank means no hint.
	StargateLastClusterID = "x-stargate-last-cluster-id"
)

// Hub -> pylon -> engine request headers.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// StargateExpectedQueueMs is the hub's queue estimate for the chosen
	// cluster in ms (u64), omitted when undefined (hub.md §3.4 step 4, §4).
	// Pylon compares it with its local estimate for queue admission and
	// removes it before the engine (pylon.md §4, §5.1 step 7).
	StargateExpectedQueueMs = "x-stargate-expected-queue-ms"

	// OutputTokens is the requested output length (u64, at least 1) that the
	// load generator sends and the mock engine honours (hub.md §9.1,
	// pylon.md §7.3 step 6). Pylon passes it through unchanged.
	OutputTokens = "x-output-tokens"

	// DynamoRequestPriority is the engine priority
	// max(0, ceiling - x-priority). Pylon is its only writer and strips any
	// inbound value (hub.md §6.7, pylon.md §5.1 step 7).
	DynamoRequestPriority = "x-dynamo-request-priority"

	// DynamoRequestStrictPriority is always 0, written only by pylon
	// (hub.md §6.7, pylon.md §5.1 step 7).
	DynamoRequestStrictPriority = "x-dynamo-request-strict-priority"
)

// Engine -> pylon -> hub response headers: the retry signal. The hub strips
// all of them (and StargateErrorCode) from upstream responses (hub.md §3.2
// step 12, §3.4).
const (
	// StargateUpstreamRetryable is set to true by an engine that marks its
	// 429/503 as retryable; pylon converts it into StargateRetryable
	// (pylon.md §5.1 step 9). This is the default of pylon's
	// --pylon-upstream-retry-header flag.
	StargateUpstreamRetryable = "x-stargate-upstream-retryable"

	// StargateRetryable is pylon's retry signal to the hub: true
	// (case-insensitive) allows a retry, an explicit false always blocks
	// one (hub.md §3.4 step 8).
	StargateRetryable = "x-stargate-retryable"

	// StargateRetryReason names why pylon's response is retryable, for
	// example ReasonQueueEstimateMismatch (pylon.md §4, §5.1 step 9).
	StargateRetryReason = "x-stargate-retry-reason"

	// StargateRetryAfterMs is pylon's optional retry hint in ms (u64). The
	// hub never honours it, only strips it (hub.md §3.4).
	StargateRetryAfterMs = "x-stargate-retry-after-ms"
)

// Hub -> gateway response headers. They are internal: the gateway reads
// StargateClusterID for last-cluster tracking and StripInternalResponse
// removes all of them before a response reaches a client (gateway.md §3.3,
// §8, hub.md §7).
const (
	// StargateClusterID is the cluster of the backend that served the
	// request (hub.md §3.4 step 9). The gateway stores it as the session's
	// last cluster when 2xx headers arrive (gateway.md §7.6 step 3).
	StargateClusterID = "x-stargate-cluster-id"

	// InferenceServerID is the backend (pylon registration) that served the
	// request (hub.md §3.4 step 9). Pylon also sends it on the WebTransport
	// tunnel handshake (pylon.md §1.6).
	InferenceServerID = "x-inference-server-id"

	// InferenceServerURL is the registered URL of the serving backend
	// (hub.md §3.4 step 9).
	InferenceServerURL = "x-inference-server-url"

	// StargateErrorCode is the class of an error the hub generated itself,
	// for example ErrorCodeNoEligibleCandidates (hub.md §3.6, §3.7, §5.9).
	StargateErrorCode = "x-stargate-error-code"
)

// Mock engine -> client response headers. They describe the modelled KV
// cache (pylon.md §7.4); pylon forwards them (pylon.md §5.1 step 9) and the
// load generator computes cache reuse from them (hub.md §9.1). They are not
// internal, so StripInternalResponse keeps them.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// KVCacheHit is true when any input token was served from the cache.
	KVCacheHit = "x-kv-cache-hit"

	// KVCacheReusedInputTokens is the number of input tokens served from
	// the cache: min(entry tokens, input tokens).
	KVCacheReusedInputTokens = "x-kv-cache-reused-input-tokens"

	// KVCacheHitTokens carries the same number as KVCacheReusedInputTokens
	// under the name our own tools read (issue 2's contract for the mock);
	// the reference name stays for clients written against it.
	KVCacheHitTokens = "x-kv-cache-hit-tokens"

	// MockEngineID names the mock engine instance that answered (its
	// --engine-id). Through the gateway, which hides the hub's
	// x-stargate-cluster-id from clients, it is how the demo and the load
	// generator see where a request ran. Real engines never send it.
	MockEngineID = "x-mock-engine-id"

	// KVCacheUncachedInputTokens is the number of input tokens that had to
	// be prefilled.
	KVCacheUncachedInputTokens = "x-kv-cache-uncached-input-tokens"

	// KVCacheEvictedEntries is the number of cache entries this request's
	// commit evicted.
	KVCacheEvictedEntries = "x-kv-cache-evicted-entries"

	// KVCacheEvictedTokens is the number of tokens this request's commit
	// evicted.
	KVCacheEvictedTokens = "x-kv-cache-evicted-tokens"
)

// Gateway -> client rate-limit response headers (gateway.md §4.5). The
// gateway owns them; nothing upstream sets them.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// RateLimitLimitTokens is the token limit of the reported dimension.
	RateLimitLimitTokens = "x-ratelimit-limit-tokens"

	// RateLimitRemainingTokens is the tokens left in the reported dimension.
	RateLimitRemainingTokens = "x-ratelimit-remaining-tokens"

	// RateLimitResetTokens is the time until the token bucket is full again,
	// as a Go duration string truncated to ms (minimum 1ms).
	RateLimitResetTokens = "x-ratelimit-reset-tokens"

	// RateLimitLimitRequests is the request limit, sent only when request
	// dimensions exist.
	RateLimitLimitRequests = "x-ratelimit-limit-requests"

	// RateLimitRemainingRequests is the requests left, sent only when
	// request dimensions exist.
	RateLimitRemainingRequests = "x-ratelimit-remaining-requests"

	// RateLimitResetRequests is the time until the request bucket is full
	// again, sent only when request dimensions exist.
	RateLimitResetRequests = "x-ratelimit-reset-requests"

	// ShouldRetry is false when Retry-After exceeds 60 s, telling OpenAI
	// SDKs not to retry.
	ShouldRetry = "x-should-retry"
)

// Control plane and tunnel. These never cross the gateway.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// StargateAuthToken authenticates pylon on the WebTransport reverse
	// tunnel handshake (hub.md §3.7, pylon.md §1.6).
	StargateAuthToken = "x-stargate-auth-token"

	// StargateRegistrationHeartbeatMs is gRPC metadata on
	// RegisterInferenceServer carrying pylon's heartbeat period in ms; the
	// hub derives the registration idle timeout from it (hub.md §6.1,
	// pylon.md §1.4).
	StargateRegistrationHeartbeatMs = "x-stargate-registration-heartbeat-ms"

	// TunnelMethod carries the request method in the raw-QUIC tunnel's
	// header map (pylon.md §1.6); pylon strips it before the engine
	// (pylon.md §5.1 step 7).
	TunnelMethod = "x-method"

	// TunnelPath carries the request path and query in the raw-QUIC
	// tunnel's header map (pylon.md §1.6).
	TunnelPath = "x-path"

	// TunnelStatus carries the response status in the raw-QUIC tunnel's
	// header map (pylon.md §1.6, §5.1 step 9).
	TunnelStatus = "x-status"
)

// Name prefixes matched case-insensitively by the strip functions.
const (
	// StargatePrefix starts every hub-internal header. A client may never
	// set one (architecture.md, hub.md §7) and the gateway exposes none of
	// them to clients (gateway.md §3.3, §8).
	StargatePrefix = "x-stargate-"

	// InferenceServerPrefix starts the hub's backend-identity response
	// headers (hub.md §3.4 step 9), which gateway.md §3.3 and §8 call a
	// leak when they reach clients.
	InferenceServerPrefix = "x-inference-server-"

	// KVCachePrefix starts the mock engine's KV-cache response headers
	// (pylon.md §7.4).
	KVCachePrefix = "x-kv-cache-"

	// RateLimitPrefix starts the gateway's rate-limit response headers
	// (gateway.md §4.5).
	RateLimitPrefix = "x-ratelimit-"
)

// Header values shared across tiers, compared byte for byte.
const (
	// ReasonQueueEstimateMismatch is pylon's StargateRetryReason when its
	// local queue estimate exceeds the hub's; the hub retries a sibling
	// backend in the same cluster (pylon.md §4, hub.md §3.4 step 8).
	ReasonQueueEstimateMismatch = "queue_estimate_mismatch"

	// ReasonUpstreamAdmissionRejected is pylon's StargateRetryReason for an
	// engine 429/503 marked retryable (pylon.md §5.1 step 9).
	ReasonUpstreamAdmissionRejected = "upstream_admission_rejected"

	// ReasonModelGenerationUnavailable is pylon's StargateRetryReason for a
	// request to an unknown or unpublished model (pylon.md §1.3).
	ReasonModelGenerationUnavailable = "model_generation_unavailable"

	// ReasonLocalConnectFailure is pylon's StargateRetryReason when it cannot
	// connect to its engine (pylon.md §5.1 step 8).
	ReasonLocalConnectFailure = "local_connect_failure"

	// ErrorCodeNoEligibleCandidates is the hub's StargateErrorCode on a 404
	// for a target that was never advertised (hub.md §3.3 step D). The
	// gateway retries it only when a discovery may have raced (hub.md §7).
	ErrorCodeNoEligibleCandidates = "no_eligible_candidates"

	// ErrorCodeInputWorkLimitExceeded is the hub's StargateErrorCode on an
	// input-work admission 503, for both admission reasons (hub.md §3.6,
	// §5.10).
	ErrorCodeInputWorkLimitExceeded = "input_work_limit_exceeded"

	// ErrorCodeOverloaded is the hub's StargateErrorCode on every
	// pre-upstream admission 503 in the later upstream base (hub.md §3.6
	// [L]).
	ErrorCodeOverloaded = "overloaded_error"
)

// known lists every header name this package defines, in the order the
// constant groups appear.
var known = [...]string{
	RequestID, MultiTurnSessionID, ClaudeCodeSessionID, NVCFTargetRegion, GroqRegion,
	Model, RoutingKey, RoutingMethod, InputTokens, TokenEstimate, CacheAffinityKey,
	Priority, RequestSLOMs, MaxWaitMs, StargateMaxWaitMs, StargateLastClusterID,
	StargateExpectedQueueMs, OutputTokens, DynamoRequestPriority, DynamoRequestStrictPriority,
	StargateUpstreamRetryable, StargateRetryable, StargateRetryReason, StargateRetryAfterMs,
	StargateClusterID, InferenceServerID, InferenceServerURL, StargateErrorCode,
	KVCacheHit, KVCacheHitTokens, KVCacheReusedInputTokens, KVCacheUncachedInputTokens,
	KVCacheEvictedEntries, KVCacheEvictedTokens, MockEngineID,
	RateLimitLimitTokens, RateLimitRemainingTokens, RateLimitResetTokens,
	RateLimitLimitRequests, RateLimitRemainingRequests, RateLimitResetRequests, ShouldRetry,
	StargateAuthToken, StargateRegistrationHeartbeatMs, TunnelMethod, TunnelPath, TunnelStatus,
}

// maxNameLen bounds the stack buffer used to lower-case a header key before
// a table lookup; no known name is longer (TestKnownNamesFitBuffer).
const maxNameLen = 64

// canonical maps each known name to its http.CanonicalHeaderKey form. It is
// built once and only read afterwards: looking a lower-case constant up here
// is what lets the Get helpers avoid the allocation that canonicalising
// "x-input-tokens" into "X-Input-Tokens" costs on every call.
var canonical = func() map[string]string {
	m := make(map[string]string, len(known))
	for _, n := range known {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}()

// Known returns every header name the package defines, lower-case and
// sorted. The slice is a fresh copy the caller may modify.
func Known() []string {
	out := slices.Clone(known[:])
	slices.Sort(out)
	return out
}

// IsKnown reports whether name, in any letter case, is a header name the
// package defines.
func IsKnown(name string) bool {
	var buf [maxNameLen]byte
	lower, ok := lowerASCII(&buf, name)
	if !ok {
		return false
	}
	_, found := canonical[string(lower)]
	return found
}

// canonicalKey returns the key under which net/http stores name, without
// allocating for known names.
func canonicalKey(name string) string {
	if c, ok := canonical[name]; ok {
		return c
	}
	return http.CanonicalHeaderKey(name)
}

// lowerASCII writes the ASCII lower-case form of s into buf. It reports
// false when s does not fit, which no known name does.
func lowerASCII(buf *[maxNameLen]byte, s string) ([]byte, bool) {
	if len(s) > len(buf) {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(s)], true
}

// hasPrefixFold reports whether s starts with the lower-case ASCII prefix,
// ignoring the letter case of s.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// HopByHop lists the connection-scoped headers a relay never forwards in
// either direction (RFC 9110 §7.6.1, plus the legacy Proxy-Connection and
// Keep-Alive), in canonical form.
var HopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Te", "Trailer", "Upgrade"}
