package stack

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// flagValue returns the value after --name in args, and whether it is
// there; a --name=value argument counts too.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestDemoFleet(t *testing.T) {
	f := DemoFleet()
	if got := f.ClusterIDs(); !slices.Equal(got, []string{"near-a", "near-b", "far-a", "far-b"}) {
		t.Fatalf("clusters %v", got)
	}
	if len(f.Regions) != 2 || f.Regions[0].HealthDelayMs >= f.Regions[1].HealthDelayMs || f.Regions[0].TTFTMs >= f.Regions[1].TTFTMs {
		t.Errorf("want a near and a far region, the far one with the larger RTT and TTFT: %+v", f.Regions)
	}
	rates := map[int]bool{}
	for _, r := range f.Regions {
		for _, c := range r.Clusters {
			rates[c.ColdTPS] = true
			if c.WarmTPS <= c.ColdTPS {
				t.Errorf("%s: cached prefill %d not faster than cold %d", c.ID, c.WarmTPS, c.ColdTPS)
			}
		}
	}
	if len(rates) < 3 {
		t.Errorf("prefill rates are not heterogeneous: %v", rates)
	}
	if f.RegionOf()["far-b"] != "far" || f.RegionOf()["near-a"] != "near" {
		t.Errorf("regionOf %v", f.RegionOf())
	}
}

// TestLegacyBenchFleet pins LegacyBenchFleet to what scripts/bench-stack.sh
// started, flag by flag: docs/benchmarks.md's numbers up to 2026-11-30 were
// measured on it.
func TestLegacyBenchFleet(t *testing.T) {
	f := LegacyBenchFleet()
	s := secrets{registration: "/s/reg", gateway: "/s/gw", apiKeys: "/s/keys"}
	want := map[string]struct {
		rtt, cold, cached string
	}{
		"near-a": {"1", "64000", "133000"}, "near-b": {"1", "32000", "66000"},
		"far-a": {"25", "48000", "100000"}, "far-b": {"25", "64000", "133000"},
	}
	if got := f.ClusterIDs(); !slices.Equal(got, []string{"near-a", "near-b", "far-a", "far-b"}) {
		t.Fatalf("clusters %v", got)
	}
	if got := f.EngineIDs(); !slices.Equal(got, f.ClusterIDs()) {
		t.Fatalf("engines %v, want one per cluster named after it", got)
	}
	for _, p := range f.Pylons() {
		c := p.Cluster
		w := want[c.ID]
		rtt := w.rtt
		ttft := map[string]string{"1": "21", "25": "45"}[rtt] // 20 ms + the region's RTT
		args := mockArgs(f, p, p.Engines[0], 1)
		for name, v := range map[string]string{
			"model-name": "dummy-model", "engine-id": c.ID, "prefill-tokens-per-s": w.cold, "cached-prefill-tokens-per-s": w.cached,
			"ttft-ms": ttft, "health-delay-ms": rtt, "token-delay-ms": "5", "max-concurrent-requests": "16", "log-level": "warn",
		} {
			if got, _ := flagValue(args, name); got != v {
				t.Errorf("%s engine --%s = %q, want %q", c.ID, name, got, v)
			}
		}
		if v, ok := flagValue(args, "kv-cache-capacity-tokens"); ok {
			t.Errorf("%s engine --kv-cache-capacity-tokens %q, want the mock's default", c.ID, v)
		}
		for name, v := range map[string]string{
			"model-name": "dummy-model", "cluster-id": c.ID, "inference-server-id": "pylon-" + c.ID,
			"initial-input-tps": w.cold, "max-engine-concurrency": "16", "kv-cache-stats-path": "/kv-cache/stats",
			"min-update-interval-ms": "250", "log-level": "warn",
			// bench-stack.sh left it at the pylon's default, which is on.
			"pylon-queue-mismatch-retry-enabled": "true",
		} {
			if got, _ := flagValue(pylonArgs(f, p, hubSet{{}}, []int{2}, 3, 4, s), name); got != v {
				t.Errorf("%s pylon --%s = %q, want %q", c.ID, name, got, v)
			}
		}
	}
	// No model config: bench-stack.sh's gateway had no max wait.
	if v, ok := flagValue(gatewayArgs(f, gatewayPorts{}, hubSet{{}}, s), "model-config-json"); ok {
		t.Errorf("bench gateway has --model-config-json %q", v)
	}
	// No lb-config: the hub's permissive default.
	if v, ok := flagValue(hubArgs(hubPorts{}, "", s), "lb-config-path"); ok {
		t.Errorf("hub without an lb-config has --lb-config-path %q", v)
	}
}

// TestBenchFleet checks the layout of the pressure fleet: two pylons of two
// engines per cluster, each pylon announcing its engines' sums, every engine
// naming its cluster, a small cache on every engine.
func TestBenchFleet(t *testing.T) {
	f := BenchFleet()
	s := secrets{registration: "/s/reg", gateway: "/s/gw", apiKeys: "/s/keys"}
	pylons := f.Pylons()
	if len(pylons) != 8 || len(f.EngineIDs()) != 16 {
		t.Fatalf("%d pylons, %d engines; want 8 and 16", len(pylons), len(f.EngineIDs()))
	}
	p := pylons[1]
	if p.Name != "near-a-p2" || p.Cluster.ID != "near-a" || !slices.Equal(p.Engines, []string{"near-a-p2-e1", "near-a-p2-e2"}) {
		t.Fatalf("second pylon %+v", p)
	}
	seen := map[string]bool{}
	for _, id := range f.EngineIDs() {
		if seen[id] {
			t.Errorf("engine id %s twice", id)
		}
		seen[id] = true
	}
	for name, v := range map[string]string{
		"engine-id": "near-a-p2-e2", "cluster-id": "near-a", "kv-cache-capacity-tokens": "65536",
		"max-concurrent-requests": "8", "prefill-tokens-per-s": "2000", "cached-prefill-tokens-per-s": "16000",
	} {
		if got, _ := flagValue(mockArgs(f, p, p.Engines[1], 1), name); got != v {
			t.Errorf("engine --%s = %q, want %q", name, got, v)
		}
	}
	for name, v := range map[string]string{
		"inference-server-id": "pylon-near-a-p2", "cluster-id": "near-a",
		"upstream-http-base-url": "http://127.0.0.1:5,http://127.0.0.1:6",
		"initial-input-tps":      "4000", "max-engine-concurrency": "16",
	} {
		if got, _ := flagValue(pylonArgs(f, p, hubSet{{}}, []int{5, 6}, 3, 4, s), name); got != v {
			t.Errorf("pylon --%s = %q, want %q", name, got, v)
		}
	}
	for _, r := range f.Regions {
		for _, c := range r.Clusters {
			if c.WarmTPS < 4*c.ColdTPS {
				t.Errorf("%s: cached prefill %d is not much faster than cold %d; hits would barely matter", c.ID, c.WarmTPS, c.ColdTPS)
			}
		}
	}
	if d := strings.Join(f.Describe(), "\n"); !strings.Contains(d, "2 pylon(s) x 2 engine(s)") || !strings.Contains(d, "1.5k/12k") {
		t.Errorf("describe:\n%s", d)
	}
}

func TestArgs(t *testing.T) {
	f := DemoFleet()
	py := f.Pylons()[4] // far-a's first pylon
	s := secrets{registration: "/s/reg", gateway: "/s/gw", apiKeys: "/s/keys"}
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string
	}{
		{"mock", mockArgs(f, py, py.Engines[0], 9001), map[string]string{
			"listen": "127.0.0.1:9001", "model-name": "demo-model", "engine-id": "far-a-p1-e1", "cluster-id": "far-a",
			"prefill-tokens-per-s": "48000", "cached-prefill-tokens-per-s": "100000", "kv-cache-capacity-tokens": "131072",
			"health-delay-ms": "25", "ttft-ms": "35", "max-concurrent-requests": "4",
		}},
		{"pylon", pylonArgs(f, py, hubSet{{backend: 9002}}, []int{9001}, 9003, 9004, s), map[string]string{
			"stargate-address": "127.0.0.1:9002", "upstream-http-base-url": "http://127.0.0.1:9001",
			"cluster-id": "far-a", "inference-server-id": "pylon-far-a-p1", "auth-token-file": "/s/reg",
			"initial-input-tps": "48000", "max-engine-concurrency": "4", "min-update-interval-ms": "250",
			"listen": "127.0.0.1:9003", "metrics-listen": "127.0.0.1:9004",
			"pylon-queue-mismatch-retry-enabled": "true",
		}},
		{"hub", hubArgs(hubPorts{9005, 9006, 9007}, "/r/lb.json", s), map[string]string{
			"listen": "127.0.0.1:9005", "backend-listen": "127.0.0.1:9006", "metrics-listen": "127.0.0.1:9007",
			"lb-config-path": "/r/lb.json", "registration-token-file": "/s/reg", "gateway-token-file": "/s/gw",
		}},
		{"gateway", gatewayArgs(f, gatewayPorts{9008, 9009, 9010, 9011}, hubSet{{api: 9005}}, s), map[string]string{
			"listen": "127.0.0.1:9008", "metrics-listen": "127.0.0.1:9009", "hub-url": "http://127.0.0.1:9005",
			"hub-token-file": "/s/gw", "api-keys-file": "/s/keys",
		}},
		{"pylon, three hubs", pylonArgs(f, py, hubSet{{backend: 9002}, {backend: 9012}, {backend: 9022}}, []int{9001}, 9003, 9004, s), map[string]string{
			"stargate-address": "127.0.0.1:9002,127.0.0.1:9012,127.0.0.1:9022",
		}},
		{"gateway, three hubs", gatewayArgs(f, gatewayPorts{9008, 9009, 9010, 9011}, hubSet{{api: 9005}, {api: 9015}, {api: 9025}}, s), map[string]string{
			"hub-url": "http://127.0.0.1:9005,http://127.0.0.1:9015,http://127.0.0.1:9025",
		}},
	} {
		for name, want := range tc.want {
			if got, ok := flagValue(tc.args, name); got != want {
				t.Errorf("%s --%s = %q (present %v), want %q", tc.name, name, got, ok, want)
			}
		}
		if slices.Contains(tc.args, "--insecure-no-auth") {
			t.Errorf("%s runs without auth", tc.name)
		}
	}
	// The gateway sends the model's max wait, so a full fleet makes a
	// request wait instead of failing at once.
	mc, _ := flagValue(gatewayArgs(f, gatewayPorts{}, hubSet{{}}, s), "model-config-json")
	var cfg map[string]map[string]int
	if err := json.Unmarshal([]byte(mc), &cfg); err != nil || cfg["demo-model"]["max_wait_ms"] <= 0 ||
		cfg["demo-model"]["requests_per_minute"] != f.RequestsPerMinute || f.RequestsPerMinute <= 0 {
		t.Errorf("--model-config-json %q: %v", mc, err)
	}
	f.QueueAdmission = false
	if v, _ := flagValue(pylonArgs(f, py, hubSet{{}}, []int{2}, 3, 4, s), "pylon-queue-mismatch-retry-enabled"); v != "false" {
		t.Errorf("queue admission off: flag %q", v)
	}
}

func TestGatewayEnv(t *testing.T) {
	env := gatewayEnv(gatewayPorts{olric: 7001, memberlist: 7002})
	for _, want := range []string{"OLRIC_ENABLED=true", "OLRIC_BIND_ADDR=127.0.0.1", "OLRIC_BIND_PORT=7001",
		"OLRIC_MEMBERLIST_BIND_ADDR=127.0.0.1", "OLRIC_MEMBERLIST_BIND_PORT=7002", "STARGATE_LAST_CLUSTER_ENABLED=true"} {
		if !slices.Contains(env, want) {
			t.Errorf("gateway env %v lacks %s", env, want)
		}
	}
}

func TestDebugStateUnroutable(t *testing.T) {
	var st debugState
	body := `{"routing":{"targets":[
		{"model":"other","clusters":[{"cluster_id":"b","rtt_ns":5,"stats":{"max_input_tps":1}}]},
		{"model":"m","clusters":[
			{"cluster_id":"a","rtt_ns":5,"stats":{"max_input_tps":64000}},
			{"cluster_id":"b","rtt_ns":0,"stats":{"max_input_tps":64000}},
			{"cluster_id":"c","rtt_ns":5,"stats":{}}]}]}}`
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.unroutable("m", []string{"a", "b", "c", "d"}); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("unroutable %v, want [b c d] (no RTT, no TPS, not registered)", got)
	}
}
