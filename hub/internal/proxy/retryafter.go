package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
)

// Bounds of the Retry-After the hub sends, in seconds. At least 1: 0
// invites an immediate retry into the same outage. At most 60: OpenAI SDKs
// honour a Retry-After up to a minute and fall back to their own backoff
// above it, and no pylon hint should park a client for longer than the
// hub's own longest routing wait.
const (
	minRetryAfterSeconds = 1
	maxRetryAfterSeconds = 60
)

var canonRetryAfterMs = http.CanonicalHeaderKey(headers.StargateRetryAfterMs)

// retryAfterHint is a pylon answer's x-stargate-retry-after-ms, 0 when
// absent or malformed.
func retryAfterHint(h http.Header) time.Duration {
	vs := h[canonRetryAfterMs]
	if len(vs) == 0 {
		return 0
	}
	ms, err := headers.ParseUint64(headers.StargateRetryAfterMs, vs[0])
	if err != nil {
		return 0
	}
	return headers.MillisDuration(ms)
}

// retryAfterSeconds is d as a Retry-After value: whole seconds rounded up,
// within [minRetryAfterSeconds, maxRetryAfterSeconds].
func retryAfterSeconds(d time.Duration) int {
	if d >= maxRetryAfterSeconds*time.Second {
		return maxRetryAfterSeconds
	}
	s := int((d + time.Second - 1) / time.Second)
	return max(s, minRetryAfterSeconds)
}

// setRetryAfter gives an upstream 429 or 503 that the hub passes on its
// Retry-After: the pylon's hint (which the hub removes from what it
// relays) in seconds, rounded up; a 503 without a hint keeps the engine's
// own Retry-After or gets 1 s, so every 503 from the hub says when to try
// again.
func setRetryAfter(resp *http.Response) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return
	}
	if hint := retryAfterHint(resp.Header); hint > 0 {
		resp.Header["Retry-After"] = []string{strconv.Itoa(retryAfterSeconds(hint))}
		return
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
		resp.Header["Retry-After"] = []string{strconv.Itoa(minRetryAfterSeconds)}
	}
}
