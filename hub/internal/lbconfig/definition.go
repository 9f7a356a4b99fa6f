package lbconfig

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// Defaults and bounds of the lb-config fields
// (docs/load-balancing.md#fields-of-a-detailed-object).
const (
	DefaultSampleCount            = 2
	MaxSampleCount                = 64
	DefaultN                      = 2
	DefaultVirtualNodes           = 150
	DefaultTTFTBucketSize         = 20 * time.Millisecond
	DefaultNextBucketUnlockFactor = 0.25
	DefaultInputTokensScale       = 1.0
	// DefaultReturningPrefersLastCluster is on: a returning session stays
	// on the cluster that holds its cache while that cluster has room
	// (docs/design/algorithms.md#returning-sessions-stay-put).
	DefaultReturningPrefersLastCluster = true
	// DefaultSplitGuard is prefix-affinity's split_guard
	// (docs/load-balancing.md#prefix-affinity).
	DefaultSplitGuard = 0.2
	// DefaultPrefixAffinityComparator is prefix-affinity's comparator:
	// utilisation, because among clusters with a free slot the queue
	// estimate is 0 and only utilisation still tells their load apart.
	DefaultPrefixAffinityComparator = lb.ComparatorUtilization

	// maxCount bounds counts that size allocations or loops (n, virtual
	// nodes, selection count) so they fit an int on every platform.
	maxCount = math.MaxInt32
	// maxMillis is the largest millisecond value a time.Duration holds.
	maxMillis = math.MaxInt64 / int64(time.Millisecond)
)

// Definition is one validated, normalised algorithm definition: the
// algorithm, the settings the file or expression set, and the effective
// values with every default applied. It is immutable and compared by
// identity: picker instances are kept per (routing target, *Definition), so
// two definitions with equal content still get separate instances
// (docs/load-balancing.md#which-definition-serves-a-request).
type Definition struct {
	alg      Algorithm
	settings Settings
	eff      Effective
	// index is the position in Config.defs, or -1 for a definition compiled
	// from an expression; Resolver uses it to find its per-definition state
	// without a map lookup.
	index int
}

// Effective is a definition's values after defaults and normalisation. The
// factory builds pickers from it; fields an algorithm does not use keep
// their defaults and mean nothing for it.
type Effective struct {
	// RequireCacheAffinityKey turns a request without x-cache-affinity-key
	// into a 400.
	RequireCacheAffinityKey bool
	// RequireInputTokens is declarative only: the proxy requires
	// x-input-tokens on every request anyway. Upstream Stargate stores the
	// field and never reads it; it is accepted so its files load.
	RequireInputTokens bool
	// MaxInputWorkSeconds is the input-work admission limit
	// (docs/design/hub-request.md#input-work-admission); it
	// applies only when HasInputWorkLimit. A value ≤ 0 rejects any request
	// that has work.
	MaxInputWorkSeconds float64
	HasInputWorkLimit   bool

	// SampleCount is power-of-n's sample size, 1..64 (default 2).
	SampleCount int
	// Comparator orders clusters for power-of-n and wait-and-widen (default
	// ttft) and prefix-affinity (default utilization). HasComparator is
	// false for pulsar-wait-and-widen, which compares by least queue time,
	// then utilisation (docs/design/algorithms.md#pulsar-wait-and-widen).
	Comparator    lb.Comparator
	HasComparator bool
	// Seed salts pulsar and affinity-ring hashes (default "").
	Seed string

	// VirtualNodes is the affinity ring's nodes per cluster (unset → 150,
	// 0 → 1).
	VirtualNodes int
	// SelectionCount is the affinity group size k; 0 means cache affinity
	// is off (unset or 0 in the file).
	SelectionCount int
	// QueueSLO is true only when both MaxQueueTimeFloor and
	// MaxQueueTimeCeil were set; the bounds are kept as written, not
	// reordered.
	QueueSLO          bool
	MaxQueueTimeFloor time.Duration
	MaxQueueTimeCeil  time.Duration
	// TTFTBucketSize is B (default 20 ms; 0 means only equal TTFTs share a
	// bucket).
	TTFTBucketSize time.Duration
	// NextBucketUnlockFactor is f (default 0.25, no range check).
	NextBucketUnlockFactor float64
	// N is the sample size within unlocked buckets (unset → 2, 0 → 1).
	N int
	// MaxQueued is the queue allowance above max engine concurrency.
	MaxQueued                 uint64
	IgnoreQueueTime           bool
	IgnoreInputProcessingTime bool
	// CacheAffinityWait is X, how long the affinity group is preferred
	// before the global phase (default 0).
	CacheAffinityWait time.Duration
	// CacheAffinityInputTokensScale discounts prefill inside the affinity
	// group, in [0, 1] (default 1).
	CacheAffinityInputTokensScale float64
	// LastClusterAffinity enables session classification
	// (docs/design/hub-request.md#session-classification).
	LastClusterAffinity bool
	// ReturningPrefersLastCluster chooses a returning session's last
	// cluster before the rest of its affinity group (prefix-affinity:
	// before the prefix index's holders) whenever it has room (default
	// true; off is upstream Stargate's behaviour, and for prefix-affinity
	// lets the index alone decide).
	ReturningPrefersLastCluster bool
	// PrefixAffinity is the wait-and-widen algorithms' prefix_affinity
	// option (default false): the prompt's prefix holders lead the
	// affinity order
	// (docs/load-balancing.md#prefix_affinity-on-wait-and-widen-and-pulsar-wait-and-widen).
	PrefixAffinity bool
	// SplitGuard is prefix-affinity's split_guard in [0, 1] (default 0.2).
	SplitGuard float64
	// QueueOnSaturatedHolders is prefix-affinity's
	// queue_on_saturated_holders (default true).
	QueueOnSaturatedHolders bool
	// PrefillAware is prefix-affinity's prefill_aware (default false).
	PrefillAware bool

	// ConsiderKVFreeTokens skips clusters without enough free KV cache.
	ConsiderKVFreeTokens bool
	// RendezvousWeight is pulsar's weight (default max-input-tps).
	RendezvousWeight RendezvousWeight
	// RTTTier is the RTT gap that starts a new tier of the pulsar ranking
	// (docs/design/algorithms.md#rtt-tiers). The default, 0, ranks without
	// regard to RTT, as upstream Stargate does: with every key's first
	// choice in the nearest region, that region must carry the whole load,
	// and in the routing simulator that cost more under load than the RTT
	// it saved when idle (docs/load-balancing.md#rtt-tiers).
	RTTTier time.Duration

	// BandWidenInterval is S for pulsar-wait-and-widen. When
	// BandWidenIntervalSet is false it was not configured and follows the
	// affinity wait in effect for the request, which for a new or stale
	// session is 0 rather than CacheAffinityWait
	// (docs/design/algorithms.md#band-widening); see
	// BandWidenIntervalFor. An explicit 0 opens every band at X.
	BandWidenInterval    time.Duration
	BandWidenIntervalSet bool
	// FallbackMaxQueued is the queue allowance of the fallback phase
	// (default 0: overflow needs a free engine slot).
	FallbackMaxQueued uint64
}

// BandWidenIntervalFor returns the band interval to use when the affinity
// wait in effect is wait: the configured interval, or wait when none was
// configured.
func (e *Effective) BandWidenIntervalFor(wait time.Duration) time.Duration {
	if e.BandWidenIntervalSet {
		return e.BandWidenInterval
	}
	return wait
}

// Algorithm returns the definition's algorithm.
func (d *Definition) Algorithm() Algorithm { return d.alg }

// Settings returns a copy of what the file or expression set. The pointers
// it holds are shared with the definition and must not be written through.
func (d *Definition) Settings() Settings { return d.settings }

// Effective returns the normalised values.
func (d *Definition) Effective() *Effective {
	e := d.eff
	return &e
}

// String returns the canonical algorithm name, for logs.
func (d *Definition) String() string { return d.alg.String() }

// newDefinition validates s for alg and applies the defaults. It assumes the
// caller already rejected fields alg does not accept; it re-checks the ones
// whose rejection has its own message.
func newDefinition(alg Algorithm, s Settings) (*Definition, error) {
	e := Effective{
		SampleCount:                   DefaultSampleCount,
		HasComparator:                 alg != PulsarWaitAndWiden,
		VirtualNodes:                  DefaultVirtualNodes,
		TTFTBucketSize:                DefaultTTFTBucketSize,
		NextBucketUnlockFactor:        DefaultNextBucketUnlockFactor,
		N:                             DefaultN,
		CacheAffinityInputTokensScale: DefaultInputTokensScale,
		ReturningPrefersLastCluster:   DefaultReturningPrefersLastCluster,
		SplitGuard:                    DefaultSplitGuard,
		QueueOnSaturatedHolders:       true,
	}
	if alg == PrefixAffinity {
		e.Comparator = DefaultPrefixAffinityComparator
	}
	fe := func(field, format string, args ...any) error {
		return &ConfigError{Algorithm: alg.String(), Field: field,
			Err: &lb.FieldError{Algorithm: alg.String(), Field: field, Problem: fmt.Sprintf(format, args...)}}
	}
	e.RequireCacheAffinityKey = deref(s.RequireCacheAffinityKey)
	e.RequireInputTokens = deref(s.RequireInputTokens)
	if s.MaxInputWorkSeconds != nil {
		if v := *s.MaxInputWorkSeconds; math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fe("max_input_work_seconds", "must be a finite number, got %v", v)
		}
		e.MaxInputWorkSeconds, e.HasInputWorkLimit = *s.MaxInputWorkSeconds, true
	}
	if s.SampleCount != nil {
		if v := *s.SampleCount; v < 1 || v > MaxSampleCount {
			return nil, fe("sample_count", "must be between 1 and %d, got %d", MaxSampleCount, v)
		}
		e.SampleCount = int(*s.SampleCount)
	}
	if s.Comparator != nil {
		if alg == PulsarWaitAndWiden {
			// Upstream Stargate's exact text, so operators see the same
			// message from either hub.
			return nil, &ConfigError{Algorithm: alg.String(), Field: "comparator",
				Err: errors.New("comparator is not supported for pulsar-wait-and-widen")}
		}
		if !s.Comparator.Valid() {
			return nil, fe("comparator", "must be one of %s, got %v", comparatorList, *s.Comparator)
		}
		e.Comparator = *s.Comparator
	}
	e.Seed = deref(s.Seed)
	var err error
	count := func(name string, p *uint64, dst *int) {
		if p == nil || err != nil {
			return
		}
		if *p > maxCount {
			err = fe(name, "must be at most %d, got %d", maxCount, *p)
			return
		}
		*dst = int(*p)
	}
	millis := func(name string, p *uint64, dst *time.Duration) {
		if p == nil || err != nil {
			return
		}
		if *p > uint64(maxMillis) {
			err = fe(name, "must be at most %d, got %d", maxMillis, *p)
			return
		}
		*dst = time.Duration(*p) * time.Millisecond
	}
	count("cache_affinity_virtual_nodes", s.CacheAffinityVirtualNodes, &e.VirtualNodes)
	count("cache_affinity_backend_selection_count", s.CacheAffinityBackendSelectionCount, &e.SelectionCount)
	count("n", s.N, &e.N)
	millis("max_queue_time_floor_ms", s.MaxQueueTimeFloorMs, &e.MaxQueueTimeFloor)
	millis("max_queue_time_ceil_ms", s.MaxQueueTimeCeilMs, &e.MaxQueueTimeCeil)
	millis("ttft_bucket_size_ms", s.TTFTBucketSizeMs, &e.TTFTBucketSize)
	millis("cache_affinity_wait_ms", s.CacheAffinityWaitMs, &e.CacheAffinityWait)
	millis("band_widen_interval_ms", s.BandWidenIntervalMs, &e.BandWidenInterval)
	millis("rtt_tier_ms", s.RTTTierMs, &e.RTTTier)
	if err != nil {
		return nil, err
	}
	// Normalisation upstream Stargate's factory does silently; a file
	// that relies on it must load the same here.
	if e.VirtualNodes == 0 {
		e.VirtualNodes = 1
	}
	if e.N == 0 {
		e.N = 1
	}
	e.QueueSLO = s.MaxQueueTimeFloorMs != nil && s.MaxQueueTimeCeilMs != nil
	if s.NextBucketUnlockFactor != nil {
		if v := *s.NextBucketUnlockFactor; math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fe("next_bucket_unlock_factor", "must be a finite number, got %v", v)
		}
		e.NextBucketUnlockFactor = *s.NextBucketUnlockFactor
	}
	e.MaxQueued = deref(s.MaxQueued)
	e.IgnoreQueueTime = deref(s.IgnoreQueueTime)
	e.IgnoreInputProcessingTime = deref(s.IgnoreInputProcessingTime)
	if s.CacheAffinityInputTokensScale != nil {
		// NaN fails both comparisons, so it is rejected too.
		if v := *s.CacheAffinityInputTokensScale; !(v >= 0 && v <= 1) {
			return nil, fe("cache_affinity_input_tokens_scale", "must be between 0.0 and 1.0, got %s", formatFloat(v))
		}
		e.CacheAffinityInputTokensScale = *s.CacheAffinityInputTokensScale
	}
	e.LastClusterAffinity = deref(s.LastClusterAffinity)
	if s.ReturningPrefersLastCluster != nil {
		e.ReturningPrefersLastCluster = *s.ReturningPrefersLastCluster
	}
	e.PrefixAffinity = deref(s.PrefixAffinity)
	if s.SplitGuard != nil {
		// NaN fails both comparisons, so it is rejected too.
		if v := *s.SplitGuard; !(v >= 0 && v <= 1) {
			return nil, fe("split_guard", "must be between 0.0 and 1.0, got %s", formatFloat(v))
		}
		e.SplitGuard = *s.SplitGuard
	}
	if s.QueueOnSaturatedHolders != nil {
		e.QueueOnSaturatedHolders = *s.QueueOnSaturatedHolders
	}
	if s.PrefillAware != nil {
		e.PrefillAware = *s.PrefillAware
	}
	if s.ConsiderKVFreeTokens != nil && !alg.usesPulsarRanking() {
		// Unreachable from a file (an unsupported field); upstream
		// Stargate's factory keeps the same guard.
		return nil, fe("consider_kv_free_tokens", "is supported only for pulsar and pulsar-wait-and-widen")
	}
	e.ConsiderKVFreeTokens = deref(s.ConsiderKVFreeTokens)
	e.RendezvousWeight = deref(s.RendezvousWeight)
	e.BandWidenIntervalSet = s.BandWidenIntervalMs != nil
	e.FallbackMaxQueued = deref(s.FallbackMaxQueued)
	return &Definition{alg: alg, settings: s, eff: e, index: -1}, nil
}

const comparatorList = "ttft, queue-time, input-work-seconds, utilization, num-requests-queued"

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
