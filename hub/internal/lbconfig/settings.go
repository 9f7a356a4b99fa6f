package lbconfig

import (
	"fmt"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// RendezvousWeight is the weight pulsar ranks clusters by
// (docs/design/algorithms.md#pulsar).
// The zero value is the default, max-input-tps.
type RendezvousWeight uint8

// The rendezvous weights, by their lb-config.json names.
const (
	// WeightMaxInputTPS is the generation peak input TPS Pylon keeps.
	WeightMaxInputTPS RendezvousWeight = iota
	// WeightLastMeanInputTPS is the legacy weight: the latest mean input TPS.
	WeightLastMeanInputTPS
)

// String returns the configuration name.
func (w RendezvousWeight) String() string {
	if w == WeightLastMeanInputTPS {
		return "last-mean-input-tps"
	}
	return "max-input-tps"
}

// MarshalText returns the configuration name.
func (w RendezvousWeight) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText accepts max-input-tps or last-mean-input-tps.
func (w *RendezvousWeight) UnmarshalText(b []byte) error {
	switch string(b) {
	case "max-input-tps":
		*w = WeightMaxInputTPS
	case "last-mean-input-tps":
		*w = WeightLastMeanInputTPS
	default:
		return fmt.Errorf("must be one of max-input-tps, last-mean-input-tps, got %q", b)
	}
	return nil
}

// Settings is every field a detailed algorithm object may carry, each as an
// optional value: nil means the file (or expression) did not set it, which
// matters because several defaults depend on absence (the queue SLO needs
// both bounds, band_widen_interval_ms follows the affinity wait when unset).
// The JSON names are the lb-config.json contract. Which algorithm accepts
// which field is decided by the parser, not by this struct.
type Settings struct {
	// Common to every algorithm.
	RequireCacheAffinityKey *bool    `json:"require_cache_affinity_key,omitempty"`
	RequireInputTokens      *bool    `json:"require_input_tokens,omitempty"`
	MaxInputWorkSeconds     *float64 `json:"max_input_work_seconds,omitempty"`

	// power-of-n.
	SampleCount *uint64 `json:"sample_count,omitempty"`

	// power-of-n, wait-and-widen and prefix-affinity (rejected for
	// pulsar-wait-and-widen).
	Comparator *lb.Comparator `json:"comparator,omitempty"`

	// pulsar, wait-and-widen and pulsar-wait-and-widen.
	Seed *string `json:"seed,omitempty"`

	// wait-and-widen and pulsar-wait-and-widen.
	CacheAffinityVirtualNodes          *uint64  `json:"cache_affinity_virtual_nodes,omitempty"`
	CacheAffinityBackendSelectionCount *uint64  `json:"cache_affinity_backend_selection_count,omitempty"`
	MaxQueueTimeFloorMs                *uint64  `json:"max_queue_time_floor_ms,omitempty"`
	MaxQueueTimeCeilMs                 *uint64  `json:"max_queue_time_ceil_ms,omitempty"`
	TTFTBucketSizeMs                   *uint64  `json:"ttft_bucket_size_ms,omitempty"`
	NextBucketUnlockFactor             *float64 `json:"next_bucket_unlock_factor,omitempty"`
	N                                  *uint64  `json:"n,omitempty"`
	MaxQueued                          *uint64  `json:"max_queued,omitempty"`
	IgnoreQueueTime                    *bool    `json:"ignore_queue_time,omitempty"`
	IgnoreInputProcessingTime          *bool    `json:"ignore_input_processing_time,omitempty"`
	CacheAffinityWaitMs                *uint64  `json:"cache_affinity_wait_ms,omitempty"`
	CacheAffinityInputTokensScale      *float64 `json:"cache_affinity_input_tokens_scale,omitempty"`
	PrefixAffinity                     *bool    `json:"prefix_affinity,omitempty"`

	// wait-and-widen, pulsar-wait-and-widen and prefix-affinity.
	LastClusterAffinity         *bool `json:"last_cluster_affinity,omitempty"`
	ReturningPrefersLastCluster *bool `json:"returning_prefers_last_cluster,omitempty"`

	// pulsar and pulsar-wait-and-widen.
	ConsiderKVFreeTokens *bool             `json:"consider_kv_free_tokens,omitempty"`
	RendezvousWeight     *RendezvousWeight `json:"rendezvous_weight,omitempty"`
	RTTTierMs            *uint64           `json:"rtt_tier_ms,omitempty"`

	// pulsar-wait-and-widen only.
	BandWidenIntervalMs *uint64 `json:"band_widen_interval_ms,omitempty"`
	FallbackMaxQueued   *uint64 `json:"fallback_max_queued,omitempty"`

	// prefix-affinity only.
	SplitGuard              *float64 `json:"split_guard,omitempty"`
	QueueOnSaturatedHolders *bool    `json:"queue_on_saturated_holders,omitempty"`
	PrefillAware            *bool    `json:"prefill_aware,omitempty"`
}

// fieldKind is a field's JSON type.
type fieldKind uint8

const (
	kindBool fieldKind = iota
	kindUint
	kindFloat
	kindString
	kindComparator
	kindWeight
)

// field describes one Settings field: its JSON name, the algorithms whose
// detailed object accepts it
// (docs/load-balancing.md#fields-of-a-detailed-object), and where it lives.
type field struct {
	name string
	algs algSet
	kind fieldKind
	b    func(*Settings) **bool
	u    func(*Settings) **uint64
	f    func(*Settings) **float64
	s    func(*Settings) **string
}

var (
	wwSet  = setOf(WaitAndWiden, PulsarWaitAndWiden)
	pulSet = setOf(Pulsar, PulsarWaitAndWiden)
	// sessionSet is where session classification exists: the two
	// wait-and-widen algorithms and prefix-affinity.
	sessionSet = setOf(WaitAndWiden, PulsarWaitAndWiden, PrefixAffinity)
)

// fields is every Settings field. The order is the order the parser decodes
// them in, so the first of several bad fields is always the same one.
var fields = []field{
	{name: "require_cache_affinity_key", algs: allAlgorithms, kind: kindBool, b: func(s *Settings) **bool { return &s.RequireCacheAffinityKey }},
	{name: "require_input_tokens", algs: allAlgorithms, kind: kindBool, b: func(s *Settings) **bool { return &s.RequireInputTokens }},
	{name: "max_input_work_seconds", algs: allAlgorithms, kind: kindFloat, f: func(s *Settings) **float64 { return &s.MaxInputWorkSeconds }},
	{name: "sample_count", algs: setOf(PowerOfN), kind: kindUint, u: func(s *Settings) **uint64 { return &s.SampleCount }},
	// pulsar-wait-and-widen accepts comparator at parse time and then
	// rejects it with its own message, as upstream Stargate's factory does.
	{name: "comparator", algs: setOf(PowerOfN, WaitAndWiden, PulsarWaitAndWiden, PrefixAffinity), kind: kindComparator},
	{name: "seed", algs: setOf(Pulsar, WaitAndWiden, PulsarWaitAndWiden), kind: kindString, s: func(s *Settings) **string { return &s.Seed }},
	{name: "cache_affinity_virtual_nodes", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.CacheAffinityVirtualNodes }},
	{name: "cache_affinity_backend_selection_count", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.CacheAffinityBackendSelectionCount }},
	{name: "max_queue_time_floor_ms", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.MaxQueueTimeFloorMs }},
	{name: "max_queue_time_ceil_ms", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.MaxQueueTimeCeilMs }},
	{name: "ttft_bucket_size_ms", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.TTFTBucketSizeMs }},
	{name: "next_bucket_unlock_factor", algs: wwSet, kind: kindFloat, f: func(s *Settings) **float64 { return &s.NextBucketUnlockFactor }},
	{name: "n", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.N }},
	{name: "max_queued", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.MaxQueued }},
	{name: "ignore_queue_time", algs: wwSet, kind: kindBool, b: func(s *Settings) **bool { return &s.IgnoreQueueTime }},
	{name: "ignore_input_processing_time", algs: wwSet, kind: kindBool, b: func(s *Settings) **bool { return &s.IgnoreInputProcessingTime }},
	{name: "cache_affinity_wait_ms", algs: wwSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.CacheAffinityWaitMs }},
	{name: "cache_affinity_input_tokens_scale", algs: wwSet, kind: kindFloat, f: func(s *Settings) **float64 { return &s.CacheAffinityInputTokensScale }},
	// prefix_affinity changes the affinity order of the wait-and-widen
	// algorithms; prefix-affinity is built on the prefix and needs no
	// switch.
	{name: "prefix_affinity", algs: wwSet, kind: kindBool, b: func(s *Settings) **bool { return &s.PrefixAffinity }},
	// last_cluster_affinity is accepted only by the algorithms that
	// classify sessions, so every other algorithm rejects it as an
	// unsupported field, with the same message as any other field it does
	// not take.
	{name: "last_cluster_affinity", algs: sessionSet, kind: kindBool, b: func(s *Settings) **bool { return &s.LastClusterAffinity }},
	// returning_prefers_last_cluster refines last_cluster_affinity, so it
	// is accepted where that is; it is inert while that is off.
	{name: "returning_prefers_last_cluster", algs: sessionSet, kind: kindBool, b: func(s *Settings) **bool { return &s.ReturningPrefersLastCluster }},
	{name: "consider_kv_free_tokens", algs: pulSet, kind: kindBool, b: func(s *Settings) **bool { return &s.ConsiderKVFreeTokens }},
	{name: "rendezvous_weight", algs: pulSet, kind: kindWeight},
	{name: "rtt_tier_ms", algs: pulSet, kind: kindUint, u: func(s *Settings) **uint64 { return &s.RTTTierMs }},
	{name: "band_widen_interval_ms", algs: setOf(PulsarWaitAndWiden), kind: kindUint, u: func(s *Settings) **uint64 { return &s.BandWidenIntervalMs }},
	{name: "fallback_max_queued", algs: setOf(PulsarWaitAndWiden), kind: kindUint, u: func(s *Settings) **uint64 { return &s.FallbackMaxQueued }},
	{name: "split_guard", algs: setOf(PrefixAffinity), kind: kindFloat, f: func(s *Settings) **float64 { return &s.SplitGuard }},
	{name: "queue_on_saturated_holders", algs: setOf(PrefixAffinity), kind: kindBool, b: func(s *Settings) **bool { return &s.QueueOnSaturatedHolders }},
	{name: "prefill_aware", algs: setOf(PrefixAffinity), kind: kindBool, b: func(s *Settings) **bool { return &s.PrefillAware }},
}

var fieldIndex = func() map[string]*field {
	m := make(map[string]*field, len(fields))
	for i := range fields {
		m[fields[i].name] = &fields[i]
	}
	return m
}()
