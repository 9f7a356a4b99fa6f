package main

import "encoding/json"

// affinityAlgorithms are the algorithms that accept last_cluster_affinity
// (the hub refuses to start with it on any other).
var affinityAlgorithms = map[string]bool{"wait-and-widen": true, "pulsar-wait-and-widen": true}

// lbConfig is the hub's lb-config.json: the demo model on algorithm; the
// affinity algorithms wait waitMs for the session's cluster before
// widening, and keep a returning session on the cluster the gateway hints;
// with prefix, the prompt's prefix holders lead their affinity order too.
func lbConfig(model, algorithm string, waitMs int, prefix bool) ([]byte, error) {
	entry := map[string]any{"algorithm": algorithm}
	if affinityAlgorithms[algorithm] {
		entry["cache_affinity_wait_ms"] = waitMs
		entry["last_cluster_affinity"] = true
		if prefix {
			entry["prefix_affinity"] = true
		}
		if algorithm == "wait-and-widen" {
			// Its affinity group is off unless sized.
			entry["cache_affinity_backend_selection_count"] = 1
		}
	}
	return json.MarshalIndent(map[string]any{"models": map[string]any{model: entry}}, "", "  ")
}
