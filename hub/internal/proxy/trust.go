package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/stargate-router/stargate/pkg/headers"
)

// bearerMatches reports whether an Authorization value is "Bearer <token>".
// Both tokens are hashed before the constant-time comparison, which would
// otherwise return at once on a length mismatch and so tell a prober the
// token's length.
func bearerMatches(authorization, token string) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
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
