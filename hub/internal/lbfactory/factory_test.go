package lbfactory

import (
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/lb/prefixaffinity"
	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/lb/pwnw"
	"github.com/stargate-router/stargate/hub/internal/lb/random"
	"github.com/stargate-router/stargate/hub/internal/lb/roundrobin"
	"github.com/stargate-router/stargate/hub/internal/lb/wnw"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
)

// build parses a one-model config and builds its definition.
func build(t *testing.T, entry string) lb.Picker {
	t.Helper()
	cfg, err := lbconfig.Parse([]byte(`{"models":{"m":` + entry + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	def, ok := cfg.Resolve("m", 0)
	if !ok {
		t.Fatal("model m did not resolve")
	}
	p, err := New(def)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEveryAlgorithm(t *testing.T) {
	if p, ok := build(t, `{"algorithm":"power-of-n","sample_count":5,"comparator":"queue-time"}`).(*powerofn.Picker); !ok ||
		p.SampleCount() != 5 || p.Comparator() != lb.ComparatorQueueTime {
		t.Errorf("power-of-n: %#v", p)
	}
	if _, ok := build(t, `"random"`).(*random.Picker); !ok {
		t.Error("random")
	}
	if _, ok := build(t, `"round-robin"`).(*roundrobin.Picker); !ok {
		t.Error("round-robin")
	}
	pp, ok := build(t, `{"algorithm":"pulsar","seed":"s","consider_kv_free_tokens":true,"rendezvous_weight":"last-mean-input-tps","rtt_tier_ms":12}`).(*pulsar.Picker)
	if !ok || pp.Config() != (pulsar.Config{Seed: "s", ConsiderKVFreeTokens: true, RendezvousWeight: pulsar.WeightLastMeanInputTPS,
		RTTTier: 12 * time.Millisecond}) || pp.Ranker().TierGap() != 12*time.Millisecond {
		t.Errorf("pulsar: %#v", pp)
	}
	if pp := build(t, `"pulsar"`).(*pulsar.Picker); pp.Config() != (pulsar.Config{}) || pp.Ranker().TierGap() != 0 {
		t.Errorf("pulsar defaults: %#v (RTT tiers are off unless configured)", pp.Config())
	}

	w, ok := build(t, `{"algorithm":"wait-and-widen","seed":"s","comparator":"utilization","cache_affinity_virtual_nodes":7,
		"cache_affinity_backend_selection_count":3,"max_queue_time_floor_ms":10,"max_queue_time_ceil_ms":90,"ttft_bucket_size_ms":5,
		"next_bucket_unlock_factor":0.5,"n":4,"max_queued":6,"ignore_queue_time":true,"ignore_input_processing_time":true,
		"cache_affinity_wait_ms":250,"cache_affinity_input_tokens_scale":0.3,"last_cluster_affinity":true}`).(*wnw.Picker)
	want := wnw.Config{Seed: "s", UseComparator: true, Comparator: lb.ComparatorUtilization, VirtualNodes: 7, SelectionCount: 3,
		QueueSLO: true, QueueFloorMs: 10, QueueCeilMs: 90, BucketMs: 5, UnlockFactor: 0.5, N: 4, MaxQueued: 6,
		IgnoreQueueTime: true, IgnoreInputProcessingTime: true, AffinityWait: 250 * time.Millisecond, InputTokensScale: 0.3,
		LastClusterAffinity: true, ReturningPrefersLast: true}
	if !ok || w.Config() != want {
		t.Errorf("wait-and-widen:\n got %+v\nwant %+v", w.Config(), want)
	}
	if c := build(t, `{"algorithm":"wait-and-widen","last_cluster_affinity":true,"returning_prefers_last_cluster":false}`).(*wnw.Picker).Config(); c.ReturningPrefersLast {
		t.Errorf("returning_prefers_last_cluster false did not reach wait-and-widen: %+v", c)
	}

	pw, ok := build(t, `{"algorithm":"pulsar-wait-and-widen","cache_affinity_wait_ms":100,"band_widen_interval_ms":40,
		"fallback_max_queued":2,"consider_kv_free_tokens":true,"last_cluster_affinity":true,"returning_prefers_last_cluster":false,
		"rtt_tier_ms":7}`).(*pwnw.Picker)
	if !ok {
		t.Fatal("pulsar-wait-and-widen")
	}
	c := pw.Config()
	if c.UseComparator || c.AffinityWait != 100*time.Millisecond || c.BandWidenInterval != 40*time.Millisecond || !c.BandWidenSet ||
		c.FallbackMaxQueued != 2 || !c.ConsiderKVFreeTokens || !c.LastClusterAffinity || c.BucketMs != 20 || c.N != 2 ||
		c.ReturningPrefersLast || c.RTTTier != 7*time.Millisecond {
		t.Errorf("pulsar-wait-and-widen: %+v", c)
	}
	if c := build(t, `"pulsar-wait-and-widen"`).(*pwnw.Picker).Config(); c.BandWidenSet || c.InputTokensScale != 1 ||
		!c.ReturningPrefersLast || c.RTTTier != 0 || c.PrefixAffinity {
		t.Errorf("pulsar-wait-and-widen defaults: %+v", c)
	}
	if c := build(t, `{"algorithm":"pulsar-wait-and-widen","prefix_affinity":true}`).(*pwnw.Picker).Config(); !c.PrefixAffinity {
		t.Errorf("prefix_affinity did not reach pulsar-wait-and-widen: %+v", c)
	}
	if c := build(t, `{"algorithm":"wait-and-widen","prefix_affinity":true}`).(*wnw.Picker).Config(); !c.PrefixAffinity {
		t.Errorf("prefix_affinity did not reach wait-and-widen: %+v", c)
	}

	pa, ok := build(t, `{"algorithm":"prefix-affinity","comparator":"queue-time","split_guard":0.35,"last_cluster_affinity":true,
		"returning_prefers_last_cluster":false,"queue_on_saturated_holders":false}`).(*prefixaffinity.Picker)
	if want := (prefixaffinity.Config{Comparator: lb.ComparatorQueueTime, SplitGuard: 0.35, LastClusterAffinity: true}); !ok || pa.Config() != want {
		t.Errorf("prefix-affinity: %#v", pa)
	}
	if pa := build(t, `"prefix-affinity"`).(*prefixaffinity.Picker); pa.Config() != prefixaffinity.DefaultConfig() {
		t.Errorf("prefix-affinity defaults: %+v, want %+v", pa.Config(), prefixaffinity.DefaultConfig())
	}
}

// Every call builds a new instance: per-target state is never shared.
// (random has no state: its pickers are zero-size and may share an address.)
func TestFreshInstances(t *testing.T) {
	cfg := lbconfig.Permissive()
	for _, def := range cfg.Definitions() {
		if def.Algorithm() == lbconfig.Random {
			continue
		}
		a, errA := New(def)
		b, errB := New(def)
		if errA != nil || errB != nil || a == b {
			t.Errorf("%s: %v %v, shared=%v", def, errA, errB, a == b)
		}
	}
}
