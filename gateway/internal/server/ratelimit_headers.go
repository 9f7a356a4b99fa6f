package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
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
	// The values share one backing array, each capped at its own length.
	vals := make([]string, 0, 6)
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
	}
	put := func(limit, remaining, reset string, dim *ratelimit.Dim) {
		if dim == nil {
			return
		}
		set(limit, strconv.FormatInt(dim.Limit, 10))
		set(remaining, strconv.FormatInt(dim.Remaining, 10))
		set(reset, max(dim.Reset.Truncate(time.Millisecond), time.Millisecond).String())
	}
	put(hLimitTokens, hRemainingTokens, hResetTokens, d.Tokens)
	put(hLimitRequests, hRemainingRequests, hResetRequests, d.Requests)
	if !d.Allowed && d.Err == nil && retryAfterSeconds(d.RetryAfter) > 60 {
		setHeader(h, hShouldRetry, "false")
	}
}
