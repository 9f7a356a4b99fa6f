package engineproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/affinity"
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
	// EngineAffinity is --engine-affinity: with several engines, a
	// request with x-cache-affinity-key goes to the engine its key
	// prefers unless that one is down, full or over the load bound, so a
	// session's turns meet their KV cache (docs/pylon.md#several-engines-behind-one-pylon).
	EngineAffinity bool
	// EngineAffinityLoadFactor is --engine-affinity-load-factor: an
	// engine keeps its keys while it carries at most this times the mean
	// outstanding requests (plus one); 0 is no bound.
	EngineAffinityLoadFactor float64
	// EngineAffinityQueueWhenFull is --engine-affinity-when-full=queue: a
	// keyed request stays on its engine at that engine's share of
	// --max-engine-concurrency and queues there (only a down engine or
	// the load bound moves it), instead of spilling to a sibling engine
	// that holds none of its prefix.
	EngineAffinityQueueWhenFull bool
	// MaxEngineConcurrency is --max-engine-concurrency, all engines
	// together (0: unknown); an engine whose share is outstanding counts
	// as full for the affinity pick.
	MaxEngineConcurrency uint64

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

	// Client carries health probes to the engines; requests go through
	// its Transport alone (http.DefaultTransport if nil), as through a
	// reverse proxy: an engine's redirect is relayed, not followed, and
	// the Client's Timeout and Jar do not apply to them.
	Client *http.Client
	Clock  clock.Clock
	Log    *slog.Logger
}

// DefaultEngineAffinityLoadFactor is --engine-affinity-load-factor's
// default, pkg/affinity's (2), the hub's default for its backends too
// (docs/design/routing-state.md#backends-inside-a-cluster has the
// measurements behind it).
const DefaultEngineAffinityLoadFactor = affinity.DefaultLoadFactor

// CheckLoadFactor reports whether f is a valid affinity load factor: 0
// (no bound) or a finite value of at least 1 (below 1 every engine would
// be over its share).
func CheckLoadFactor(f float64) error {
	if f == 0 || (f >= 1 && !math.IsInf(f, 1)) {
		return nil
	}
	return fmt.Errorf("%v: want 0 (no bound) or a finite factor >= 1", f)
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
		EngineAffinity:               true,
		EngineAffinityLoadFactor:     DefaultEngineAffinityLoadFactor,
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
	if err := CheckLoadFactor(c.EngineAffinityLoadFactor); err != nil {
		errs = append(errs, fmt.Errorf("--engine-affinity-load-factor %w", err))
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
