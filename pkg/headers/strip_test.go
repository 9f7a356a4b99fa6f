package headers

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// spoofedInbound are headers a client might send to steer routing; every one
// must be gone after StripInbound.
var spoofedInbound = []string{
	StargateLastClusterID,
	StargatePromptPrefix,
	StargateMaxWaitMs,
	StargateDeadlineMs,
	StargateExpectedQueueMs,
	StargateRetryable,
	StargateClusterID,
	StargateErrorCode,
	StargateSessionState,
	StargateAuthToken,
	"x-stargate-made-up-future-header",
	InferenceServerID,
	InferenceServerURL,
	Model,
	RoutingKey,
	RoutingMethod,
	InputTokens,
	TokenEstimate,
	CacheAffinityKey,
	Priority,
	RequestSLOMs,
	MaxWaitMs,
	DynamoRequestPriority,
	DynamoRequestStrictPriority,
	TunnelMethod,
	TunnelPath,
}

// keptInbound are headers the gateway reads from clients or that steer no
// routing; StripInbound must leave them.
var keptInbound = []string{
	"Content-Type",
	"Authorization",
	"Accept",
	"User-Agent",
	"Traceparent",
	"X-Stainless-Lang",
	"X-Stainless-Timeout",
	"X-Forwarded-For",
	RequestID,
	MultiTurnSessionID,
	ClaudeCodeSessionID,
	NVCFTargetRegion,
	GroqRegion,
	OutputTokens,
	"x-stargate", // no trailing dash: not in the family
	"x-modelx",   // a longer name is not x-model
}

// letterCases returns name in the spellings a client or a careless caller
// might use: as is, canonical, upper case and alternating case.
func letterCases(name string) []string {
	alt := []byte(name)
	for i, c := range alt {
		if i%2 == 0 && 'a' <= c && c <= 'z' {
			alt[i] = c - 'a' + 'A'
		}
	}
	return []string{name, http.CanonicalHeaderKey(name), strings.ToUpper(name), string(alt)}
}

func TestStripInbound(t *testing.T) {
	t.Parallel()
	for _, spoofed := range spoofedInbound {
		for _, key := range letterCases(spoofed) {
			t.Run(key, func(t *testing.T) {
				t.Parallel()
				h := http.Header{}
				for _, k := range keptInbound {
					h.Set(k, "v")
				}
				// A direct map write keeps the key exactly as spelled, the
				// way a handler bypassing Header.Set would store it.
				h[key] = []string{"spoof"}
				h.Set(spoofed, "spoof")

				StripInbound(h)

				for k := range h {
					if strings.EqualFold(k, spoofed) {
						t.Fatalf("StripInbound kept %q", k)
					}
				}
				for _, k := range keptInbound {
					if len(h[http.CanonicalHeaderKey(k)]) != 1 {
						t.Fatalf("StripInbound removed %q", k)
					}
				}
			})
		}
	}
}

func TestStripInboundKeepsSessionForGateway(t *testing.T) {
	t.Parallel()
	// The gateway derives the session from x-multi-turn-session-id and may
	// strip before doing so; the id must survive.
	h := http.Header{}
	h.Set(MultiTurnSessionID, "sess-123")
	h.Set(StargateLastClusterID, "cluster-evil")
	StripInbound(h)
	if got := h.Get(MultiTurnSessionID); got != "sess-123" {
		t.Fatalf("got session %q; want %q", got, "sess-123")
	}
	if got := h.Get(StargateLastClusterID); got != "" {
		t.Fatalf("got last cluster %q; want it stripped", got)
	}
}

func TestStripInboundNilAndEmpty(t *testing.T) {
	t.Parallel()
	StripInbound(nil)
	StripInternalResponse(nil)
	StripSessionIDs(nil)
	h := http.Header{}
	StripInbound(h)
	if len(h) != 0 {
		t.Fatalf("got %v; want empty", h)
	}
}

func TestStripSessionIDs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{MultiTurnSessionID, ClaudeCodeSessionID} {
		for _, key := range letterCases(name) {
			t.Run(key, func(t *testing.T) {
				t.Parallel()
				h := http.Header{}
				h[key] = []string{"raw-session"}
				h.Set(CacheAffinityKey, "mt:v1:session:abc")
				h.Set(RequestID, "req-1")
				StripSessionIDs(h)
				if _, ok := h[key]; ok {
					t.Fatalf("StripSessionIDs kept %q", key)
				}
				if h.Get(CacheAffinityKey) == "" || h.Get(RequestID) == "" {
					t.Fatalf("StripSessionIDs removed an unrelated header: %v", h)
				}
			})
		}
	}
}

func TestStripInternalResponse(t *testing.T) {
	t.Parallel()
	internal := []string{
		StargateClusterID,
		StargateErrorCode,
		StargateSessionState,
		StargateRetryable,
		StargateRetryReason,
		StargateRetryAfterMs,
		StargateUpstreamRetryable,
		"x-stargate-unknown",
		InferenceServerID,
		InferenceServerURL,
		"x-inference-server-unknown",
		TunnelStatus,
	}
	kept := []string{
		"Content-Type",
		"Cache-Control",
		RequestID,
		MultiTurnSessionID,
		KVCacheHit,
		KVCacheReusedInputTokens,
		KVCacheUncachedInputTokens,
		KVCacheEvictedEntries,
		KVCacheEvictedTokens,
		RateLimitLimitTokens,
		RateLimitRemainingTokens,
		RateLimitResetTokens,
		ShouldRetry,
	}
	for _, name := range internal {
		for _, key := range letterCases(name) {
			t.Run(key, func(t *testing.T) {
				t.Parallel()
				h := http.Header{}
				for _, k := range kept {
					h.Set(k, "v")
				}
				h[key] = []string{"internal"}
				StripInternalResponse(h)
				if _, ok := h[key]; ok {
					t.Fatalf("StripInternalResponse kept %q", key)
				}
				if len(h) != len(kept) {
					t.Fatalf("StripInternalResponse removed a client header: %v", h)
				}
			})
		}
	}
}

func TestInboundReservedMatchesKnown(t *testing.T) {
	t.Parallel()
	// Every known name is classified on purpose: either reserved or listed as
	// kept, so adding a constant forces a decision here.
	clientOrResponseOnly := []string{
		RequestID, MultiTurnSessionID, ClaudeCodeSessionID, NVCFTargetRegion, GroqRegion,
		StainlessTimeout, StainlessLang, OutputTokens,
		KVCacheHit, KVCacheHitTokens, KVCacheReusedInputTokens, KVCacheUncachedInputTokens,
		KVCacheEvictedEntries, KVCacheEvictedTokens, MockEngineID, MockClusterID,
		RateLimitLimitTokens, RateLimitRemainingTokens, RateLimitResetTokens,
		RateLimitLimitRequests, RateLimitRemainingRequests, RateLimitResetRequests, ShouldRetry,
		TunnelStatus,
	}
	for _, name := range Known() {
		want := !slices.Contains(clientOrResponseOnly, name)
		if got := InboundReserved(name); got != want {
			t.Errorf("InboundReserved(%q) = %t; want %t", name, got, want)
		}
	}
}

func TestInternalResponseMatchesKnown(t *testing.T) {
	t.Parallel()
	for _, name := range Known() {
		want := strings.HasPrefix(name, StargatePrefix) ||
			strings.HasPrefix(name, InferenceServerPrefix) ||
			name == TunnelStatus
		if got := InternalResponse(name); got != want {
			t.Errorf("InternalResponse(%q) = %t; want %t", name, got, want)
		}
	}
}

func TestStripDoesNotAllocate(t *testing.T) {
	h := realisticInbound()
	allocs := testing.AllocsPerRun(100, func() {
		StripInbound(h)
		StripSessionIDs(h)
		StripInternalResponse(h)
	})
	if allocs != 0 {
		t.Fatalf("got %v allocations per run; want 0", allocs)
	}
}
