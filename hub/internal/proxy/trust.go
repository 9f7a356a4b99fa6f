package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/stargate-router/stargate/pkg/headers"
)

// bearerMatches reports whether an Authorization value is "Bearer <token>",
// given the token's SHA-256 (tokenHash, taken once). Both tokens are hashed
// before the constant-time comparison, which would otherwise return at
// once on a length mismatch and so tell a prober the token's length.
func bearerMatches(authorization string, want *[sha256.Size]byte) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// A token of usual length is copied to the stack to be hashed, not to
	// a new slice per request.
	var buf [128]byte
	a := sha256.Sum256(append(buf[:0], strings.TrimSpace(got)...))
	return subtle.ConstantTimeCompare(a[:], want[:]) == 1
}

// tokenHash is the SHA-256 bearerMatches compares against.
func tokenHash(token string) *[sha256.Size]byte {
	h := sha256.Sum256([]byte(token))
	return &h
}

// steering lists the headers, besides the x-stargate-* family, with which a
// caller could steer routing: the routing scope, method, affinity, priority
// and waits. The required x-request-id, x-model and x-input-tokens stay.
var steering = [...]string{headers.RoutingKey, headers.RoutingMethod, headers.CacheAffinityKey, headers.Priority,
	headers.RequestSLOMs, headers.MaxWaitMs}

// stripSteering removes from an untrusted request every header that would
// steer its routing, in any letter case, so it routes as a plain request.
func stripSteering(h http.Header) {
	for k := range h {
		if len(k) >= len(headers.StargatePrefix) && strings.EqualFold(k[:len(headers.StargatePrefix)], headers.StargatePrefix) {
			delete(h, k)
			continue
		}
		for _, s := range steering {
			if strings.EqualFold(k, s) {
				delete(h, k)
				break
			}
		}
	}
}
