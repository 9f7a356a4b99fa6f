package headers

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestKnownNames(t *testing.T) {
	t.Parallel()
	names := Known()
	if len(names) != len(known) {
		t.Fatalf("Known() has %d names; want %d", len(names), len(known))
	}
	if !slices.IsSorted(names) {
		t.Fatalf("Known() is not sorted: %v", names)
	}
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Fatalf("Known() has duplicates: %v", names)
	}
	for _, n := range names {
		if n != strings.ToLower(n) || !strings.HasPrefix(n, "x-") {
			t.Errorf("%q is not a lower-case x-* name", n)
		}
		if !IsKnown(n) || !IsKnown(http.CanonicalHeaderKey(n)) || !IsKnown(strings.ToUpper(n)) {
			t.Errorf("IsKnown(%q) is false in some letter case", n)
		}
		if got, want := canonicalKey(n), http.CanonicalHeaderKey(n); got != want {
			t.Errorf("canonicalKey(%q) = %q; want %q", n, got, want)
		}
	}
	names[0] = "mutated"
	if Known()[0] == "mutated" {
		t.Fatal("Known() returned shared storage")
	}
}

func TestKnownNamesFitBuffer(t *testing.T) {
	t.Parallel()
	for _, n := range Known() {
		if len(n) > maxNameLen {
			t.Errorf("%q is %d bytes; lowerASCII's buffer holds %d", n, len(n), maxNameLen)
		}
	}
}

func TestIsKnownRejects(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"", "x-", "Content-Type", "x-stargate-", "x-model ", strings.Repeat("x", maxNameLen+1)} {
		if IsKnown(n) {
			t.Errorf("IsKnown(%q) = true; want false", n)
		}
	}
}

// TestSpecNames pins the byte-exact spelling of names other tiers, the load
// generator and dashboards depend on.
func TestSpecNames(t *testing.T) {
	t.Parallel()
	pinned := map[string]string{
		"x-request-id":                     RequestID,
		"x-model":                          Model,
		"x-input-tokens":                   InputTokens,
		"x-output-tokens":                  OutputTokens,
		"x-cache-affinity-key":             CacheAffinityKey,
		"x-request-slo-ms":                 RequestSLOMs,
		"x-max-wait-ms":                    MaxWaitMs,
		"x-stargate-max-wait-ms":           StargateMaxWaitMs,
		"x-stargate-deadline-ms":           StargateDeadlineMs,
		"x-stargate-aggregated":            StargateAggregated,
		"deadline_exceeded":                ErrorCodeDeadlineExceeded,
		"x-stainless-timeout":              StainlessTimeout,
		"x-routing-method":                 RoutingMethod,
		"x-stargate-last-cluster-id":       StargateLastClusterID,
		"x-stargate-prompt-prefix":         StargatePromptPrefix,
		"x-stargate-cluster-id":            StargateClusterID,
		"x-stargate-session-state":         StargateSessionState,
		"x-stargate-lb-config-hash":        StargateLBConfigHash,
		"new":                              SessionStateNew,
		"returning":                        SessionStateReturning,
		"stale":                            SessionStateStale,
		"x-stargate-expected-queue-ms":     StargateExpectedQueueMs,
		"x-priority":                       Priority,
		"x-multi-turn-session-id":          MultiTurnSessionID,
		"x-inference-server-id":            InferenceServerID,
		"x-inference-server-url":           InferenceServerURL,
		"x-kv-cache-hit":                   KVCacheHit,
		"x-kv-cache-reused-input-tokens":   KVCacheReusedInputTokens,
		"x-kv-cache-uncached-input-tokens": KVCacheUncachedInputTokens,
		"x-kv-cache-evicted-entries":       KVCacheEvictedEntries,
		"x-kv-cache-evicted-tokens":        KVCacheEvictedTokens,
		"x-ratelimit-limit-tokens":         RateLimitLimitTokens,
	}
	for want, got := range pinned {
		if got != want {
			t.Errorf("constant is %q; want %q", got, want)
		}
	}
}
