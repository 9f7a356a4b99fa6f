package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLBConfig(t *testing.T) {
	for _, c := range []struct {
		algorithm string
		want      map[string]any
	}{
		{"pulsar-wait-and-widen", map[string]any{"algorithm": "pulsar-wait-and-widen", "cache_affinity_wait_ms": 200.0, "last_cluster_affinity": true}},
		{"wait-and-widen", map[string]any{"algorithm": "wait-and-widen", "cache_affinity_wait_ms": 200.0, "last_cluster_affinity": true,
			"cache_affinity_backend_selection_count": 1.0}},
		// The hub refuses last_cluster_affinity on other algorithms.
		{"power-of-n", map[string]any{"algorithm": "power-of-n"}},
		{"pulsar-wait-and-widen+prefix", map[string]any{"algorithm": "pulsar-wait-and-widen", "cache_affinity_wait_ms": 200.0,
			"last_cluster_affinity": true, "prefix_affinity": true}},
		// prefix_affinity is an option of the wait-and-widen algorithms only.
		{"power-of-n+prefix", map[string]any{"algorithm": "power-of-n"}},
	} {
		alg, prefix := strings.CutSuffix(c.algorithm, "+prefix")
		b, err := lbConfig("m", alg, 200, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Models map[string]map[string]any `json:"models"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v in %s", c.algorithm, err, b)
		}
		if len(got.Models) != 1 || len(got.Models["m"]) != len(c.want) {
			t.Fatalf("%s: got %s, want model m with %v", c.algorithm, b, c.want)
		}
		for k, v := range c.want {
			if got.Models["m"][k] != v {
				t.Errorf("%s: %s = %v, want %v", c.algorithm, k, got.Models["m"][k], v)
			}
		}
	}
}
