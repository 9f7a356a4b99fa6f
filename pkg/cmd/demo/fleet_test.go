package main

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
	} {
		b, err := lbConfig("m", c.algorithm, 200)
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

func TestDefaultFleet(t *testing.T) {
	f := defaultFleet()
	if got := f.clusterIDs(); !slices.Equal(got, []string{"near-a", "near-b", "far-a", "far-b"}) {
		t.Fatalf("clusters %v", got)
	}
	if len(f.regions) != 2 || f.regions[0].healthDelayMs >= f.regions[1].healthDelayMs || f.regions[0].ttftMs >= f.regions[1].ttftMs {
		t.Errorf("want a near and a far region, the far one with the larger RTT and TTFT: %+v", f.regions)
	}
	rates := map[int]bool{}
	for _, r := range f.regions {
		for _, c := range r.clusters {
			rates[c.coldTPS] = true
			if c.warmTPS <= c.coldTPS {
				t.Errorf("%s: cached prefill %d not faster than cold %d", c.id, c.warmTPS, c.coldTPS)
			}
		}
	}
	if len(rates) < 3 {
		t.Errorf("prefill rates are not heterogeneous: %v", rates)
	}
	if f.regionOf()["far-b"] != "far" || f.regionOf()["near-a"] != "near" {
		t.Errorf("regionOf %v", f.regionOf())
	}
}

func TestArgs(t *testing.T) {
	f := defaultFleet()
	r, c := f.regions[1], f.regions[1].clusters[0]
	s := secrets{registration: "/s/reg", gateway: "/s/gw", apiKeys: "/s/keys"}
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string
	}{
		{"mock", mockArgs(f, r, c, 9001), map[string]string{
			"listen": "127.0.0.1:9001", "model-name": demoModel, "engine-id": "far-a",
			"prefill-tokens-per-s": "48000", "cached-prefill-tokens-per-s": "100000",
			"health-delay-ms": "25", "ttft-ms": "35", "max-concurrent-requests": "6",
		}},
		{"pylon", pylonArgs(f, c, 9002, 9001, 9003, 9004, s), map[string]string{
			"stargate-address": "127.0.0.1:9002", "upstream-http-base-url": "http://127.0.0.1:9001",
			"cluster-id": "far-a", "inference-server-id": "pylon-far-a", "auth-token-file": "/s/reg",
			"initial-input-tps": "48000", "max-engine-concurrency": "6", "min-update-interval-ms": "250",
			"listen": "127.0.0.1:9003", "metrics-listen": "127.0.0.1:9004",
			"pylon-queue-mismatch-retry-enabled": "true",
		}},
		{"hub", hubArgs(hubPorts{9005, 9006, 9007}, "/r/lb.json", s), map[string]string{
			"listen": "127.0.0.1:9005", "backend-listen": "127.0.0.1:9006", "metrics-listen": "127.0.0.1:9007",
			"lb-config-path": "/r/lb.json", "registration-token-file": "/s/reg", "gateway-token-file": "/s/gw",
		}},
		{"gateway", gatewayArgs(f, gatewayPorts{9008, 9009, 9010, 9011}, 9005, s), map[string]string{
			"listen": "127.0.0.1:9008", "metrics-listen": "127.0.0.1:9009", "hub-url": "http://127.0.0.1:9005",
			"hub-token-file": "/s/gw", "api-keys-file": "/s/keys",
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
	mc, _ := flagValue(gatewayArgs(f, gatewayPorts{}, 1, s), "model-config-json")
	var cfg map[string]map[string]int
	if err := json.Unmarshal([]byte(mc), &cfg); err != nil || cfg[demoModel]["max_wait_ms"] <= 0 {
		t.Errorf("--model-config-json %q: %v", mc, err)
	}
	f.queueAdmission = false
	if v, _ := flagValue(pylonArgs(f, c, 1, 2, 3, 4, s), "pylon-queue-mismatch-retry-enabled"); v != "false" {
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
