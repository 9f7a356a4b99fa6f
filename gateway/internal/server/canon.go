package server

import (
	"net/http"

	"github.com/stargate-router/stargate/pkg/headers"
)

// Header names in the form net/http keeps them, computed once. The
// contract's names are lower case, and http.Header's Get, Values and Set
// canonicalize (allocating a new string) on every call; these index the
// map directly.
var (
	hRequestID          = http.CanonicalHeaderKey(headers.RequestID)
	hMultiTurnSessionID = http.CanonicalHeaderKey(headers.MultiTurnSessionID)
	hClusterID          = http.CanonicalHeaderKey(headers.StargateClusterID)
	hOutputTokens       = http.CanonicalHeaderKey(headers.OutputTokens)
	hLimitTokens        = http.CanonicalHeaderKey(headers.RateLimitLimitTokens)
	hRemainingTokens    = http.CanonicalHeaderKey(headers.RateLimitRemainingTokens)
	hResetTokens        = http.CanonicalHeaderKey(headers.RateLimitResetTokens)
	hLimitRequests      = http.CanonicalHeaderKey(headers.RateLimitLimitRequests)
	hRemainingRequests  = http.CanonicalHeaderKey(headers.RateLimitRemainingRequests)
	hResetRequests      = http.CanonicalHeaderKey(headers.RateLimitResetRequests)
	hShouldRetry        = http.CanonicalHeaderKey(headers.ShouldRetry)
)

// setHeader sets the header of canonical name k to v alone.
func setHeader(h http.Header, k, v string) { h[k] = []string{v} }
