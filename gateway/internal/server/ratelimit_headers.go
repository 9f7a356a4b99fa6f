package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/headers"
)

// retryAfterSeconds is a refusal's Retry-After: the wait rounded up to
// whole seconds, at least 1 (Retry-After: 0 invites an immediate retry
// into the same refusal).
func retryAfterSeconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

// setRateLimitHeaders writes the rate-limit headers
// (docs/design/sessions.md#rate-limits): for each limited dimension
// (tokens, and requests only when a request limit applies) the limit, what
// is left after this request and the time until the window resets as a Go
// duration truncated to milliseconds (at least 1ms); on a refusal whose
// Retry-After is over 60 seconds, X-Should-Retry: false. A fail-open
// admission (store down) reports nothing: the gateway does not know the
// counters then.
func setRateLimitHeaders(h http.Header, d ratelimit.Decision) {
	put := func(limit, remaining, reset string, dim *ratelimit.Dim) {
		if dim == nil {
			return
		}
		h.Set(limit, strconv.FormatInt(dim.Limit, 10))
		h.Set(remaining, strconv.FormatInt(dim.Remaining, 10))
		h.Set(reset, max(dim.Reset.Truncate(time.Millisecond), time.Millisecond).String())
	}
	put(headers.RateLimitLimitTokens, headers.RateLimitRemainingTokens, headers.RateLimitResetTokens, d.Tokens)
	put(headers.RateLimitLimitRequests, headers.RateLimitRemainingRequests, headers.RateLimitResetRequests, d.Requests)
	if !d.Allowed && d.Err == nil && retryAfterSeconds(d.RetryAfter) > 60 {
		h.Set(headers.ShouldRetry, "false")
	}
}
