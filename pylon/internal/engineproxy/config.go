package engineproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Config is the proxy's behaviour; field comments name the pylon flag that
// sets each one (docs/pylon.md#flags).
type Config struct {
	// UpstreamBaseURL is --upstream-http-base-url, without a trailing slash,
	// when it names one engine.
	UpstreamBaseURL string
	// UpstreamBaseURLs lists the engines when --upstream-http-base-url
	// names several (see ParseUpstreamURLs); requests are spread over them.
	// Set UpstreamBaseURL or UpstreamBaseURLs, not both.
	UpstreamBaseURLs []string
	// HealthPaths are --upstream-health-path values tried before /health and
	// /v1/health/ready; the first that answers 2xx is cached.
	HealthPaths []string
	// RetryableStatusCodes is --pylon-retryable-upstream-status-codes.
	RetryableStatusCodes []int
	// RequireUpstreamRetryHeader is --pylon-require-upstream-retry-header.
	RequireUpstreamRetryHeader bool
	// UpstreamRetryHeader is --pylon-upstream-retry-header.
	UpstreamRetryHeader string
	// PropagateRetryAfter is --pylon-propagate-retry-after.
	PropagateRetryAfter bool
	// LocalConnectFailuresRetryable is --pylon-local-connect-failures-retryable.
	LocalConnectFailuresRetryable bool
	// QueueMismatchEnabled is --pylon-queue-mismatch-retry-enabled.
	QueueMismatchEnabled bool
	// QueueMismatchMinDelta is --pylon-queue-mismatch-min-delta-ms.
	QueueMismatchMinDelta time.Duration
	// QueueMismatchToleranceFactor is --pylon-queue-mismatch-tolerance-factor.
	QueueMismatchToleranceFactor float64
	// QueueMismatchRetryAfter is --pylon-queue-mismatch-retry-after-ms; 0
	// sends no hint.
	QueueMismatchRetryAfter time.Duration
	// UpstreamBackend is --pylon-upstream-backend: dynamo or passthrough.
	UpstreamBackend string
	// PriorityCeiling is --pylon-priority-ceiling.
	PriorityCeiling uint32
	// InferenceServerID labels metrics.
	InferenceServerID string

	// FirstOutputTimeout and InterEventTimeout bound an SSE response
	// (30 s each, as upstream Stargate has them; no flag): an engine that
	// stops producing output must not hold a hub stream open forever.
	FirstOutputTimeout time.Duration
	InterEventTimeout  time.Duration
	// MaxBodyBytes bounds a request body: 64 MiB, as upstream Stargate has
	// it (the hub's default replay limit is the same size).
	MaxBodyBytes int64
	// MaxEventBytes bounds one unfinished SSE event (1 MiB).
	MaxEventBytes int

	Client *http.Client
	Clock  clock.Clock
	Log    *slog.Logger
}

// Defaults returns the default of every field: the pylon flags' defaults
// and the fixed limits, all as upstream Stargate has them, so the hub's
// retry and admission logic meets the pylon it was designed against.
func Defaults() Config {
	return Config{
		RetryableStatusCodes:         []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
		RequireUpstreamRetryHeader:   true,
		UpstreamRetryHeader:          headers.StargateUpstreamRetryable,
		PropagateRetryAfter:          true,
		QueueMismatchEnabled:         true,
		QueueMismatchMinDelta:        25 * time.Millisecond,
		QueueMismatchToleranceFactor: 1.25,
		UpstreamBackend:              "dynamo",
		PriorityCeiling:              3600,
		FirstOutputTimeout:           30 * time.Second,
		InterEventTimeout:            30 * time.Second,
		MaxBodyBytes:                 64 << 20,
		MaxEventBytes:                1 << 20,
	}
}

// Validate names the flag of every bad field.
func (c *Config) Validate() error {
	var errs []error
	switch {
	case len(c.UpstreamBaseURLs) > 0 && c.UpstreamBaseURL != "":
		errs = append(errs, errors.New("--upstream-http-base-url: set UpstreamBaseURL or UpstreamBaseURLs, not both"))
	case len(c.UpstreamBaseURLs) > 0:
		seen := map[string]bool{}
		for _, u := range c.UpstreamBaseURLs {
			u = strings.TrimRight(u, "/")
			if err := checkUpstreamURL(u); err != nil {
				errs = append(errs, err)
			} else if seen[u] {
				errs = append(errs, fmt.Errorf("--upstream-http-base-url %q: listed twice", u))
			}
			seen[u] = true
		}
	case !strings.HasPrefix(c.UpstreamBaseURL, "http://") && !strings.HasPrefix(c.UpstreamBaseURL, "https://"):
		errs = append(errs, fmt.Errorf("--upstream-http-base-url %q: must be an http:// or https:// URL", c.UpstreamBaseURL))
	}
	for _, s := range c.RetryableStatusCodes {
		if s < 100 || s > 599 {
			errs = append(errs, fmt.Errorf("--pylon-retryable-upstream-status-codes: %d is not an HTTP status", s))
		}
	}
	if c.UpstreamRetryHeader == "" {
		errs = append(errs, errors.New("--pylon-upstream-retry-header: must not be empty"))
	}
	if f := c.QueueMismatchToleranceFactor; !(f > 0) || math.IsInf(f, 0) {
		errs = append(errs, fmt.Errorf("--pylon-queue-mismatch-tolerance-factor %v: must be finite and > 0", f))
	}
	if c.QueueMismatchMinDelta < 0 {
		errs = append(errs, errors.New("--pylon-queue-mismatch-min-delta-ms: must not be negative"))
	}
	switch strings.ToLower(c.UpstreamBackend) {
	case "dynamo", "passthrough":
	default:
		errs = append(errs, fmt.Errorf("--pylon-upstream-backend %q: want dynamo or passthrough", c.UpstreamBackend))
	}
	return errors.Join(errs...)
}

// engineURLs returns every engine's base URL without a trailing slash.
func (c *Config) engineURLs() []string {
	if len(c.UpstreamBaseURLs) == 0 {
		return []string{strings.TrimRight(c.UpstreamBaseURL, "/")}
	}
	out := make([]string, len(c.UpstreamBaseURLs))
	for i, u := range c.UpstreamBaseURLs {
		out[i] = strings.TrimRight(u, "/")
	}
	return out
}
