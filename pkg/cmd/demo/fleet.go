package main

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// demoModel is the one model every engine serves and every request names.
const demoModel = "demo-model"

// cluster is one simulated GPU cluster: a mock engine and the pylon in
// front of it. Its id is also the engine's --engine-id, so a client behind
// the gateway (which hides the hub's x-stargate-cluster-id) still sees
// where a request ran, through x-mock-engine-id.
type cluster struct {
	id string
	// coldTPS and warmTPS are the engine's prefill rates for uncached and
	// cached prompt tokens; coldTPS also seeds the pylon's input TPS, the
	// capacity the hub ranks and estimates with.
	coldTPS, warmTPS int
}

// region is a group of clusters at one distance from the hub.
type region struct {
	name string
	// healthDelayMs delays the engines' /health, which the hub probes
	// over each tunnel every second: it is the RTT the hub measures and
	// adds to its TTFT estimate. ttftMs is the engines' base time to first
	// token, which carries the same distance for the client.
	healthDelayMs, ttftMs int
	clusters              []cluster
}

// fleet is the simulated deployment the demo starts.
type fleet struct {
	model string
	// slots is each engine's concurrency (--max-concurrent-requests), also
	// announced by its pylon (--max-engine-concurrency) so the hub's
	// capacity rules know when a cluster is full and a session overflows.
	slots        int
	tokenDelayMs int
	regions      []region
	// queueAdmission is the pylons' queue admission
	// (--pylon-queue-mismatch-retry-enabled), on by default as in
	// production. It relies on the pylons applying the hub's free-slot
	// rule (they know --max-engine-concurrency): without it a request
	// arriving while another prefills would be refused and sent away from
	// its cache.
	queueAdmission bool
}

// defaultFleet is 2 regions x 2 clusters with heterogeneous prefill rates
// (the mock engine's defaults are 64k/133k tokens/s), so the weighted
// rendezvous ranking gives the clusters unequal shares of sessions. Six
// slots per engine for the demo's 16 clients leave room overall while the
// clusters ranked first by more sessions fill up now and then: a few
// sessions overflow, which is what last_cluster_affinity is about (4 slots
// make most of them move; 8 almost none).
func defaultFleet() fleet {
	return fleet{model: demoModel, slots: 6, tokenDelayMs: 10, queueAdmission: true, regions: []region{
		{name: "near", healthDelayMs: 1, ttftMs: 10, clusters: []cluster{
			{id: "near-a", coldTPS: 64_000, warmTPS: 133_000},
			{id: "near-b", coldTPS: 32_000, warmTPS: 66_000},
		}},
		{name: "far", healthDelayMs: 25, ttftMs: 35, clusters: []cluster{
			{id: "far-a", coldTPS: 48_000, warmTPS: 100_000},
			{id: "far-b", coldTPS: 64_000, warmTPS: 133_000},
		}},
	}}
}

// clusterIDs lists every cluster id in fleet order.
func (f fleet) clusterIDs() []string {
	var ids []string
	for _, r := range f.regions {
		for _, c := range r.clusters {
			ids = append(ids, c.id)
		}
	}
	return ids
}

// regionOf maps each cluster id to its region's name.
func (f fleet) regionOf() map[string]string {
	m := map[string]string{}
	for _, r := range f.regions {
		for _, c := range r.clusters {
			m[c.id] = r.name
		}
	}
	return m
}

// affinityAlgorithms are the algorithms that accept last_cluster_affinity
// (the hub refuses to start with it on any other).
var affinityAlgorithms = map[string]bool{"wait-and-widen": true, "pulsar-wait-and-widen": true}

// lbConfig is the hub's lb-config.json: the demo model on algorithm; the
// affinity algorithms wait waitMs for the session's cluster before
// widening, and keep a returning session on the cluster the gateway hints.
func lbConfig(model, algorithm string, waitMs int) ([]byte, error) {
	entry := map[string]any{"algorithm": algorithm}
	if affinityAlgorithms[algorithm] {
		entry["cache_affinity_wait_ms"] = waitMs
		entry["last_cluster_affinity"] = true
		if algorithm == "wait-and-widen" {
			// Its affinity group is off unless sized.
			entry["cache_affinity_backend_selection_count"] = 1
		}
	}
	return json.MarshalIndent(map[string]any{"models": map[string]any{model: entry}}, "", "  ")
}

// The arguments of each binary. Every listener is on loopback at a port
// the demo picked; logs are at warn so the log files hold only trouble;
// a short drain keeps Ctrl-C quick (nothing is in flight by then).

func mockArgs(f fleet, r region, c cluster, port int) []string {
	return []string{"--listen", addr(port), "--model-name", f.model, "--engine-id", c.id,
		"--prefill-tokens-per-s", itoa(c.coldTPS), "--cached-prefill-tokens-per-s", itoa(c.warmTPS),
		"--ttft-ms", itoa(r.ttftMs), "--health-delay-ms", itoa(r.healthDelayMs), "--token-delay-ms", itoa(f.tokenDelayMs),
		"--max-concurrent-requests", itoa(f.slots), "--drain-timeout", "2s", "--log-level", "warn"}
}

// hubPorts are the hub's listeners: the API, the pylons' tunnel listener
// and metrics.
type hubPorts struct{ api, backend, metrics int }

// secrets are the files holding the demo's credentials; none is on the
// command line.
type secrets struct {
	// registration is the token pylons present to the hub.
	registration string
	// gateway is the token the gateway presents to the hub; only requests
	// bearing it may steer routing (the last-cluster hint among them).
	gateway string
	// apiKeys is the gateway's API key file.
	apiKeys string
}

func hubArgs(p hubPorts, lbConfigPath string, s secrets) []string {
	return []string{"--listen", addr(p.api), "--backend-listen", addr(p.backend), "--metrics-listen", addr(p.metrics),
		"--lb-config-path", lbConfigPath, "--registration-token-file", s.registration, "--gateway-token-file", s.gateway,
		"--drain-timeout", "2s", "--log-level", "warn"}
}

func pylonArgs(f fleet, c cluster, hubBackend, enginePort, listen, metrics int, s secrets) []string {
	return []string{"--listen", addr(listen), "--metrics-listen", addr(metrics),
		"--stargate-address", addr(hubBackend), "--upstream-http-base-url", "http://" + addr(enginePort),
		"--model-name", f.model, "--inference-server-id", "pylon-" + c.id, "--cluster-id", c.id,
		"--auth-token-file", s.registration, "--initial-input-tps", itoa(c.coldTPS),
		"--max-engine-concurrency", itoa(f.slots), "--kv-cache-stats-path", "/kv-cache/stats",
		"--min-update-interval-ms", "250", "--pylon-queue-mismatch-retry-enabled=" + strconv.FormatBool(f.queueAdmission),
		"--drain-timeout", "2s", "--log-level", "warn"}
}

// gatewayPorts are the gateway's listeners and its embedded Olric node's.
type gatewayPorts struct{ api, metrics, olric, memberlist int }

// maxWaitMs is the model's max_wait_ms in the gateway's model config,
// sent to the hub as x-max-wait-ms: how long a request may wait for a
// cluster with a free engine slot. Without it the hub answers 503 at once
// when every cluster it may use looks full.
const maxWaitMs = 10_000

func gatewayArgs(f fleet, p gatewayPorts, hubAPI int, s secrets) []string {
	return []string{"--listen", addr(p.api), "--metrics-listen", addr(p.metrics), "--hub-url", "http://" + addr(hubAPI),
		"--hub-token-file", s.gateway, "--api-keys-file", s.apiKeys,
		"--model-config-json", fmt.Sprintf(`{%q: {"max_wait_ms": %d}}`, f.model, maxWaitMs),
		"--drain-timeout", "2s", "--log-level", "warn"}
}

// gatewayEnv turns on the embedded Olric node (on loopback, alone) that
// holds the last-cluster store and the rate-limit counters, and the
// last-cluster tracking that hints each session's cluster to the hub.
func gatewayEnv(p gatewayPorts) []string {
	return []string{"OLRIC_ENABLED=true", "OLRIC_BIND_ADDR=127.0.0.1", "OLRIC_BIND_PORT=" + itoa(p.olric),
		"OLRIC_MEMBERLIST_BIND_ADDR=127.0.0.1", "OLRIC_MEMBERLIST_BIND_PORT=" + itoa(p.memberlist),
		"STARGATE_LAST_CLUSTER_ENABLED=true"}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func itoa(n int) string { return strconv.Itoa(n) }

// describe is the fleet as the banner prints it, one line per region.
func (f fleet) describe() []string {
	var out []string
	for _, r := range f.regions {
		line := fmt.Sprintf("region %-4s (hub RTT ~%d ms, engine TTFT +%d ms):", r.name, r.healthDelayMs, r.ttftMs)
		for _, c := range r.clusters {
			line += fmt.Sprintf("  %s %dk/%dk tok/s", c.id, c.coldTPS/1000, c.warmTPS/1000)
		}
		out = append(out, line)
	}
	return out
}
