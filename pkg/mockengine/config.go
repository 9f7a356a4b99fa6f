package mockengine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
)

// Config is every knob of the mock engine. Flag names follow upstream
// Stargate's mock engine where it has one, so scripts written for it keep
// working; the rest are ours (docs/mock-engine.md#flags).
type Config struct {
	// Listen is the HTTP address (--listen, alias --http-listen-addr).
	Listen string
	// ModelName is the default model, the initial discovery set and the
	// model_name metric label.
	ModelName string

	// CharsPerToken is the tokeniser estimate: bytes of prompt per token.
	CharsPerToken float64
	// BlockTokens is the KV block size in tokens; only full blocks are cached.
	BlockTokens int
	// KVCapacityTokens bounds the prefix cache; 0 disables caching.
	KVCapacityTokens int64

	// TTFT is the base delay before the first token, after prefill.
	TTFT time.Duration
	// TTFTJitter bounds the deterministic per-request jitter added to TTFT.
	TTFTJitter time.Duration
	// ColdPrefillTPS is the instance-wide rate (tokens/s) for uncached
	// prompt tokens; 0 makes them free.
	ColdPrefillTPS float64
	// CachedPrefillTPS is the instance-wide rate for prompt tokens served
	// from the prefix cache; 0 makes them free.
	CachedPrefillTPS float64
	// TokenDelay is the per-request delay between output tokens.
	TokenDelay time.Duration
	// DecodeJitter bounds the deterministic jitter added to each TokenDelay.
	DecodeJitter time.Duration
	// NumTokens is the default output length and the cap on max_tokens.
	NumTokens int

	// MaxConcurrent is the number of requests running at once; 0 = unlimited.
	MaxConcurrent int
	// MaxWaiting bounds the FIFO of requests waiting for a running slot;
	// beyond it requests get 429. 0 means no waiting room.
	MaxWaiting int

	// TimeScale divides every modelled duration: 10 runs 10x faster.
	TimeScale float64
	// Seed makes output text, generated ids and jitter reproducible.
	Seed uint64
	// HealthDelay delays GET /health, to create RTT differences.
	HealthDelay time.Duration
	// EngineID, when set, is sent as x-mock-engine-id on every inference
	// answer, so a client can tell which engine served it.
	EngineID string
	// ClusterID, when set, is sent as x-mock-cluster-id beside
	// x-mock-engine-id, for fleets with several engines per cluster.
	ClusterID string
	// DisableStatsStream makes the engine stats stream answer 404, so the
	// pylon's fallback estimators can be exercised.
	DisableStatsStream bool
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:           "127.0.0.1:8090",
		ModelName:        "dummy-model",
		CharsPerToken:    kvcache.DefaultCharsPerToken,
		BlockTokens:      kvcache.DefaultBlockTokens,
		KVCapacityTokens: 1_600_000,
		TTFT:             20 * time.Millisecond,
		ColdPrefillTPS:   64_000,
		CachedPrefillTPS: 133_000,
		TokenDelay:       10 * time.Millisecond,
		NumTokens:        16,
		MaxConcurrent:    64,
		MaxWaiting:       256,
		TimeScale:        1,
		MaxBodyBytes:     16 << 20,
	}
}

// Register binds every field to a flag and a MOCK_ENGINE_* variable, with
// the defaults of DefaultConfig.
func (c *Config) Register(fs *cli.FlagSet) {
	d := DefaultConfig()
	fs.String(&c.Listen, "listen", "MOCK_ENGINE_LISTEN", d.Listen, "HTTP listen address host:port")
	fs.Alias("http-listen-addr", "listen")
	fs.String(&c.ModelName, "model-name", "MOCK_ENGINE_MODEL_NAME", d.ModelName, "default model, initial /v1/models set and model_name metric label (any model name is accepted)")
	fs.Float64(&c.CharsPerToken, "chars-per-token", "MOCK_ENGINE_CHARS_PER_TOKEN", d.CharsPerToken, "tokeniser estimate: prompt bytes per token")
	fs.Int(&c.BlockTokens, "block-size-tokens", "MOCK_ENGINE_BLOCK_SIZE_TOKENS", d.BlockTokens, "KV cache block size in tokens; only full blocks are cached")
	fs.Int64(&c.KVCapacityTokens, "kv-cache-capacity-tokens", "MOCK_ENGINE_KV_CACHE_CAPACITY_TOKENS", d.KVCapacityTokens, "prefix cache capacity in tokens; 0 disables caching")
	fs.Millis(&c.TTFT, "ttft-ms", "MOCK_ENGINE_TTFT_MS", d.TTFT, "base delay before the first token, after prefill")
	fs.Millis(&c.TTFTJitter, "ttft-jitter-ms", "MOCK_ENGINE_TTFT_JITTER_MS", d.TTFTJitter, "max deterministic jitter added to the base TTFT")
	fs.Float64(&c.ColdPrefillTPS, "prefill-tokens-per-s", "MOCK_ENGINE_PREFILL_TOKENS_PER_S", d.ColdPrefillTPS, "instance-wide prefill rate for uncached prompt tokens, shared by concurrent prefills; 0 = free")
	fs.Float64(&c.CachedPrefillTPS, "cached-prefill-tokens-per-s", "MOCK_ENGINE_CACHED_PREFILL_TOKENS_PER_S", d.CachedPrefillTPS, "instance-wide prefill rate for prompt tokens found in the prefix cache; 0 = free")
	fs.Millis(&c.TokenDelay, "token-delay-ms", "MOCK_ENGINE_TOKEN_DELAY_MS", d.TokenDelay, "per-request delay between output tokens (decode is not shared)")
	fs.Millis(&c.DecodeJitter, "decode-jitter-ms", "MOCK_ENGINE_DECODE_JITTER_MS", d.DecodeJitter, "max deterministic jitter added to each token delay")
	fs.Int(&c.NumTokens, "num-tokens", "MOCK_ENGINE_NUM_TOKENS", d.NumTokens, "default output tokens and cap on max_tokens (x-output-tokens overrides)")
	fs.Int(&c.MaxConcurrent, "max-concurrent-requests", "MOCK_ENGINE_MAX_CONCURRENT_REQUESTS", d.MaxConcurrent, "requests running at once; 0 = unlimited")
	fs.Int(&c.MaxWaiting, "max-waiting-requests", "MOCK_ENGINE_MAX_WAITING_REQUESTS", d.MaxWaiting, "FIFO of requests waiting for a running slot; beyond it 429")
	fs.Float64(&c.TimeScale, "time-scale", "MOCK_ENGINE_TIME_SCALE", d.TimeScale, "divide every modelled duration by this factor (10 = ten times faster)")
	fs.Uint64(&c.Seed, "seed", "MOCK_ENGINE_SEED", d.Seed, "seed of output text, generated ids and jitter")
	fs.Millis(&c.HealthDelay, "health-delay-ms", "MOCK_ENGINE_HEALTH_DELAY_MS", d.HealthDelay, "delay before GET /health answers")
	fs.String(&c.EngineID, "engine-id", "MOCK_ENGINE_ENGINE_ID", "", "sent as x-mock-engine-id on every inference answer (e.g. the cluster name), so clients can see where a request ran")
	fs.String(&c.ClusterID, "cluster-id", "MOCK_ENGINE_CLUSTER_ID", "", "sent as x-mock-cluster-id on every inference answer, so clients can tell the cluster from the engine when a cluster has several")
	fs.Bool(&c.DisableStatsStream, "disable-stats-stream", "MOCK_ENGINE_DISABLE_STATS_STREAM", d.DisableStatsStream, "answer 404 on the engine stats stream (exercises pylon's fallback)")
	fs.Int64(&c.MaxBodyBytes, "max-body-bytes", "MOCK_ENGINE_MAX_BODY_BYTES", d.MaxBodyBytes, "largest accepted request body; larger gets 413")
}

// Validate reports every invalid field, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.ModelName == "" {
		bad("model-name", "must not be empty")
	}
	if err := c.kvConfig().Validate(); err != nil {
		var ce *kvcache.ConfigError
		if errors.As(err, &ce) {
			bad(kvFlags[ce.Field], "%s", ce.Reason)
		} else {
			errs = append(errs, err)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"ttft-ms", c.TTFT}, {"ttft-jitter-ms", c.TTFTJitter}, {"token-delay-ms", c.TokenDelay}, {"decode-jitter-ms", c.DecodeJitter}, {"health-delay-ms", c.HealthDelay}} {
		if d.v < 0 {
			bad(d.flag, "must not be negative, got %v", d.v)
		}
	}
	for _, r := range []struct {
		flag string
		v    float64
	}{{"prefill-tokens-per-s", c.ColdPrefillTPS}, {"cached-prefill-tokens-per-s", c.CachedPrefillTPS}} {
		if r.v < 0 || math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			bad(r.flag, "must be a finite rate >= 0, got %v", r.v)
		}
	}
	if !(c.TimeScale > 0) || math.IsInf(c.TimeScale, 0) {
		bad("time-scale", "must be a finite number > 0, got %v", c.TimeScale)
	}
	if c.NumTokens < 1 {
		bad("num-tokens", "must be >= 1, got %d", c.NumTokens)
	}
	if c.MaxConcurrent < 0 {
		bad("max-concurrent-requests", "must be >= 0 (0 = unlimited), got %d", c.MaxConcurrent)
	}
	if c.MaxWaiting < 0 {
		bad("max-waiting-requests", "must be >= 0, got %d", c.MaxWaiting)
	}
	if c.MaxBodyBytes < 1 {
		bad("max-body-bytes", "must be >= 1, got %d", c.MaxBodyBytes)
	}
	return errors.Join(errs...)
}

// kvFlags maps kvcache.Config fields to the flags that set them.
var kvFlags = map[string]string{
	"BlockTokens":    "block-size-tokens",
	"CharsPerToken":  "chars-per-token",
	"CapacityTokens": "kv-cache-capacity-tokens",
}

func (c *Config) kvConfig() kvcache.Config {
	return kvcache.Config{BlockTokens: c.BlockTokens, CharsPerToken: c.CharsPerToken, CapacityTokens: c.KVCapacityTokens}
}

// scale converts a modelled duration to wall time under TimeScale.
func (c *Config) scale(d time.Duration) time.Duration {
	if c.TimeScale == 1 {
		return d
	}
	return time.Duration(float64(d) / c.TimeScale)
}

// prefillWork is the solo time, before scaling, to prefill cold uncached and
// cached tokens: a zero rate makes that part free.
func (c *Config) prefillWork(cold, cached int) time.Duration {
	var s float64
	if c.ColdPrefillTPS > 0 {
		s += float64(cold) / c.ColdPrefillTPS
	}
	if c.CachedPrefillTPS > 0 {
		s += float64(cached) / c.CachedPrefillTPS
	}
	return time.Duration(s * float64(time.Second))
}
