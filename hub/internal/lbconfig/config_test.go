package lbconfig

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// TestParseErrors pins every configuration error message: each names the
// place in the file, and where a field or algorithm is at fault, both.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, json, want string
		alg, field       string
	}{
		{"not an object", `[]`, "lb config must be a JSON object: got []", "", ""},
		{"syntax", `{"default":`, "lb config must be a JSON object: unexpected end of JSON input", "", ""},
		{"unknown top-level", `{"defaults":"random","zz":1}`, "unknown field(s): defaults, zz (want default, request_algorithms, models)", "", "defaults, zz"},
		{"default object", `{"default":{"algorithm":"pulsar"}}`, "default: default must be an algorithm name only, not a detailed config object; it always has default settings (give settings under models or request_algorithms)", "", ""},
		{"default number", `{"default":1}`, "default: default must be an algorithm name", "", ""},
		{"default case-sensitive", `{"default":"Pulsar"}`, `default: unknown load-balancer algorithm "Pulsar" (want one of power-of-n, wait-and-widen, round-robin, random, pulsar, pulsar-wait-and-widen, prefix-affinity or an alias; names are case-sensitive)`, "", ""},
		{"entry type", `{"models":{"llama":7}}`, `models["llama"]: load-balancer model config must be an algorithm name or detailed config object`, "", ""},
		{"entry array", `{"request_algorithms":{"pulsar":[]}}`, `request_algorithms["pulsar"]: load-balancer model config must be an algorithm name or detailed config object`, "", ""},
		{"missing tag", `{"models":{"llama":{"seed":"x"}}}`, `models["llama"]: detailed config object needs an "algorithm" field`, "", "algorithm"},
		{"tag not string", `{"models":{"llama":{"algorithm":null}}}`, `models["llama"]: algorithm must be an algorithm name`, "", "algorithm"},
		{"unsupported sorted", `{"models":{"llama":{"algorithm":"power-of-n","seed":"x","n":2}}}`, `models["llama"]: power-of-n config does not support field(s): n, seed`, "power-of-n", "n, seed"},
		{"unsupported uses canonical name", `{"models":{"m":{"algorithm":"groq-multiregion","consider_kv_free_tokens":true}}}`, `models["m"]: wait-and-widen config does not support field(s): consider_kv_free_tokens`, "wait-and-widen", "consider_kv_free_tokens"},
		{"round-robin takes nothing", `{"models":{"m":{"algorithm":"round-robin","comparator":"ttft"}}}`, `models["m"]: round-robin config does not support field(s): comparator`, "round-robin", "comparator"},
		{"random takes nothing", `{"models":{"m":{"algorithm":"random","sample_count":2}}}`, `models["m"]: random config does not support field(s): sample_count`, "random", "sample_count"},
		{"pulsar fields", `{"models":{"m":{"algorithm":"pulsar","n":1,"band_widen_interval_ms":3}}}`, `models["m"]: pulsar config does not support field(s): band_widen_interval_ms, n`, "pulsar", "band_widen_interval_ms, n"},
		{"W&W band", `{"models":{"m":{"algorithm":"wait-and-widen","band_widen_interval_ms":1,"fallback_max_queued":1,"rendezvous_weight":"max-input-tps"}}}`, `models["m"]: wait-and-widen config does not support field(s): band_widen_interval_ms, fallback_max_queued, rendezvous_weight`, "wait-and-widen", "band_widen_interval_ms, fallback_max_queued, rendezvous_weight"},
		{"last_cluster_affinity power-of-n", `{"models":{"m":{"algorithm":"power-of-n","last_cluster_affinity":true}}}`, `models["m"]: power-of-n config does not support field(s): last_cluster_affinity`, "power-of-n", "last_cluster_affinity"},
		{"last_cluster_affinity pulsar", `{"request_algorithms":{"pulsar":{"algorithm":"pulsar","last_cluster_affinity":false}}}`, `request_algorithms["pulsar"]: pulsar config does not support field(s): last_cluster_affinity`, "pulsar", "last_cluster_affinity"},
		{"last_cluster_affinity random", `{"models":{"m":{"algorithm":"random","last_cluster_affinity":true}}}`, `models["m"]: random config does not support field(s): last_cluster_affinity`, "random", "last_cluster_affinity"},
		{"last_cluster_affinity round-robin", `{"models":{"m":{"algorithm":"round-robin","last_cluster_affinity":true}}}`, `models["m"]: round-robin config does not support field(s): last_cluster_affinity`, "round-robin", "last_cluster_affinity"},
		{"returning_prefers_last_cluster pulsar", `{"models":{"m":{"algorithm":"pulsar","returning_prefers_last_cluster":false}}}`, `models["m"]: pulsar config does not support field(s): returning_prefers_last_cluster`, "pulsar", "returning_prefers_last_cluster"},
		{"returning_prefers_last_cluster power-of-n", `{"models":{"m":{"algorithm":"power-of-n","returning_prefers_last_cluster":true}}}`, `models["m"]: power-of-n config does not support field(s): returning_prefers_last_cluster`, "power-of-n", "returning_prefers_last_cluster"},
		{"returning_prefers_last_cluster type", `{"models":{"m":{"algorithm":"wait-and-widen","returning_prefers_last_cluster":1}}}`, `models["m"]: wait-and-widen returning_prefers_last_cluster must be true or false, got 1`, "wait-and-widen", "returning_prefers_last_cluster"},
		{"rtt_tier_ms wait-and-widen", `{"models":{"m":{"algorithm":"wait-and-widen","rtt_tier_ms":10}}}`, `models["m"]: wait-and-widen config does not support field(s): rtt_tier_ms`, "wait-and-widen", "rtt_tier_ms"},
		{"rtt_tier_ms random", `{"models":{"m":{"algorithm":"random","rtt_tier_ms":10}}}`, `models["m"]: random config does not support field(s): rtt_tier_ms`, "random", "rtt_tier_ms"},
		{"rtt_tier_ms negative", `{"models":{"m":{"algorithm":"pulsar","rtt_tier_ms":-5}}}`, `models["m"]: pulsar rtt_tier_ms must be a non-negative integer, got -5`, "pulsar", "rtt_tier_ms"},
		{"rtt_tier_ms fraction", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","rtt_tier_ms":2.5}}}`, `models["m"]: pulsar-wait-and-widen rtt_tier_ms must be a non-negative integer, got 2.5`, "pulsar-wait-and-widen", "rtt_tier_ms"},
		{"rtt_tier_ms overflow", `{"models":{"m":{"algorithm":"pulsar","rtt_tier_ms":9223372036855}}}`, `models["m"]: pulsar rtt_tier_ms must be at most 9223372036854, got 9223372036855`, "pulsar", "rtt_tier_ms"},
		{"split_guard range", `{"models":{"m":{"algorithm":"prefix-affinity","split_guard":1.5}}}`, `models["m"]: prefix-affinity split_guard must be between 0.0 and 1.0, got 1.5`, "prefix-affinity", "split_guard"},
		{"split_guard negative", `{"models":{"m":{"algorithm":"prefix-affinity","split_guard":-0.2}}}`, `models["m"]: prefix-affinity split_guard must be between 0.0 and 1.0, got -0.2`, "prefix-affinity", "split_guard"},
		{"split_guard type", `{"models":{"m":{"algorithm":"prefix-affinity","split_guard":"0.2"}}}`, `models["m"]: prefix-affinity split_guard must be a number, got "0.2"`, "prefix-affinity", "split_guard"},
		{"split_guard elsewhere", `{"models":{"m":{"algorithm":"wait-and-widen","split_guard":0.2}}}`, `models["m"]: wait-and-widen config does not support field(s): split_guard`, "wait-and-widen", "split_guard"},
		{"prefill_aware type", `{"models":{"m":{"algorithm":"prefix-affinity","prefill_aware":"yes"}}}`, `models["m"]: prefix-affinity prefill_aware must be true or false, got "yes"`, "prefix-affinity", "prefill_aware"},
		{"prefill_aware elsewhere", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","prefill_aware":true}}}`, `models["m"]: pulsar-wait-and-widen config does not support field(s): prefill_aware`, "pulsar-wait-and-widen", "prefill_aware"},
		{"prefix-affinity fields", `{"models":{"m":{"algorithm":"prefix-affinity","n":2,"prefix_affinity":true,"seed":"x"}}}`, `models["m"]: prefix-affinity config does not support field(s): n, prefix_affinity, seed`, "prefix-affinity", "n, prefix_affinity, seed"},
		{"prefix_affinity pulsar", `{"models":{"m":{"algorithm":"pulsar","prefix_affinity":true}}}`, `models["m"]: pulsar config does not support field(s): prefix_affinity`, "pulsar", "prefix_affinity"},
		{"prefix_affinity type", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","prefix_affinity":"yes"}}}`, `models["m"]: pulsar-wait-and-widen prefix_affinity must be true or false, got "yes"`, "pulsar-wait-and-widen", "prefix_affinity"},
		{"prefix-affinity comparator", `{"models":{"m":{"algorithm":"prefix-affinity","comparator":"least"}}}`, `models["m"]: prefix-affinity comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued, got "least"`, "prefix-affinity", "comparator"},
		{"sample_count 0", `{"models":{"m":{"algorithm":"power-of-n","sample_count":0}}}`, `models["m"]: power-of-n sample_count must be between 1 and 64, got 0`, "power-of-n", "sample_count"},
		{"sample_count 65", `{"models":{"m":{"algorithm":"powerOfN","sample_count":65}}}`, `models["m"]: power-of-n sample_count must be between 1 and 64, got 65`, "power-of-n", "sample_count"},
		{"comparator unknown", `{"models":{"m":{"algorithm":"power-of-n","comparator":"fastest"}}}`, `models["m"]: power-of-n comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued, got "fastest"`, "power-of-n", "comparator"},
		{"comparator null", `{"models":{"m":{"algorithm":"wait-and-widen","comparator":null}}}`, `models["m"]: wait-and-widen comparator must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued, got null`, "wait-and-widen", "comparator"},
		{"comparator on P-W&W", `{"models":{"m":{"algorithm":"pulsar-multiregion","comparator":"ttft"}}}`, `models["m"]: comparator is not supported for pulsar-wait-and-widen`, "pulsar-wait-and-widen", "comparator"},
		{"scale range", `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":1.5}}}`, `models["m"]: wait-and-widen cache_affinity_input_tokens_scale must be between 0.0 and 1.0, got 1.5`, "wait-and-widen", "cache_affinity_input_tokens_scale"},
		{"scale negative", `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","cache_affinity_input_tokens_scale":-0.1}}}`, `models["m"]: pulsar-wait-and-widen cache_affinity_input_tokens_scale must be between 0.0 and 1.0, got -0.1`, "pulsar-wait-and-widen", "cache_affinity_input_tokens_scale"},
		{"bool type", `{"models":{"m":{"algorithm":"random","require_cache_affinity_key":"yes"}}}`, `models["m"]: random require_cache_affinity_key must be true or false, got "yes"`, "random", "require_cache_affinity_key"},
		{"uint negative", `{"models":{"m":{"algorithm":"wait-and-widen","n":-1}}}`, `models["m"]: wait-and-widen n must be a non-negative integer, got -1`, "wait-and-widen", "n"},
		{"uint fraction", `{"models":{"m":{"algorithm":"wait-and-widen","max_queued":1.5}}}`, `models["m"]: wait-and-widen max_queued must be a non-negative integer, got 1.5`, "wait-and-widen", "max_queued"},
		{"float type", `{"models":{"m":{"algorithm":"pulsar","max_input_work_seconds":"3"}}}`, `models["m"]: pulsar max_input_work_seconds must be a number, got "3"`, "pulsar", "max_input_work_seconds"},
		{"string type", `{"models":{"m":{"algorithm":"pulsar","seed":5}}}`, `models["m"]: pulsar seed must be a string, got 5`, "pulsar", "seed"},
		{"weight name", `{"models":{"m":{"algorithm":"pulsar","rendezvous_weight":"tps"}}}`, `models["m"]: pulsar rendezvous_weight must be one of max-input-tps, last-mean-input-tps, got "tps"`, "pulsar", "rendezvous_weight"},
		{"ms overflow", `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_wait_ms":18446744073709551615}}}`, `models["m"]: wait-and-widen cache_affinity_wait_ms must be at most 9223372036854, got 18446744073709551615`, "wait-and-widen", "cache_affinity_wait_ms"},
		{"key mismatch", `{"request_algorithms":{"pulsar":"random"}}`, `request_algorithms["pulsar"]: request_algorithms key pulsar does not match configured algorithm random`, "random", ""},
		{"key mismatch detailed", `{"models":{"llama":{"algorithm":"random","request_algorithms":{"pulsar":{"algorithm":"wait-and-widen"}}}}}`, `models["llama"].request_algorithms["pulsar"]: request_algorithms key pulsar does not match configured algorithm wait-and-widen`, "wait-and-widen", ""},
		{"key unknown", `{"request_algorithms":{"fast":"random"}}`, `request_algorithms["fast"]: request_algorithms key fast does not match configured algorithm random`, "random", ""},
		{"duplicate via alias", `{"request_algorithms":{"power-of-n":"power-of-n","power-of-two":"powerof2"}}`, `request_algorithms["power-of-two"]: request_algorithms keys power-of-n and power-of-two both name algorithm power-of-n`, "power-of-n", ""},
		{"field error in nested model entry", `{"models":{"llama":{"algorithm":"random","request_algorithms":{"pulsar":{"algorithm":"pulsar","n":3}}}}}`, `models["llama"].request_algorithms["pulsar"]: pulsar config does not support field(s): n`, "pulsar", "n"},
		{"discarded nested still parsed", `{"request_algorithms":{"pulsar":{"algorithm":"pulsar","request_algorithms":{"x":5}}}}`, `request_algorithms["pulsar"].request_algorithms["x"]: load-balancer model config must be an algorithm name or detailed config object`, "", ""},
		{"models not object", `{"models":[]}`, `models: must be an object of model id to entry: got []`, "", ""},
		{"request_algorithms not object", `{"request_algorithms":"pulsar"}`, `request_algorithms: must be an object of algorithm name to entry: got "pulsar"`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.json))
			if err == nil {
				t.Fatalf("Parse(%s) succeeded", tc.json)
			}
			if err.Error() != tc.want {
				t.Fatalf("Parse(%s)\n got: %s\nwant: %s", tc.json, err, tc.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			if ce.Algorithm != tc.alg || ce.Field != tc.field {
				t.Errorf("Algorithm, Field = %q, %q; want %q, %q", ce.Algorithm, ce.Field, tc.alg, tc.field)
			}
		})
	}
}

func TestFieldErrorIsExposed(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{"models":{"m":{"algorithm":"power-of-n","sample_count":99}}}`))
	var fe *lb.FieldError
	if !errors.As(err, &fe) || fe.Algorithm != "power-of-n" || fe.Field != "sample_count" {
		t.Fatalf("errors.As(*lb.FieldError) = %v (%v)", fe, err)
	}
}

func mustParse(t testing.TB, s string) *Config {
	t.Helper()
	c, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return c
}

func modelDef(t *testing.T, c *Config, model string) *Definition {
	t.Helper()
	d, ok := c.Resolve(model, 0)
	if !ok {
		t.Fatalf("no definition for %q", model)
	}
	return d
}

// TestDefaults checks the documented defaults of a bare entry of each
// algorithm, and that null means unset.
func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"models":{
		"pon":"power-of-n", "ww":"wait-and-widen", "pww":"pulsar-wait-and-widen", "pul":"pulsar",
		"nulls":{"algorithm":"wait-and-widen","n":null,"seed":null,"cache_affinity_virtual_nodes":null,"max_queue_time_floor_ms":null}}}`)
	want := Effective{
		SampleCount: 2, HasComparator: true, Comparator: lb.ComparatorTTFT, VirtualNodes: 150,
		TTFTBucketSize: 20 * time.Millisecond, NextBucketUnlockFactor: 0.25, N: 2, CacheAffinityInputTokensScale: 1,
		ReturningPrefersLastCluster: true, RendezvousWeight: WeightMaxInputTPS, RTTTier: 0, SplitGuard: 0.2, QueueOnSaturatedHolders: true,
	}
	for _, m := range []string{"pon", "ww", "pul", "nulls"} {
		if got := *modelDef(t, c, m).Effective(); got != want {
			t.Errorf("%s: %+v\nwant %+v", m, got, want)
		}
	}
	pww := want
	pww.HasComparator = false
	if got := *modelDef(t, c, "pww").Effective(); got != pww {
		t.Errorf("pww: %+v", got)
	}
	if s := modelDef(t, c, "nulls").Settings(); s.N != nil || s.Seed != nil {
		t.Errorf("null set a field: %+v", s)
	}
}

// TestNormalisation covers the values a file may give that the factory
// normalises silently (docs/load-balancing.md#fields-of-a-detailed-object).
func TestNormalisation(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"models":{
		"zeros":{"algorithm":"wait-and-widen","n":0,"cache_affinity_virtual_nodes":0,"cache_affinity_backend_selection_count":0,"ttft_bucket_size_ms":0},
		"set":{"algorithm":"pulsar-wait-and-widen","n":5,"cache_affinity_virtual_nodes":7,"cache_affinity_backend_selection_count":3,
			"max_queue_time_floor_ms":500,"max_queue_time_ceil_ms":100,"next_bucket_unlock_factor":-2,"max_queued":4,
			"ignore_queue_time":true,"ignore_input_processing_time":true,"cache_affinity_wait_ms":30,
			"cache_affinity_input_tokens_scale":0,"band_widen_interval_ms":0,"fallback_max_queued":2,
			"consider_kv_free_tokens":true,"rendezvous_weight":"last-mean-input-tps","seed":"s","last_cluster_affinity":true,
			"returning_prefers_last_cluster":false,"rtt_tier_ms":15,
			"require_cache_affinity_key":true,"require_input_tokens":true,"max_input_work_seconds":-1},
		"floor":{"algorithm":"wait-and-widen","max_queue_time_floor_ms":10,"comparator":"utilization"},
		"pon":{"algorithm":"power-of-n","sample_count":64,"comparator":"num-requests-queued"}}}`)
	z := modelDef(t, c, "zeros").Effective()
	if z.N != 1 || z.VirtualNodes != 1 || z.SelectionCount != 0 || z.TTFTBucketSize != 0 {
		t.Errorf("zeros: %+v", z)
	}
	s := modelDef(t, c, "set").Effective()
	want := Effective{
		RequireCacheAffinityKey: true, RequireInputTokens: true, MaxInputWorkSeconds: -1, HasInputWorkLimit: true,
		SampleCount: 2, Seed: "s", VirtualNodes: 7, SelectionCount: 3,
		QueueSLO: true, MaxQueueTimeFloor: 500 * time.Millisecond, MaxQueueTimeCeil: 100 * time.Millisecond, // not reordered
		TTFTBucketSize: 20 * time.Millisecond, NextBucketUnlockFactor: -2, N: 5, MaxQueued: 4,
		IgnoreQueueTime: true, IgnoreInputProcessingTime: true, CacheAffinityWait: 30 * time.Millisecond,
		CacheAffinityInputTokensScale: 0, LastClusterAffinity: true, ReturningPrefersLastCluster: false, ConsiderKVFreeTokens: true,
		RendezvousWeight: WeightLastMeanInputTPS, RTTTier: 15 * time.Millisecond, BandWidenInterval: 0, BandWidenIntervalSet: true, FallbackMaxQueued: 2,
		SplitGuard: 0.2, QueueOnSaturatedHolders: true,
	}
	if *s != want {
		t.Errorf("set:\n got %+v\nwant %+v", *s, want)
	}
	if got := s.BandWidenIntervalFor(time.Second); got != 0 {
		t.Errorf("explicit 0 band interval followed the wait: %v", got)
	}
	f := modelDef(t, c, "floor").Effective()
	if f.QueueSLO || f.Comparator != lb.ComparatorUtilization {
		t.Errorf("floor only: %+v", f)
	}
	if f.BandWidenIntervalSet || f.BandWidenIntervalFor(40*time.Millisecond) != 40*time.Millisecond {
		t.Errorf("unset band interval does not follow the wait")
	}
	p := modelDef(t, c, "pon").Effective()
	if p.SampleCount != 64 || p.Comparator != lb.ComparatorNumRequestsQueued {
		t.Errorf("pon: %+v", p)
	}
}

// TestPrefixAffinitySettings pins prefix-affinity's defaults and the
// prefix_affinity option of the wait-and-widen algorithms.
func TestPrefixAffinitySettings(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"models":{
		"bare":"prefix-affinity",
		"set":{"algorithm":"prefix-affinity","comparator":"ttft","split_guard":0,"last_cluster_affinity":true,
			"returning_prefers_last_cluster":false,"max_input_work_seconds":4,"prefill_aware":true},
		"ww":{"algorithm":"wait-and-widen","prefix_affinity":true},
		"pww":{"algorithm":"pulsar-wait-and-widen","prefix_affinity":false},
		"ww0":"wait-and-widen"}}`)
	b := modelDef(t, c, "bare")
	if e := b.Effective(); b.Algorithm() != PrefixAffinity || e.Comparator != lb.ComparatorUtilization || e.SplitGuard != 0.2 ||
		e.LastClusterAffinity || !e.ReturningPrefersLastCluster || e.PrefixAffinity || e.PrefillAware {
		t.Errorf("bare: %v %+v", b.Algorithm(), e)
	}
	if e := modelDef(t, c, "set").Effective(); !e.PrefillAware || e.Comparator != lb.ComparatorTTFT || e.SplitGuard != 0 || !e.LastClusterAffinity ||
		e.ReturningPrefersLastCluster || !e.HasInputWorkLimit {
		t.Errorf("set: %+v", e)
	}
	for model, want := range map[string]bool{"ww": true, "pww": false, "ww0": false} {
		if e := modelDef(t, c, model).Effective(); e.PrefixAffinity != want {
			t.Errorf("%s: prefix_affinity %v, want %v", model, e.PrefixAffinity, want)
		}
	}
	if a, ok := ParseMethod(" Prefix_Affinity "); !ok || a != PrefixAffinity || a.String() != "prefix-affinity" {
		t.Errorf("header name: %v %v", a, ok)
	}
	if d, rej := c.Compile("bare", "prefix-affinity;comparator=queue-time"); rej != nil || d.Effective().Comparator != lb.ComparatorQueueTime ||
		d.Effective().SplitGuard != 0.2 {
		t.Errorf("expression comparator: %v", rej)
	}
}

func TestAliasesAndCase(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]Algorithm{
		"power-of-two": PowerOfN, "powerOf2": PowerOfN, "powerOfN": PowerOfN, "powerof2": PowerOfN, "powerofn": PowerOfN,
		"groq-multiregion": WaitAndWiden, "pulsar-multiregion": PulsarWaitAndWiden, "round-robin": RoundRobin,
	} {
		if got, ok := ParseAlgorithm(name); !ok || got != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"Pulsar", "POWER-OF-N", "power_of_n", "roundrobin", ""} {
		if _, ok := ParseAlgorithm(bad); ok {
			t.Errorf("file name %q accepted", bad)
		}
	}
	for name, want := range map[string]Algorithm{
		"POWER_OF_TWO": PowerOfN, " PowerOf2 ": PowerOfN, "Pulsar_Wait_And_Widen": PulsarWaitAndWiden,
		"GROQ-MULTIREGION": WaitAndWiden, "round_robin": RoundRobin,
	} {
		if got, ok := ParseMethod(name); !ok || got != want {
			t.Errorf("ParseMethod(%q) = %v, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"fastest", "", strings.Repeat("a", 40), "power of n"} {
		if _, ok := ParseMethod(bad); ok {
			t.Errorf("header %q accepted", bad)
		}
	}
}

// TestPermissiveVsEmpty pins a trap of the file format
// (docs/load-balancing.md#loading): no file offers every
// algorithm, an empty file only power-of-n.
func TestPermissiveVsEmpty(t *testing.T) {
	t.Parallel()
	p := Permissive()
	empty := mustParse(t, `{}`)
	for _, a := range algorithms {
		d, ok := p.Resolve("any", a)
		if !ok || d.Algorithm() != a || d.Effective().Seed != "" {
			t.Errorf("permissive %s: %v %v", a, d, ok)
		}
		_, ok = empty.Resolve("any", a)
		if ok != (a == PowerOfN) {
			t.Errorf("{} %s available = %v", a, ok)
		}
	}
	if s := p.Summary(); s != (Summary{DefaultLB: "power-of-n", ModelOverrides: 0}) {
		t.Errorf("permissive summary %+v", s)
	}
	if n := len(p.Definitions()); n != 8 {
		t.Errorf("permissive has %d definitions, want 8 (the default and all seven algorithms)", n)
	}
	if s := mustParse(t, `{"default":"pulsar-multiregion","models":{"a":"random","b":"pulsar"}}`).Summary(); s != (Summary{DefaultLB: "pulsar-wait-and-widen", ModelOverrides: 2}) {
		t.Errorf("summary %+v", s)
	}
}

// TestResolveOrder walks docs/load-balancing.md#which-definition-serves-a-request
// step by step.
func TestResolveOrder(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{
		"default": "pulsar",
		"request_algorithms": {
			"pulsar": {"algorithm":"pulsar","seed":"top-pulsar"},
			"round-robin": "round-robin",
			"wait-and-widen": {"algorithm":"wait-and-widen","seed":"top-ww"}
		},
		"models": {
			"llama": {"algorithm":"random","request_algorithms":{
				"wait-and-widen":{"algorithm":"wait-and-widen","seed":"llama-ww"},
				"random":{"algorithm":"random","require_cache_affinity_key":true},
				"pulsar":{"algorithm":"pulsar","seed":"llama-pulsar","request_algorithms":{"random":"random"}}}},
			"mistral": "power-of-n"
		}}`)
	seed := func(d *Definition) string { return d.Effective().Seed }
	// Step 2: no override → configured.
	if d := modelDef(t, c, "other"); d.Algorithm() != Pulsar || seed(d) != "" {
		t.Errorf("default configured = %v %q", d, seed(d))
	}
	// Step 3 first: the configured algorithm wins over a detailed entry of
	// the same name (the unseeded default, not "top-pulsar").
	d, _ := c.Resolve("other", Pulsar)
	if d != modelDef(t, c, "other") || seed(d) != "" {
		t.Errorf("configured-first trap: got seed %q", seed(d))
	}
	d, _ = c.Resolve("llama", Random)
	if d != modelDef(t, c, "llama") || d.Effective().RequireCacheAffinityKey {
		t.Errorf("model configured-first trap: %+v", d.Effective())
	}
	// Step 4: the set's own entry.
	if d, _ := c.Resolve("llama", WaitAndWiden); seed(d) != "llama-ww" {
		t.Errorf("llama ww seed %q", seed(d))
	}
	if d, _ := c.Resolve("llama", Pulsar); seed(d) != "llama-pulsar" {
		t.Errorf("llama pulsar seed %q", seed(d))
	}
	if d, _ := c.Resolve("other", WaitAndWiden); seed(d) != "top-ww" {
		t.Errorf("top ww seed %q", seed(d))
	}
	// Step 5: a model set falls back to the top-level map.
	if d, ok := c.Resolve("llama", RoundRobin); !ok || d.Algorithm() != RoundRobin {
		t.Errorf("llama round-robin fallback: %v %v", d, ok)
	}
	if d, ok := c.Resolve("mistral", WaitAndWiden); !ok || seed(d) != "top-ww" {
		t.Errorf("mistral ww fallback: %v %v", d, ok)
	}
	// Step 6: unavailable.
	for _, tc := range []struct {
		model string
		alg   Algorithm
	}{{"llama", PowerOfN}, {"other", Random}, {"other", PowerOfN}, {"mistral", PulsarWaitAndWiden}} {
		if d, ok := c.Resolve(tc.model, tc.alg); ok {
			t.Errorf("%s/%s resolved to %v", tc.model, tc.alg, d)
		}
	}
	// The nested request_algorithms of an entry is discarded.
	if n := len(c.Definitions()); n != 1+3+1+3+1 {
		t.Errorf("definitions = %d", n)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	if _, err := Load(missing); err == nil || !strings.HasPrefix(err.Error(), "failed to read lb config file: "+missing) {
		t.Errorf("missing: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"default":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	var ce *ConfigError
	if err == nil || !strings.HasPrefix(err.Error(), "failed to parse lb config file: "+bad+": default: unknown load-balancer algorithm") || !errors.As(err, &ce) {
		t.Errorf("bad: %v", err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"default":"random"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(good); err != nil || c.Summary().DefaultLB != "random" {
		t.Errorf("good: %v", err)
	}
}

// FuzzParse feeds arbitrary documents to Parse. Every accepted config must
// satisfy the documented ranges (checkEffective) and survive a round trip:
// formatted back into lb-config.json (formatConfig) and parsed again, it
// resolves every model and override to the same algorithm, settings and
// effective values, so nothing the file says is lost or changed between
// parsing and use.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"default":"pulsar"}`, `{"models":{"m":{"algorithm":"wait-and-widen","n":0}}}`,
		`{"request_algorithms":{"pulsar":{"algorithm":"pulsar","request_algorithms":{"x":"random"}}}}`,
		`{"models":{"m":{"algorithm":"power-of-n","comparator":null}}}`, `[`, `null`, `{"models":{"m":7}}`,
		`{"default":"round_robin","request_algorithms":{"powerOf2":{"algorithm":"power-of-n","sample_count":64,"max_input_work_seconds":-0}}}`,
		`{"models":{"m":{"algorithm":"pulsar-wait-and-widen","seed":"a\u00e9<>","cache_affinity_wait_ms":9223372036854,` +
			`"next_bucket_unlock_factor":1e300,"cache_affinity_input_tokens_scale":0.0625,"rendezvous_weight":"last-mean-input-tps",` +
			`"max_queue_time_floor_ms":5,"max_queue_time_ceil_ms":1,"request_algorithms":{"wait-and-widen":{"algorithm":"wait-and-widen",` +
			`"cache_affinity_virtual_nodes":0,"last_cluster_affinity":true,"comparator":"utilization"}}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse(%q): untyped error %v", data, err)
			}
			return
		}
		for _, d := range c.Definitions() {
			checkEffective(t, string(data), d)
		}
		formatted := formatConfig(t, c)
		again, err := Parse(formatted)
		if err != nil {
			t.Fatalf("Parse(%q) accepted, its formatted form %s refused: %v", data, formatted, err)
		}
		models := []string{"no-such-model"}
		for m := range c.models {
			models = append(models, m)
		}
		for _, m := range models {
			for _, a := range append([]Algorithm{0}, algorithms[:]...) {
				d1, ok1 := c.Resolve(m, a)
				d2, ok2 := again.Resolve(m, a)
				if ok1 != ok2 || (ok1 && !sameDefinition(d1, d2)) {
					t.Fatalf("Parse(%q) and its round trip %s resolve model %q override %v differently: %v %v / %v %v",
						data, formatted, m, a, d1, ok1, d2, ok2)
				}
			}
		}
	})
}

// checkEffective fails t when d's effective values leave the ranges
// docs/load-balancing.md#fields-of-a-detailed-object documents, or carry a
// feature d's algorithm does not have.
func checkEffective(t *testing.T, input string, d *Definition) {
	t.Helper()
	e, alg := d.Effective(), d.Algorithm()
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for _, bad := range []struct {
		broken bool
		what   string
	}{
		{alg < PowerOfN || alg > PulsarWaitAndWiden, "algorithm"},
		{e.SampleCount < 1 || e.SampleCount > MaxSampleCount, "sample_count"},
		{e.VirtualNodes < 1 || e.VirtualNodes > maxCount, "cache_affinity_virtual_nodes"},
		{e.N < 1 || e.N > maxCount, "n"},
		{e.SelectionCount < 0 || e.SelectionCount > maxCount, "cache_affinity_backend_selection_count"},
		{e.MaxQueueTimeFloor < 0 || e.MaxQueueTimeCeil < 0 || e.TTFTBucketSize < 0 || e.CacheAffinityWait < 0 ||
			e.BandWidenInterval < 0 || e.RTTTier < 0, "a duration"},
		{!(e.CacheAffinityInputTokensScale >= 0 && e.CacheAffinityInputTokensScale <= 1), "cache_affinity_input_tokens_scale"},
		{!finite(e.NextBucketUnlockFactor), "next_bucket_unlock_factor"},
		{!finite(e.MaxInputWorkSeconds) || (!e.HasInputWorkLimit && e.MaxInputWorkSeconds != 0), "max_input_work_seconds"},
		{!e.Comparator.Valid() || e.HasComparator != (alg != PulsarWaitAndWiden), "comparator"},
		{e.RendezvousWeight != WeightMaxInputTPS && e.RendezvousWeight != WeightLastMeanInputTPS, "rendezvous_weight"},
		{e.ConsiderKVFreeTokens && !alg.usesPulsarRanking(), "consider_kv_free_tokens"},
		{e.LastClusterAffinity && !alg.usesWaitAndWiden(), "last_cluster_affinity"},
		{!e.ReturningPrefersLastCluster && !alg.usesWaitAndWiden(), "returning_prefers_last_cluster"},
		{e.RTTTier != 0 && !alg.usesPulsarRanking(), "rtt_tier_ms"},
		{e.QueueSLO != (d.settings.MaxQueueTimeFloorMs != nil && d.settings.MaxQueueTimeCeilMs != nil), "the queue SLO"},
	} {
		if bad.broken {
			t.Fatalf("%q: definition %v has %s out of range: %+v", input, alg, bad.what, e)
		}
	}
}

// formatConfig writes c back as lb-config.json: the default by name, and
// every detailed definition as an object of its algorithm and the settings
// the input set.
func formatConfig(t *testing.T, c *Config) []byte {
	t.Helper()
	entry := func(d *Definition) map[string]any {
		b, err := json.Marshal(d.settings)
		if err != nil {
			t.Fatal(err)
		}
		// Raw values: numbers go back as Marshal wrote them, never through
		// a float64 that would round a large integer.
		raw := map[string]json.RawMessage{}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		out := map[string]any{"algorithm": d.alg.String()}
		for k, v := range raw {
			out[k] = v
		}
		return out
	}
	requested := func(defs *[numAlgorithms + 1]*Definition) map[string]any {
		out := map[string]any{}
		for _, d := range defs {
			if d != nil {
				out[d.alg.String()] = entry(d)
			}
		}
		return out
	}
	top := map[string]any{"default": c.def.configured.alg.String()}
	if r := requested(&c.def.requested); len(r) > 0 {
		top["request_algorithms"] = r
	}
	models := map[string]any{}
	for id, s := range c.models {
		e := entry(s.configured)
		if r := requested(&s.requested); len(r) > 0 {
			e["request_algorithms"] = r
		}
		models[id] = e
	}
	if len(models) > 0 {
		top["models"] = models
	}
	b, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameDefinition reports whether two definitions agree on everything but
// their identity.
func sameDefinition(a, b *Definition) bool {
	return a.alg == b.alg && reflect.DeepEqual(a.settings, b.settings) && reflect.DeepEqual(a.eff, b.eff)
}
