package stats

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
)

// Stream modes of --engine-stats-stream
// (docs/design/statistics.md#engine-stats-stream).
const (
	// ModeAuto consumes the engine stats stream and switches to the OpenAI
	// fallback only when the stream answers 404, 405 or 501 before any valid
	// event has been seen.
	ModeAuto = "auto"
	// ModeRequired consumes the stream and never falls back.
	ModeRequired = "required"
	// ModeOff never opens the stream; the fallback is active from the start.
	ModeOff = "off"
)

// DefaultStreamPath is the default --engine-stats-stream-path.
const DefaultStreamPath = "/pylon/v1/stats/stream"

// Aggregation constants (docs/design/statistics.md#aggregation). They have
// no flags.
const (
	// WindowSize is the number of output-TPS samples averaged into
	// output_tps.
	WindowSize = 8
	// MinInputSamples is how many input-TPS samples the distribution needs
	// before last_mean_input_tps moves; a --initial-input-tps seed counts as
	// this many.
	MinInputSamples = 5
	// DurationFloor is the shortest interval a throughput sample may span.
	DurationFloor = 10 * time.Millisecond
	// RequestTTL bounds how long a request's counters live without an event,
	// and how long a finished request's tombstone keeps rejecting late
	// events.
	RequestTTL = 300 * time.Second
	// ModelTTL is how long a model may go without a stats event before its
	// output-TPS window is cleared.
	ModelTTL = 30 * time.Second
	// SweepInterval is the period of the stale sweep.
	SweepInterval = time.Second
	// KVPollInterval and KVPollTimeout time the KV-cache poll.
	KVPollInterval = time.Second
	KVPollTimeout  = time.Second
	// MaxLineBytes bounds one engine stats stream line, CR/LF excluded.
	MaxLineBytes = 64 << 10
	// InitialBackoff and MaxBackoff bound the engine-stream reconnect delay,
	// which doubles per attempt and is never reset.
	InitialBackoff = 100 * time.Millisecond
	MaxBackoff     = 5 * time.Second
)

// Bounds on what an engine may report (docs/pylon.md#statistics). A value
// beyond them is not a measurement but a broken or hostile engine, and
// once published it would steer the hub: a huge throughput makes this
// pylon's queues look empty, so every hub sends it everything; a huge free
// KV count makes it fit every prompt. Such values are dropped where they
// enter, so they never reach the registration.
const (
	// MaxCounterTokens bounds a per-request cumulative token counter
	// (tokens_processed, tokens_generated, a usage counter in a response
	// chunk): 2^32, some 400 times the largest context window served
	// today. A stats line above it is invalid (reason "field"); a chunk's
	// counter above it is ignored.
	MaxCounterTokens = 1 << 32
	// MaxTPS bounds every throughput sample and every published throughput,
	// in tokens per second: 10^9, above what one engine does even when a
	// 10-million-token prompt is served from cache within the 10 ms
	// duration floor. A larger sample is dropped.
	MaxTPS = 1e9
	// MaxKVTokens bounds each KV-cache token count of a poll (2^40); a
	// poll with a larger one fails and the last values stay.
	MaxKVTokens = 1 << 40
)

// Config configures a Collector. The zero values of the optional fields get
// the defaults noted on each field.
type Config struct {
	// Clock is the source of all time; nil means clock.Real{}.
	Clock clock.Clock
	// Log receives warnings (stream and poll failures, dropped data); nil
	// discards them.
	Log *slog.Logger
	// UpstreamBaseURL is the engine's base URL (--upstream-http-base-url);
	// a trailing "/" is ignored.
	UpstreamBaseURL string
	// UpstreamBaseURLs lists the engines when --upstream-http-base-url
	// names several: the stats stream and the KV poll are consumed from
	// each, and the index of an engine in this list is the engine number
	// of Observer.Dispatched. Set UpstreamBaseURL or UpstreamBaseURLs, not
	// both.
	UpstreamBaseURLs []string
	// HTTPClient makes the stream and KV requests; nil means a fresh
	// http.Client. Its Timeout must be zero: the stream never ends, and the
	// KV poll carries its own 1 s deadline.
	HTTPClient *http.Client
	// StreamMode is --engine-stats-stream: auto (default), required or off.
	StreamMode string
	// StreamPath is --engine-stats-stream-path, default DefaultStreamPath.
	StreamPath string
	// KVCachePath is --kv-cache-stats-path; empty disables the KV poll.
	KVCachePath string
	// InitialInputTPS is --initial-input-tps: when > 0 every generation's
	// input-TPS distribution starts as mean X with count 5. Zero means none.
	InitialInputTPS float64
	// PinInputTPS is --benchmark-pin-input-tps: last_mean_input_tps stays at
	// InitialInputTPS while samples still update the distribution.
	PinInputTPS bool
	// MaxEngineConcurrency is --max-engine-concurrency: how many requests
	// the engines behind this pylon run at once, published as
	// max_engine_concurrency (0 = unknown; upstream Stargate's pylon always
	// publishes 0, having no source for it).
	MaxEngineConcurrency uint64
	// Registerer receives the package's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Validate reports the first invalid field, naming its flag. It does not
// change c.
func (c Config) Validate() error {
	if c.UpstreamBaseURL != "" && len(c.UpstreamBaseURLs) > 0 {
		return errors.New("--upstream-http-base-url: set UpstreamBaseURL or UpstreamBaseURLs, not both")
	}
	urls := c.UpstreamBaseURLs
	if len(urls) == 0 {
		if c.UpstreamBaseURL == "" {
			return errors.New("--upstream-http-base-url is required")
		}
		urls = []string{c.UpstreamBaseURL}
	}
	seen := map[string]bool{}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--upstream-http-base-url %q: want an absolute http:// or https:// URL", s)
		}
		k := strings.TrimRight(s, "/")
		if seen[k] {
			return fmt.Errorf("--upstream-http-base-url %q: listed twice", s)
		}
		seen[k] = true
	}
	switch c.StreamMode {
	case "", ModeAuto, ModeRequired, ModeOff:
	default:
		return fmt.Errorf("--engine-stats-stream %q: want auto, required or off", c.StreamMode)
	}
	if c.StreamPath != "" && !strings.HasPrefix(c.StreamPath, "/") {
		return fmt.Errorf("--engine-stats-stream-path %q: must start with /", c.StreamPath)
	}
	if c.KVCachePath != "" && !strings.HasPrefix(c.KVCachePath, "/") {
		return fmt.Errorf("--kv-cache-stats-path %q: must start with /", c.KVCachePath)
	}
	if math.IsNaN(c.InitialInputTPS) || c.InitialInputTPS < 0 || c.InitialInputTPS > MaxTPS {
		return fmt.Errorf("--initial-input-tps %v: must be > 0 and at most %g", c.InitialInputTPS, float64(MaxTPS))
	}
	if c.PinInputTPS && c.InitialInputTPS == 0 {
		return errors.New("--benchmark-pin-input-tps requires --initial-input-tps")
	}
	if c.HTTPClient != nil && c.HTTPClient.Timeout != 0 {
		return errors.New("stats HTTP client: Timeout must be zero (the engine stats stream never ends)")
	}
	return nil
}

// withDefaults returns c with every optional field filled in.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.StreamMode == "" {
		c.StreamMode = ModeAuto
	}
	if c.StreamPath == "" {
		c.StreamPath = DefaultStreamPath
	}
	c.UpstreamBaseURL = strings.TrimRight(c.UpstreamBaseURL, "/")
	c.UpstreamBaseURLs = slices.Clone(c.UpstreamBaseURLs)
	for i, u := range c.UpstreamBaseURLs {
		c.UpstreamBaseURLs[i] = strings.TrimRight(u, "/")
	}
	return c
}

// engineURLs returns every engine's base URL (after withDefaults).
func (c Config) engineURLs() []string {
	if len(c.UpstreamBaseURLs) > 0 {
		return c.UpstreamBaseURLs
	}
	return []string{c.UpstreamBaseURL}
}
