package lbconfig

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

func compileClass(t *testing.T, c *Config, raw string) (*Definition, string, string) {
	t.Helper()
	d, rej := c.Compile("model", raw)
	if rej != nil {
		return nil, rej.Class, rej.Message
	}
	return d, "", ""
}

// TestCompileClasses covers each rejection class (and malformed_expression
// once per rule; package expr tests every rule in depth).
func TestCompileClasses(t *testing.T) {
	t.Parallel()
	c := Permissive()
	for _, tc := range []struct{ raw, class, msg string }{
		{"pulsar;seed=\"x,y\"", ClassMalformed, "P3: commas are not allowed (byte 14)"},
		{"pulsar;seed", ClassMalformed, `P4: parameter "seed" requires an explicit value (key=value)`},
		{"*pulsar;seed=x", ClassMalformed, `P10: invalid routing method "*pulsar": it must start with a letter`},
		{"fastest;seed=x", ClassUnknownMethod, `unknown routing method "fastest"`},
		{"pulsar;widen=2", ClassUnknownParameter, `unknown parameter "widen" for algorithm pulsar`},
		{"wait-and-widen;last_cluster_affinity=true", ClassUnknownParameter, `unknown parameter "last_cluster_affinity" for algorithm wait-and-widen`},
		{"pulsar;rendezvous_weight=max-input-tps", ClassUnknownParameter, `unknown parameter "rendezvous_weight" for algorithm pulsar`},
		{"pulsar-wait-and-widen;returning_prefers_last_cluster=false", ClassUnknownParameter, `unknown parameter "returning_prefers_last_cluster" for algorithm pulsar-wait-and-widen`},
		{"pulsar;rtt_tier_ms=10", ClassUnknownParameter, `unknown parameter "rtt_tier_ms" for algorithm pulsar`},
		{"prefix-affinity;split_guard=0.5", ClassUnknownParameter, `unknown parameter "split_guard" for algorithm prefix-affinity`},
		{"prefix-affinity;last_cluster_affinity=true", ClassUnknownParameter, `unknown parameter "last_cluster_affinity" for algorithm prefix-affinity`},
		{"wait-and-widen;prefix_affinity=true", ClassUnknownParameter, `unknown parameter "prefix_affinity" for algorithm wait-and-widen`},
		{"round-robin;seed=x", ClassNotApplicable, "seed is not applicable to round-robin"},
		{"pulsar-wait-and-widen;comparator=ttft", ClassNotApplicable, "comparator is not applicable to pulsar-wait-and-widen"},
		{"pulsar-wait-and-widen;cache_affinity_virtual_nodes=1", ClassNotApplicable, "cache_affinity_virtual_nodes is not applicable to pulsar-wait-and-widen"},
		{"wait-and-widen;band_widen_interval_ms=1", ClassNotApplicable, "band_widen_interval_ms is not applicable to wait-and-widen"},
		{"wait-and-widen;fallback_max_queued=1", ClassNotApplicable, "fallback_max_queued is not applicable to wait-and-widen"},
		{"wait-and-widen;consider_kv_free_tokens=false", ClassNotApplicable, "consider_kv_free_tokens is not applicable to wait-and-widen"},
		{"power-of-n;sample_count=banana", ClassInvalidValue, "sample_count: expected an integer or quoted integer, got a token"},
		{"power-of-n;sample_count=999", ClassInvalidValue, "sample_count: must be between 1 and 64"},
		{"power-of-n;sample_count=0", ClassInvalidValue, "sample_count: must be between 1 and 64"},
		{"power-of-n;sample_count=-1", ClassInvalidValue, "sample_count: expected an unsigned integer, got -1"},
		{"power-of-n;sample_count=1.5", ClassInvalidValue, "sample_count: expected an integer or quoted integer, got a decimal"},
		{`power-of-n;sample_count="1.0"`, ClassInvalidValue, `sample_count: expected an unsigned integer, got "1.0"`},
		{"power-of-n;comparator=fastest", ClassInvalidValue, `comparator: unknown comparator "fastest" (want one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued)`},
		{`wait-and-widen;next_bucket_unlock_factor="inf"`, ClassInvalidValue, `next_bucket_unlock_factor: expected a finite decimal, got "inf"`},
		{`wait-and-widen;next_bucket_unlock_factor="1e3"`, ClassInvalidValue, `next_bucket_unlock_factor: expected a finite decimal, got "1e3"`},
		{"wait-and-widen;cache_affinity_input_tokens_scale=1.1", ClassInvalidValue, "cache_affinity_input_tokens_scale: must be between 0.0 and 1.0"},
		{"wait-and-widen;cache_affinity_virtual_nodes=1025", ClassInvalidValue, "cache_affinity_virtual_nodes: must be at most 1024"},
		{"wait-and-widen;cache_affinity_virtual_nodes=999999999999999", ClassInvalidValue, "cache_affinity_virtual_nodes: must be at most 1024"},
		{"wait-and-widen;max_queued=-1", ClassInvalidValue, "max_queued: expected an unsigned integer, got -1"},
		{"wait-and-widen;cache_affinity_wait_ms=999999999999999", ClassInvalidValue, "cache_affinity_wait_ms: must be at most 9223372036854"},
		{"pulsar;require_input_tokens=True", ClassInvalidValue, `require_input_tokens: expected true or false, got "True"`},
		{"pulsar;require_input_tokens=1", ClassInvalidValue, "require_input_tokens: expected true or false"},
		{"pulsar;seed=1", ClassInvalidValue, "seed: expected a token or string, got integer"},
		{"wait-and-widen;ttft_bucket_size_ms=0", ClassInertValue, "ttft_bucket_size_ms must be positive"},
		{"wait-and-widen;n=0", ClassInertValue, "n must be positive"},
		{"wait-and-widen;cache_affinity_virtual_nodes=0", ClassInertValue, "cache_affinity_virtual_nodes must be positive"},
		{"wait-and-widen;cache_affinity_backend_selection_count=0", ClassInertValue, "cache_affinity_backend_selection_count must be positive"},
		{"pulsar;max_input_work_seconds=0", ClassInertValue, "max_input_work_seconds must be positive"},
		{"pulsar;max_input_work_seconds=-1.0", ClassInertValue, "max_input_work_seconds must be positive"},
		{"wait-and-widen;max_queue_time_floor_ms=100", ClassInertCombination, "max_queue_time_floor_ms and max_queue_time_ceil_ms must both be configured for the queue SLO to apply"},
		{"pulsar-wait-and-widen;max_queue_time_ceil_ms=500", ClassInertCombination, "max_queue_time_floor_ms and max_queue_time_ceil_ms must both be configured for the queue SLO to apply"},
	} {
		_, class, msg := compileClass(t, c, tc.raw)
		if class != tc.class || msg != tc.msg {
			t.Errorf("Compile(%q)\n got %s: %s\nwant %s: %s", tc.raw, class, msg, tc.class, tc.msg)
		}
	}
	if _, rej := mustParse(t, `{}`).Compile("model", "pulsar;seed=x"); rej == nil || rej.Class != ClassUnavailable ||
		rej.Message != `routing method pulsar is not configured for model "model"` {
		t.Errorf("unavailable: %+v", rej)
	}
	if d, class, msg := compileClass(t, c, "wait-and-widen;cache_affinity_virtual_nodes=1024"); class != "" || d.Effective().VirtualNodes != 1024 {
		t.Errorf("1024 nodes: %s %s", class, msg)
	}
}

// applicable is the matrix of
// docs/load-balancing.md#parameters-and-where-they-apply, written out
// independently of exprParams: for each parameter, a valid value and the
// algorithms it applies to.
var applicable = []struct {
	key, value string
	algs       []Algorithm
}{
	{"require_cache_affinity_key", "true", algorithms[:]},
	{"require_input_tokens", "false", algorithms[:]},
	{"max_input_work_seconds", "2.5", algorithms[:]},
	{"sample_count", "3", []Algorithm{PowerOfN}},
	{"comparator", "queue-time", []Algorithm{PowerOfN, WaitAndWiden, PrefixAffinity}},
	{"seed", "s", []Algorithm{Pulsar, WaitAndWiden, PulsarWaitAndWiden}},
	{"consider_kv_free_tokens", "true", []Algorithm{Pulsar, PulsarWaitAndWiden}},
	{"n", "3", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"ttft_bucket_size_ms", "50", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"cache_affinity_backend_selection_count", "2", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"max_queued", "0", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"next_bucket_unlock_factor", `"0.0625"`, []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"ignore_queue_time", "true", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"ignore_input_processing_time", "true", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"cache_affinity_input_tokens_scale", "0.5", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"cache_affinity_wait_ms", "20", []Algorithm{WaitAndWiden, PulsarWaitAndWiden}},
	{"cache_affinity_virtual_nodes", "8", []Algorithm{WaitAndWiden}},
	{"band_widen_interval_ms", "10", []Algorithm{PulsarWaitAndWiden}},
	{"fallback_max_queued", "1", []Algorithm{PulsarWaitAndWiden}},
}

func TestApplicabilityMatrix(t *testing.T) {
	t.Parallel()
	c := Permissive()
	for _, p := range applicable {
		for _, a := range algorithms {
			raw := a.String() + ";" + p.key + "=" + p.value
			want := ClassNotApplicable
			for _, ok := range p.algs {
				if ok == a {
					want = ""
				}
			}
			if _, class, msg := compileClass(t, c, raw); class != want {
				t.Errorf("%s: class %q (%s), want %q", raw, class, msg, want)
			}
		}
	}
	// Floor and ceil apply to the W&W family when set together.
	for _, a := range algorithms {
		raw := a.String() + ";max_queue_time_floor_ms=100;max_queue_time_ceil_ms=500"
		_, class, _ := compileClass(t, c, raw)
		if want := map[bool]string{true: "", false: ClassNotApplicable}[a.usesWaitAndWiden()]; class != want {
			t.Errorf("%s: class %q want %q", raw, class, want)
		}
	}
}

// TestOverlay checks that parameters overlay the resolved definition and
// leave every other field as it was.
func TestOverlay(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"random","request_algorithms":{
		"wait-and-widen":{"algorithm":"wait-and-widen","max_queue_time_ceil_ms":500,"seed":"file","n":4,"max_input_work_seconds":9},
		"pulsar-wait-and-widen":{"algorithm":"pulsar-wait-and-widen","cache_affinity_wait_ms":50}}}`)
	base, _ := c.Resolve("model", WaitAndWiden)
	d, rej := c.Compile("model", "WAIT_AND_WIDEN;max_queue_time_floor_ms=100;comparator=utilization;require_cache_affinity_key=true")
	if rej != nil {
		t.Fatal(rej)
	}
	if d == base {
		t.Fatal("an expression must compile to its own definition")
	}
	e := d.Effective()
	if !e.QueueSLO || e.MaxQueueTimeFloor != 100*time.Millisecond || e.MaxQueueTimeCeil != 500*time.Millisecond ||
		e.Seed != "file" || e.N != 4 || e.Comparator != lb.ComparatorUtilization || !e.RequireCacheAffinityKey ||
		e.MaxInputWorkSeconds != 9 || !e.HasInputWorkLimit {
		t.Errorf("overlay: %+v", e)
	}
	if b := base.Effective(); b.RequireCacheAffinityKey || b.QueueSLO || b.Comparator != lb.ComparatorTTFT {
		t.Errorf("overlay changed the base definition: %+v", b)
	}
	// The band interval stays "follows the wait" unless the expression sets it.
	p, rej := c.Compile("model", "pulsar-wait-and-widen;seed=x")
	if rej != nil || p.Effective().BandWidenIntervalSet || p.Effective().CacheAffinityWait != 50*time.Millisecond {
		t.Errorf("pww: %v %+v", rej, p)
	}
	p, _ = c.Compile("model", "pulsar-wait-and-widen;band_widen_interval_ms=0")
	if e := p.Effective(); !e.BandWidenIntervalSet || e.BandWidenInterval != 0 {
		t.Errorf("explicit band 0: %+v", e)
	}
	// Quoted integers and quoted decimals.
	q, rej := c.Compile("model", `wait-and-widen;n="+7";next_bucket_unlock_factor="-0.0625";cache_affinity_input_tokens_scale="1"`)
	if rej != nil || q.Effective().N != 7 || q.Effective().NextBucketUnlockFactor != -0.0625 || q.Effective().CacheAffinityInputTokensScale != 1 {
		t.Errorf("quoted numbers: %v %+v", rej, q)
	}
	// Booleans and comparator may be quoted strings, as upstream Stargate
	// accepts them.
	if _, rej := c.Compile("model", `wait-and-widen;ignore_queue_time="true";comparator="ttft"`); rej != nil {
		t.Errorf("quoted bool/comparator: %v", rej)
	}
	// A method-only value compiles to a copy of the resolved definition.
	if m, rej := c.Compile("model", "random"); rej != nil || m.Algorithm() != Random {
		t.Errorf("method only: %v", rej)
	}
}

func TestRejectionMessagesAreBounded(t *testing.T) {
	t.Parallel()
	raw := "pulsar;seed=" + strings.Repeat("a", 1000) + ";n=1"
	_, rej := Permissive().Compile("model", raw)
	if rej == nil || rej.Class != ClassNotApplicable || len(rej.Message) > 200 {
		t.Errorf("%+v", rej)
	}
}

// FuzzCompile compiles arbitrary routing expressions against the
// permissive config. A refusal must carry one of the documented classes
// and a message. An accepted expression must give a definition within the
// documented ranges (checkEffective) and within the tighter bound of a
// per-request expression (cache_affinity_virtual_nodes at most 1024), and
// the file must agree with it: the same algorithm and settings written as
// an lb-config.json entry parse to the same effective values.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"pulsar;seed=x", "wait-and-widen;max_queue_time_floor_ms=1;max_queue_time_ceil_ms=2",
		`wait-and-widen;next_bucket_unlock_factor="0.0625"`, "power-of-n;sample_count=64;comparator=ttft",
		"pulsar-wait-and-widen;band_widen_interval_ms=0;n=\"3\"", "random;max_input_work_seconds=-0.5",
		`wait-and-widen;cache_affinity_virtual_nodes=1024;cache_affinity_input_tokens_scale=0.125;seed="a\\b"`,
		"pulsar;max_input_work_seconds=999999999999.999;consider_kv_free_tokens=true",
	} {
		f.Add(s)
	}
	c := Permissive()
	classes := map[string]bool{ClassMalformed: true, ClassUnknownMethod: true, ClassUnavailable: true,
		ClassUnknownParameter: true, ClassNotApplicable: true, ClassInvalidValue: true, ClassInertValue: true,
		ClassInertCombination: true}
	f.Fuzz(func(t *testing.T, raw string) {
		d, rej := c.Compile("model", raw)
		if rej != nil {
			if !classes[rej.Class] || rej.Message == "" {
				t.Fatalf("Compile(%q): %+v", raw, rej)
			}
			return
		}
		if d == nil {
			t.Fatalf("Compile(%q): no definition and no rejection", raw)
		}
		checkEffective(t, raw, d)
		if e := d.Effective(); e.VirtualNodes > maxExprVirtualNodes {
			t.Fatalf("Compile(%q): %d virtual nodes, beyond an expression's %d", raw, e.VirtualNodes, maxExprVirtualNodes)
		}
		settings, err := json.Marshal(d.settings)
		if err != nil {
			t.Fatal(err)
		}
		entry := `{"algorithm":"` + d.alg.String() + `"`
		if string(settings) != "{}" {
			entry += "," + string(settings[1:len(settings)-1])
		}
		doc := `{"models":{"model":` + entry + `}}}`
		file, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Compile(%q) accepted settings the file refuses: %s: %v", raw, doc, err)
		}
		fd, ok := file.Resolve("model", 0)
		if !ok || !sameDefinition(d, fd) {
			t.Fatalf("Compile(%q) = %+v, the file %s gives %+v", raw, d.eff, doc, fd.eff)
		}
	})
}
