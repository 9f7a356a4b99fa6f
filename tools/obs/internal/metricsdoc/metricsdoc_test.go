package metricsdoc

import (
	"reflect"
	"testing"
)

const sample = "Each registry carries the Go runtime (`go_*`) and process (`process_*`) collectors.\n" +
	"\n" +
	"| binary | where |\n" +
	"| --- | --- |\n" +
	"| `gateway` | `--metrics-listen` |\n" +
	"\n" +
	"| metric | type | labels | meaning |\n" +
	"| --- | --- | --- | --- |\n" +
	"| `gateway_build_info`, `hub_build_info` | gauge | `version` | always 1 |\n" +
	"| `pylon_queue_admission_expected_ms` / `pylon_queue_admission_actual_ms` | histogram | | estimates |\n" +
	"| `pylon_model_kv_cache_capacity_tokens`, `_used_tokens`, `_free_tokens` | gauge | `model` | KV |\n" +
	"| `vllm:num_requests_running` | gauge | | running |\n" +
	"\n" +
	"```\n" +
	"| metric | x |\n" +
	"| `not_a_doc_row` | x |\n" +
	"```\n" +
	"Useful: `rate(vllm:prefix_cache_hits_total[5m])` is prose, not a row.\n"

func TestParse(t *testing.T) {
	d := Parse(sample)
	want := []string{"gateway_build_info", "hub_build_info", "pylon_queue_admission_expected_ms", "pylon_queue_admission_actual_ms",
		"pylon_model_kv_cache_capacity_tokens", "pylon_model_kv_cache_used_tokens", "pylon_model_kv_cache_free_tokens",
		"vllm:num_requests_running"}
	if !reflect.DeepEqual(d.Names, want) {
		t.Errorf("Names = %v\nwant    %v", d.Names, want)
	}
	if !reflect.DeepEqual(d.Prefixes, []string{"go_", "process_"}) {
		t.Errorf("Prefixes = %v", d.Prefixes)
	}
	for name, want := range map[string]bool{"go_goroutines": true, "process_cpu_seconds_total": true,
		"hub_build_info": true, "gateway": false, "not_a_doc_row": false, "vllm:prefix_cache_hits_total": false} {
		if got := d.Covers(name); got != want {
			t.Errorf("Covers(%q) = %v, want %v", name, got, want)
		}
	}
}
