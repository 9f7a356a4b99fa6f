package headers

import (
	"net/http"
	"slices"
)

// Client -> gateway. The gateway reads these from untrusted callers, so
// StripInbound keeps them; they are validated, never trusted
// (docs/design/headers.md#client-facing-headers).
const (
	// RequestID is the request id. The gateway takes the client's value or
	// generates one and echoes it on every response; the hub and pylon
	// require it, and the mock engine uses it as its response id, to seed
	// its output and jitter, and to tell pylon's own traffic (calibration-
	// and canary- ids) from client traffic.
	RequestID = "x-request-id"

	// MultiTurnSessionID carries the client's session id. The gateway reads
	// it as a session source after the body's own ids, validates it, and
	// echoes the session id back on responses so the client can send it
	// again. It is never forwarded raw to the hub, only hashed into
	// CacheAffinityKey; see StripSessionIDs.
	MultiTurnSessionID = "x-multi-turn-session-id"

	// ClaudeCodeSessionID is the session header Claude Code sends on every
	// request. The gateway does not read it yet (it has no Anthropic
	// route); it is named so the strip lists treat it as a raw session id,
	// which must never leave the gateway unhashed.
	ClaudeCodeSessionID = "x-claude-code-session-id"

	// NVCFTargetRegion is the caller's target region, a name inherited from
	// upstream Stargate's gateway, which sent it to the hub for the hub to forward
	// unexamined. Nothing here routes by region; the name is kept so clients
	// that send it keep working.
	NVCFTargetRegion = "x-nvcf-target-region"

	// GroqRegion is the legacy duplicate of NVCFTargetRegion, which the
	// upstream gateway read as its fallback and set to the same value. Kept,
	// like NVCFTargetRegion, only for client compatibility.
	GroqRegion = "x-groq-region"
)

// Gateway -> hub. The gateway derives every one of these itself and the hub
// acts on them without judging who sent them, so StripInbound removes any
// client-supplied value (docs/design/headers.md#gateway-to-hub). The hub
// forwards all of them to pylon except RoutingMethod and
// StargateLastClusterID, which it consumes.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// Model is the routed model id without the routing-key prefix.
	// Required text header at the hub and at pylon.
	Model = "x-model"

	// RoutingKey is the authorised routing key (function id) taken from the
	// body's model prefix. Optional text header; blank means unscoped.
	RoutingKey = "x-routing-key"

	// RoutingMethod selects a load-balancing algorithm, or a routing
	// expression with parameters, per request. The gateway sets it from the
	// model's config; the hub consumes it and never forwards it.
	RoutingMethod = "x-routing-method"

	// InputTokens is the gateway's estimate of prompt tokens
	// (docs/design/sessions.md#token-estimate). Required u64 at the hub and
	// pylon; it drives prefill and queue estimates.
	InputTokens = "x-input-tokens"

	// TokenEstimate is the gateway's token estimate: input tokens on chat,
	// input plus maximum output on Responses. The hub forwards it without
	// reading it; it is kept because upstream Stargate's gateway sent it.
	TokenEstimate = "x-token-estimate"

	// CacheAffinityKey is the hashed session key mt:v1:<source>:<sha256>
	// (docs/design/sessions.md#affinity-key). Optional text header at the
	// hub, required only when the model's config sets
	// require_cache_affinity_key.
	CacheAffinityKey = "x-cache-affinity-key"

	// Priority is the request priority as a decimal u32; lower is more
	// urgent and absent means 0 at the hub and at pylon. A client may never
	// send it: the gateway refuses it with 400, since 0 is the most urgent
	// value and a caller setting it would jump every queue.
	Priority = "x-priority"

	// RequestSLOMs is the request's latency SLO in ms (u64). Wait-and-widen
	// interpolates its queue-time bound from floor to ceiling as
	// elapsed/SLO grows (docs/design/algorithms.md#wait-and-widen).
	RequestSLOMs = "x-request-slo-ms"

	// MaxWaitMs is the routing wait budget in ms (u64) for temporarily
	// infeasible routing, capped at 60 s by the hub
	// (docs/design/hub-request.md#waits).
	MaxWaitMs = "x-max-wait-ms"

	// StargateMaxWaitMs is the hub's retry budget in ms from request start
	// (u64; 0 disables retries but not routing waits). It is the default of
	// the hub's --proxy-retry-budget-header flag and independent of
	// MaxWaitMs: one bounds retries after an upstream answered, the other
	// waiting before one was chosen (docs/design/hub-request.md#retries).
	StargateMaxWaitMs = "x-stargate-max-wait-ms"

	// StargateLastClusterID is the session's last serving cluster, looked
	// up by the gateway (docs/design/sessions.md#last-cluster-tracking). The
	// hub consumes it and never forwards it; blank means no hint.
	StargateLastClusterID = "x-stargate-last-cluster-id"
)

// Hub -> pylon -> engine request headers
// (docs/design/headers.md#hub-to-pylon).
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// StargateExpectedQueueMs is the hub's queue estimate for the chosen
	// cluster in ms (u64), taken before this request's reservation and
	// omitted when undefined. Pylon compares it with its local estimate for
	// queue admission (docs/design/statistics.md#queue-admission) and
	// removes it before the engine.
	StargateExpectedQueueMs = "x-stargate-expected-queue-ms"

	// OutputTokens is the requested output length (u64, at least 1) that the
	// load generator sends and the mock engine honours. Every tier passes
	// it through unchanged; it steers no routing.
	OutputTokens = "x-output-tokens"

	// DynamoRequestPriority is the engine priority
	// max(0, ceiling - x-priority). Pylon is its only writer and strips any
	// inbound value, so the engine sees the priority the hub ranked. The
	// name is the one Dynamo engines read.
	DynamoRequestPriority = "x-dynamo-request-priority"

	// DynamoRequestStrictPriority is always 0, written only by pylon.
	DynamoRequestStrictPriority = "x-dynamo-request-strict-priority"
)

// Engine -> pylon -> hub response headers: the retry signal
// (docs/design/headers.md#retry-signals). The hub strips all of them (and
// StargateErrorCode) from upstream responses, so a signal is only ever read
// by the next tier up.
const (
	// StargateUpstreamRetryable is set to true by an engine that marks its
	// 429/503 as retryable; pylon converts it into StargateRetryable. This
	// is the default of pylon's --pylon-upstream-retry-header flag.
	StargateUpstreamRetryable = "x-stargate-upstream-retryable"

	// StargateRetryable is pylon's retry signal to the hub: true
	// (case-insensitive) allows a retry, an explicit false always blocks
	// one.
	StargateRetryable = "x-stargate-retryable"

	// StargateRetryReason names why pylon's response is retryable, for
	// example ReasonQueueEstimateMismatch.
	StargateRetryReason = "x-stargate-retry-reason"

	// StargateRetryAfterMs is pylon's optional retry hint in ms (u64). The
	// hub never honours it, only strips it: its retries go to another
	// backend, which the hint says nothing about.
	StargateRetryAfterMs = "x-stargate-retry-after-ms"
)

// Hub -> gateway response headers. They are internal: the gateway reads
// StargateClusterID for last-cluster tracking and StargateSessionState for
// its session metrics, and removes all of them (see InternalResponse)
// before a response reaches a client, since they expose the serving
// topology and the hub's routing (docs/design/headers.md#hub-to-gateway).
const (
	// StargateClusterID is the cluster of the backend that served the
	// request, set on every relayed answer. The gateway stores it as the
	// session's last cluster when 2xx headers arrive.
	StargateClusterID = "x-stargate-cluster-id"

	// InferenceServerID is the backend (pylon registration) that served the
	// request. Upstream Stargate's WebTransport tunnel also sends it on its
	// handshake; this implementation's tunnel carries the id in a frame.
	InferenceServerID = "x-inference-server-id"

	// InferenceServerURL is the registered URL of the serving backend.
	InferenceServerURL = "x-inference-server-url"

	// StargateErrorCode is the class of an error the hub generated itself,
	// for example ErrorCodeNoEligibleCandidates; it always equals the error
	// body's code (docs/design/headers.md#error-codes).
	StargateErrorCode = "x-stargate-error-code"

	// StargateSessionState is the class the hub gave the request with
	// last_cluster_affinity (SessionStateNew, SessionStateReturning or
	// SessionStateStale), set on every answer the hub relays from a
	// cluster when the request was classified and absent otherwise
	// (docs/design/hub-request.md#session-classification). The gateway
	// reads it only to label its session metrics: the class is known only
	// at the hub, and the gateway is where the client's TTFT and the
	// usage's cached tokens are measured.
	StargateSessionState = "x-stargate-session-state"
)

// Mock engine -> client response headers. They describe the modelled prefix
// cache (docs/mock-engine.md#kv-cache-model); pylon, hub and gateway pass
// them through and the load generator reads them. They are not internal, so
// StripInternalResponse keeps them.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// KVCacheHit is true when any input token was served from the cache.
	KVCacheHit = "x-kv-cache-hit"

	// KVCacheReusedInputTokens is the number of input tokens served from
	// the cache.
	KVCacheReusedInputTokens = "x-kv-cache-reused-input-tokens"

	// KVCacheHitTokens carries the same number as KVCacheReusedInputTokens
	// under the name our own tools read; the other name is the one upstream
	// Stargate's mock engine sends, kept for clients written against it.
	KVCacheHitTokens = "x-kv-cache-hit-tokens"

	// MockEngineID names the mock engine instance that answered (its
	// --engine-id). Through the gateway, which hides the hub's
	// x-stargate-cluster-id from clients, it is how the demo and the load
	// generator see where a request ran. Real engines never send it.
	MockEngineID = "x-mock-engine-id"

	// KVCacheUncachedInputTokens is the number of input tokens that had to
	// be prefilled.
	KVCacheUncachedInputTokens = "x-kv-cache-uncached-input-tokens"

	// KVCacheEvictedEntries is the number of cache entries (blocks, in the
	// mock engine) this request's commit evicted.
	KVCacheEvictedEntries = "x-kv-cache-evicted-entries"

	// KVCacheEvictedTokens is the number of tokens this request's commit
	// evicted.
	KVCacheEvictedTokens = "x-kv-cache-evicted-tokens"
)

// Gateway -> client rate-limit response headers
// (docs/design/sessions.md#rate-limits). The gateway owns them; nothing
// upstream sets them.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// RateLimitLimitTokens is the token limit of the reported dimension.
	RateLimitLimitTokens = "x-ratelimit-limit-tokens"

	// RateLimitRemainingTokens is the tokens left in the reported dimension.
	RateLimitRemainingTokens = "x-ratelimit-remaining-tokens"

	// RateLimitResetTokens is the time until the token window resets, as a
	// Go duration string truncated to ms (minimum 1ms).
	RateLimitResetTokens = "x-ratelimit-reset-tokens"

	// RateLimitLimitRequests is the request limit, sent only when request
	// dimensions exist.
	RateLimitLimitRequests = "x-ratelimit-limit-requests"

	// RateLimitRemainingRequests is the requests left, sent only when
	// request dimensions exist.
	RateLimitRemainingRequests = "x-ratelimit-remaining-requests"

	// RateLimitResetRequests is the time until the request window resets,
	// sent only when request dimensions exist.
	RateLimitResetRequests = "x-ratelimit-reset-requests"

	// ShouldRetry is false when Retry-After exceeds 60 s, telling OpenAI
	// SDKs not to retry.
	ShouldRetry = "x-should-retry"
)

// Control plane and tunnel: upstream Stargate's wire names. This
// implementation carries the token and heartbeat in its tunnel's handshake
// and registration frames (docs/protocol.md#2-frames-handshake-and-auth)
// and sends every request as an HTTP/2 stream, so no tier sends these; they
// stay reserved so a client's copy can never pass for tunnel framing.
//
//nolint:gosec // G101 flags names containing "token"; these are header names, not credentials.
const (
	// StargateAuthToken authenticates pylon on upstream Stargate's
	// WebTransport tunnel handshake.
	StargateAuthToken = "x-stargate-auth-token"

	// StargateRegistrationHeartbeatMs is upstream Stargate's gRPC metadata
	// on RegisterInferenceServer carrying pylon's heartbeat period in ms,
	// from which the hub derives the registration idle timeout.
	StargateRegistrationHeartbeatMs = "x-stargate-registration-heartbeat-ms"

	// TunnelMethod carries the request method in upstream Stargate's
	// raw-QUIC tunnel header map; pylon strips it before the engine.
	TunnelMethod = "x-method"

	// TunnelPath carries the request path and query in upstream Stargate's
	// raw-QUIC tunnel header map; pylon strips it before the engine.
	TunnelPath = "x-path"

	// TunnelStatus carries the response status in upstream Stargate's
	// raw-QUIC tunnel header map; the gateway never returns it to clients.
	TunnelStatus = "x-status"
)

// Name prefixes matched case-insensitively by the strip functions.
const (
	// StargatePrefix starts every hub-internal header. A client may never
	// set one and the gateway exposes none of them to clients: the family
	// is reserved by prefix so a header added to it later is covered
	// without editing any list.
	StargatePrefix = "x-stargate-"

	// InferenceServerPrefix starts the hub's backend-identity response
	// headers, which would leak the serving topology if they reached
	// clients.
	InferenceServerPrefix = "x-inference-server-"

	// KVCachePrefix starts the mock engine's KV-cache response headers.
	KVCachePrefix = "x-kv-cache-"

	// RateLimitPrefix starts the gateway's rate-limit response headers.
	RateLimitPrefix = "x-ratelimit-"
)

// Header values shared across tiers, compared byte for byte
// (docs/design/headers.md#error-codes; the session states:
// docs/design/headers.md#hub-to-gateway).
const (
	// ReasonQueueEstimateMismatch is pylon's StargateRetryReason when its
	// local queue estimate exceeds the hub's; the hub retries a sibling
	// backend in the same cluster, whose queue the hub's estimate also
	// covered.
	ReasonQueueEstimateMismatch = "queue_estimate_mismatch"

	// ReasonUpstreamAdmissionRejected is pylon's StargateRetryReason for an
	// engine 429/503 marked retryable.
	ReasonUpstreamAdmissionRejected = "upstream_admission_rejected"

	// ReasonModelGenerationUnavailable is pylon's StargateRetryReason for a
	// request to an unknown or unpublished model.
	ReasonModelGenerationUnavailable = "model_generation_unavailable"

	// ReasonLocalConnectFailure is pylon's StargateRetryReason when it cannot
	// connect to its engine.
	ReasonLocalConnectFailure = "local_connect_failure"

	// ErrorCodeNoEligibleCandidates is the hub's StargateErrorCode on a 404
	// for a target that was never advertised. A gateway should retry it
	// only when a model discovery may have raced the request.
	ErrorCodeNoEligibleCandidates = "no_eligible_candidates"

	// ErrorCodeInputWorkLimitExceeded is the hub's StargateErrorCode on an
	// input-work admission 503, for both admission reasons
	// (docs/design/hub-request.md#input-work-admission).
	ErrorCodeInputWorkLimitExceeded = "input_work_limit_exceeded"

	// ErrorCodeOverloaded is the hub's StargateErrorCode on a 503 when
	// clusters exist but none could be chosen before the wait ran out, or
	// every candidate failed; later upstream Stargate versions use it for
	// every pre-upstream admission refusal.
	ErrorCodeOverloaded = "overloaded_error"
	// SessionStateNew is StargateSessionState for a request without a
	// usable last-cluster hint.
	SessionStateNew = "new"

	// SessionStateReturning is StargateSessionState for a request whose
	// hint named a current candidate cluster.
	SessionStateReturning = "returning"

	// SessionStateStale is StargateSessionState for a request whose hint
	// named a cluster outside the candidates.
	SessionStateStale = "stale"
)

// known lists every header name this package defines, in the order the
// constant groups appear.
var known = [...]string{
	RequestID, MultiTurnSessionID, ClaudeCodeSessionID, NVCFTargetRegion, GroqRegion,
	Model, RoutingKey, RoutingMethod, InputTokens, TokenEstimate, CacheAffinityKey,
	Priority, RequestSLOMs, MaxWaitMs, StargateMaxWaitMs, StargateLastClusterID,
	StargateExpectedQueueMs, OutputTokens, DynamoRequestPriority, DynamoRequestStrictPriority,
	StargateUpstreamRetryable, StargateRetryable, StargateRetryReason, StargateRetryAfterMs,
	StargateClusterID, InferenceServerID, InferenceServerURL, StargateErrorCode, StargateSessionState,
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
