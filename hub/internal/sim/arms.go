package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Arm is one routing configuration to replay the workload through: an
// lb-config.json (parsed and resolved by the hub's own lbconfig, the
// definition serving the workload's model with no x-routing-method), or the
// greedy-ttft router.
type Arm struct {
	// Name labels the arm in the report.
	Name string
	// GreedyTTFT replaces the hub and the pylons' engine choice with a
	// router that sees every engine's exact KV contents, slots, queue and
	// prefill backlog, and sends each request to the engine with the
	// lowest predicted TTFT. It is a strong baseline, not a bound: the
	// workload's ceiling bounds cache hits.
	GreedyTTFT bool
	// Config is the lb-config.json text (nil for greedy-ttft). The string
	// "$MODEL" in it is replaced by the workload's model id.
	Config []byte
}

// GreedyTTFTName is the name of the greedy-ttft arm.
const GreedyTTFTName = "greedy-ttft"

// greedyTTFTAlias is the arm's former name, still accepted by --arms.
const greedyTTFTAlias = "oracle"

// DefaultArmNames is the --arms default: the --compare arms and
// greedy-ttft.
var DefaultArmNames = []string{"power-of-n", "wait-and-widen", "wait-and-widen+lca", "pulsar-wait-and-widen+lca", GreedyTTFTName}

// wnwCampaign is the wait-and-widen configuration of upstream Stargate's
// published benchmark campaign, so a run compares with its numbers:
// utilization comparator, k = 2, scale 0.1,
// 200 ms affinity wait, n = 2, max_queued = 1, queue-time bounds
// 100..5000 ms, 20 ms buckets, unlock factor 0.25, 150 virtual nodes,
// affinity key and input tokens required.
func wnwCampaign() map[string]any {
	return map[string]any{
		"algorithm":                              "wait-and-widen",
		"comparator":                             "utilization",
		"cache_affinity_backend_selection_count": 2,
		"cache_affinity_input_tokens_scale":      0.1,
		"cache_affinity_wait_ms":                 200,
		"n":                                      2,
		"max_queued":                             1,
		"max_queue_time_floor_ms":                100,
		"max_queue_time_ceil_ms":                 5000,
		"ttft_bucket_size_ms":                    20,
		"next_bucket_unlock_factor":              0.25,
		"cache_affinity_virtual_nodes":           150,
		"require_cache_affinity_key":             true,
		"require_input_tokens":                   true,
	}
}

// pwnwCampaign is the campaign's settings on pulsar-wait-and-widen: no
// comparator (the algorithm has none) and no selection count, so the
// affinity group is rank 1 alone (k = 1) and a returning session's last
// cluster is that group.
func pwnwCampaign() map[string]any {
	m := wnwCampaign()
	m["algorithm"] = "pulsar-wait-and-widen"
	delete(m, "comparator")
	delete(m, "cache_affinity_virtual_nodes")
	delete(m, "cache_affinity_backend_selection_count")
	return m
}

// builtinArms maps a built-in arm name to its model entry.
func builtinArms() map[string]func() map[string]any {
	return map[string]func() map[string]any{
		"power-of-n": func() map[string]any {
			return map[string]any{"algorithm": "power-of-n", "sample_count": 2, "comparator": "ttft"}
		},
		"wait-and-widen": wnwCampaign,
		"wait-and-widen+lca": func() map[string]any {
			m := wnwCampaign()
			m["last_cluster_affinity"] = true
			return m
		},
		"pulsar-wait-and-widen": pwnwCampaign,
		"pulsar-wait-and-widen+lca": func() map[string]any {
			m := pwnwCampaign()
			m["last_cluster_affinity"] = true
			return m
		},
		"prefix-affinity": func() map[string]any { return map[string]any{"algorithm": "prefix-affinity"} },
		"prefix-affinity+lca": func() map[string]any {
			return map[string]any{"algorithm": "prefix-affinity", "last_cluster_affinity": true}
		},
		"wait-and-widen+prefix+lca": func() map[string]any {
			m := wnwCampaign()
			m["prefix_affinity"] = true
			m["last_cluster_affinity"] = true
			return m
		},
		"pulsar-wait-and-widen+prefix+lca": func() map[string]any {
			m := pwnwCampaign()
			m["prefix_affinity"] = true
			m["last_cluster_affinity"] = true
			return m
		},
	}
}

// BuiltinConfigArmNames lists the built-in lb-config arms.
func BuiltinConfigArmNames() []string {
	return []string{"power-of-n", "wait-and-widen", "wait-and-widen+lca", "pulsar-wait-and-widen",
		"pulsar-wait-and-widen+lca", "prefix-affinity", "prefix-affinity+lca", "wait-and-widen+prefix+lca",
		"pulsar-wait-and-widen+prefix+lca"}
}

// BuiltinArmNames lists the built-in arms, greedy-ttft included.
func BuiltinArmNames() []string { return append(BuiltinConfigArmNames(), GreedyTTFTName) }

// BuiltinArm returns a built-in arm by name; "oracle" is greedy-ttft.
func BuiltinArm(name string) (Arm, bool) {
	if name == GreedyTTFTName || name == greedyTTFTAlias {
		return Arm{Name: GreedyTTFTName, GreedyTTFT: true}, true
	}
	mk, ok := builtinArms()[name]
	if !ok {
		return Arm{}, false
	}
	b, err := json.MarshalIndent(map[string]any{"models": map[string]any{"$MODEL": mk()}}, "", "  ")
	if err != nil {
		panic(err) // a literal map always marshals
	}
	return Arm{Name: name, Config: b}, true
}

// ParseArm resolves one --arms item: a built-in name, "name=path" or a
// path (named after its file without the extension).
func ParseArm(spec string) (Arm, error) {
	spec = strings.TrimSpace(spec)
	if a, ok := BuiltinArm(spec); ok {
		return a, nil
	}
	name, path := "", spec
	if i := strings.IndexByte(spec, '='); i >= 0 {
		name, path = spec[:i], spec[i+1:]
	}
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own flag
	if err != nil {
		return Arm{}, fmt.Errorf("arm %q: not a built-in (%s) and not a readable lb-config file: %w",
			spec, strings.Join(BuiltinArmNames(), ", "), err)
	}
	return Arm{Name: name, Config: b}, nil
}

// ParseArms resolves a comma-separated --arms list.
func ParseArms(list string) ([]Arm, error) {
	var arms []Arm
	seen := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		a, err := ParseArm(s)
		if err != nil {
			return nil, err
		}
		if seen[a.Name] {
			return nil, fmt.Errorf("arm %q listed twice", a.Name)
		}
		seen[a.Name] = true
		arms = append(arms, a)
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("no arms in %q", list)
	}
	return arms, nil
}
