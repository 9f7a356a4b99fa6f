package stack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Cluster is one simulated GPU cluster: Fleet.PylonsPerCluster pylons,
// each in front of Fleet.EnginesPerPylon mock engines. Its ID is every
// engine's --cluster-id (and, with one engine per cluster, its --engine-id),
// so a client behind the gateway (which hides the hub's
// x-stargate-cluster-id) still sees where a request ran, through
// x-mock-cluster-id and x-mock-engine-id.
type Cluster struct {
	ID string
	// ColdTPS and WarmTPS are the engine's prefill rates for uncached and
	// cached prompt tokens; ColdTPS also seeds the pylon's input TPS, the
	// capacity the hub ranks and estimates with.
	ColdTPS, WarmTPS int
}

// Region is a group of clusters at one distance from the hub.
type Region struct {
	Name string
	// HealthDelayMs delays the engines' /health, which the hub probes
	// over each tunnel every second: it is the RTT the hub measures and
	// adds to its TTFT estimate. TTFTMs is the engines' base time to first
	// token, which carries the same distance for the client.
	HealthDelayMs, TTFTMs int
	Clusters              []Cluster
}

// Fleet is the simulated deployment Start runs.
type Fleet struct {
	// Model is the one model every engine serves.
	Model string
	// Slots is each engine's concurrency (--max-concurrent-requests), also
	// announced by its pylon (--max-engine-concurrency) so the hub's
	// capacity rules know when a cluster is full and a session overflows.
	Slots int
	// TokenDelayMs is the engines' time per output token.
	TokenDelayMs int
	// Regions hold the clusters; their order is the fleet order that
	// ClusterIDs, the logs and the recorded counters follow.
	Regions []Region
	// QueueAdmission is the pylons' queue admission
	// (--pylon-queue-mismatch-retry-enabled; the pylon's default is on,
	// as in production). It relies on the pylons applying the hub's
	// free-slot rule (they know --max-engine-concurrency): without it a
	// request arriving while another prefills would be refused and sent
	// away from its cache.
	QueueAdmission bool
	// MaxWaitMs is the model's max_wait_ms in the gateway's model config,
	// sent to the hub as x-max-wait-ms: how long a request may wait for a
	// cluster with a free engine slot. Without it (0: no model config) the
	// hub answers 503 at once when every cluster it may use looks full.
	MaxWaitMs int
	// RequestsPerMinute is the model's requests_per_minute in the gateway's
	// model config (0: no limit). The demo sets a ceiling its load never
	// reaches, so every request goes through the Olric-backed limiter as in
	// production and the dashboards' rate-limit panels have data.
	RequestsPerMinute int
	// PylonsPerCluster is how many pylons (hub backends) each cluster has;
	// 0 means 1. The hub chooses among them inside a cluster.
	PylonsPerCluster int
	// EnginesPerPylon is how many mock engines each pylon fronts; 0 means
	// 1. The pylon chooses among them. Slots and prefill rates are per
	// engine; a pylon announces the sum.
	EnginesPerPylon int
	// KVCapacityTokens is each engine's --kv-cache-capacity-tokens; 0 keeps
	// the mock engine's default (1.6M tokens, more than any suite fills).
	KVCapacityTokens int
}

// Pylon is one pylon of a fleet and the engines behind it, as the layout
// names them.
type Pylon struct {
	// Name is the pylon's child name without the "pylon-" prefix: the
	// cluster id when the cluster has one pylon, else "<cluster>-p<i>".
	Name string
	// Cluster and Region are where it sits.
	Cluster Cluster
	Region  Region
	// Engines are its engines' ids (their --engine-id and child names
	// without "engine-"): the cluster id when the cluster has one engine in
	// all, else "<pylon>-e<j>".
	Engines []string
}

// Pylons lists every pylon of f in fleet order, clusters in order and a
// cluster's pylons together.
func (f Fleet) Pylons() []Pylon {
	np, ne := max(f.PylonsPerCluster, 1), max(f.EnginesPerPylon, 1)
	var out []Pylon
	for _, r := range f.Regions {
		for _, c := range r.Clusters {
			for i := range np {
				p := Pylon{Name: c.ID, Cluster: c, Region: r}
				if np > 1 {
					p.Name = fmt.Sprintf("%s-p%d", c.ID, i+1)
				}
				for j := range ne {
					id := p.Name
					if ne > 1 {
						id = fmt.Sprintf("%s-e%d", p.Name, j+1)
					}
					p.Engines = append(p.Engines, id)
				}
				out = append(out, p)
			}
		}
	}
	return out
}

// EngineIDs lists every engine id in fleet order.
func (f Fleet) EngineIDs() []string {
	var ids []string
	for _, p := range f.Pylons() {
		ids = append(ids, p.Engines...)
	}
	return ids
}

// DemoFleet is bin/demo's fleet: 2 regions x 2 clusters with
// heterogeneous prefill rates (the mock engine's defaults are 64k/133k
// tokens/s), so the weighted rendezvous ranking gives the clusters unequal
// shares of sessions. Like the benchmark fleet, each cluster is two pylons
// of two engines, so the hub's backend choice and the pylons' engine choice
// by session key are part of what the demo shows; each engine caches 128k
// tokens. Four slots per engine (sixteen per cluster) for the demo's 16
// clients: with two, an engine was full so often that its sessions' turns
// spilled to its sibling and split their caches (returning turns hit 73 %
// of their prompt instead of 91 %).
func DemoFleet() Fleet {
	return Fleet{Model: "demo-model", Slots: 4, TokenDelayMs: 10, QueueAdmission: true, MaxWaitMs: 10_000,
		RequestsPerMinute: 100_000, PylonsPerCluster: 2, EnginesPerPylon: 2, KVCapacityTokens: 131_072, Regions: []Region{
			{Name: "near", HealthDelayMs: 1, TTFTMs: 10, Clusters: []Cluster{
				{ID: "near-a", ColdTPS: 64_000, WarmTPS: 133_000},
				{ID: "near-b", ColdTPS: 32_000, WarmTPS: 66_000},
			}},
			{Name: "far", HealthDelayMs: 25, TTFTMs: 35, Clusters: []Cluster{
				{ID: "far-a", ColdTPS: 48_000, WarmTPS: 100_000},
				{ID: "far-b", ColdTPS: 64_000, WarmTPS: 133_000},
			}},
		}}
}

// BenchFleet is the fleet of `loadgen campaign --compare` and of every
// live number in docs/benchmarks.md from 2026-12-02 on. It is built so that routing decides the outcome:
//
//   - each cluster is two pylons of two engines, so a session's cache can
//     be split inside a cluster as well as between clusters;
//   - prefill is slow (2k cold tokens/s on the fastest engine) and cached
//     prefill eight times faster, so the fleet is prefill-bound at rates a
//     two-core machine can drive, and what the routing saves in prefill
//     is throughput;
//   - each engine caches 64k tokens, which an arm that spreads sessions
//     over many engines overflows at the higher rates (evictions), while
//     one that keeps each session on one engine fits it.
//
// Same regions and rate ratios as before (near-a fast, near-b half as
// fast, far-a three quarters, far-b fast; far 25 ms away), 8 slots per
// engine, 5 ms per output token, model dummy-model (the arms' lb-configs
// name it) and no gateway model config (no max wait: a full fleet answers
// 503 at once). LegacyBenchFleet is the fleet of the numbers before.
func BenchFleet() Fleet {
	return Fleet{Model: "dummy-model", Slots: 8, TokenDelayMs: 5, QueueAdmission: true,
		PylonsPerCluster: 2, EnginesPerPylon: 2, KVCapacityTokens: 65_536, Regions: []Region{
			{Name: "near", HealthDelayMs: 1, TTFTMs: 20 + 1, Clusters: []Cluster{
				{ID: "near-a", ColdTPS: 2_000, WarmTPS: 16_000},
				{ID: "near-b", ColdTPS: 1_000, WarmTPS: 8_000},
			}},
			{Name: "far", HealthDelayMs: 25, TTFTMs: 20 + 25, Clusters: []Cluster{
				{ID: "far-a", ColdTPS: 1_500, WarmTPS: 12_000},
				{ID: "far-b", ColdTPS: 2_000, WarmTPS: 16_000},
			}},
		}}
}

// LegacyBenchFleet is the fleet of docs/benchmarks.md's numbers up to
// 2026-11-30, exactly what scripts/bench-stack.sh ran before it: one
// engine per cluster with 16 slots and a 1.6M-token cache, prefill rates
// so high that no suite loaded it. Kept so those numbers can be re-run.
func LegacyBenchFleet() Fleet {
	return Fleet{Model: "dummy-model", Slots: 16, TokenDelayMs: 5, QueueAdmission: true, Regions: []Region{
		{Name: "near", HealthDelayMs: 1, TTFTMs: 20 + 1, Clusters: []Cluster{
			{ID: "near-a", ColdTPS: 64_000, WarmTPS: 133_000},
			{ID: "near-b", ColdTPS: 32_000, WarmTPS: 66_000},
		}},
		{Name: "far", HealthDelayMs: 25, TTFTMs: 20 + 25, Clusters: []Cluster{
			{ID: "far-a", ColdTPS: 48_000, WarmTPS: 100_000},
			{ID: "far-b", ColdTPS: 64_000, WarmTPS: 133_000},
		}},
	}}
}

// ClusterIDs lists every cluster id in fleet order.
func (f Fleet) ClusterIDs() []string {
	var ids []string
	for _, r := range f.Regions {
		for _, c := range r.Clusters {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// RegionOf maps each cluster id to its region's name.
func (f Fleet) RegionOf() map[string]string {
	m := map[string]string{}
	for _, r := range f.Regions {
		for _, c := range r.Clusters {
			m[c.ID] = r.Name
		}
	}
	return m
}

// Describe is the fleet as a banner prints it, one line per region.
func (f Fleet) Describe() []string {
	var out []string
	for _, r := range f.Regions {
		line := fmt.Sprintf("region %-4s (hub RTT ~%d ms, engine TTFT +%d ms):", r.Name, r.HealthDelayMs, r.TTFTMs)
		for _, c := range r.Clusters {
			line += fmt.Sprintf("  %s %s/%s tok/s", c.ID, kilo(c.ColdTPS), kilo(c.WarmTPS))
		}
		out = append(out, line)
	}
	if np, ne := max(f.PylonsPerCluster, 1), max(f.EnginesPerPylon, 1); np*ne > 1 || f.KVCapacityTokens > 0 {
		line := fmt.Sprintf("each cluster: %d pylon(s) x %d engine(s), %d slots per engine", np, ne, f.Slots)
		if f.KVCapacityTokens > 0 {
			line += fmt.Sprintf(", %s-token KV cache per engine", kilo(f.KVCapacityTokens))
		}
		out = append(out, line)
	}
	return out
}

// kilo prints n in thousands, with one decimal when it is not whole.
func kilo(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + "k"
}

// The arguments of each binary. Every listener is on loopback at a port
// the launcher picked; logs are at warn so the log files hold only
// trouble; a short drain keeps stopping quick (nothing is in flight by
// then, so it changes no measurement).

func mockArgs(f Fleet, p Pylon, engineID string, port int) []string {
	args := []string{"--listen", addr(port), "--model-name", f.Model, "--engine-id", engineID, "--cluster-id", p.Cluster.ID,
		"--prefill-tokens-per-s", itoa(p.Cluster.ColdTPS), "--cached-prefill-tokens-per-s", itoa(p.Cluster.WarmTPS),
		"--ttft-ms", itoa(p.Region.TTFTMs), "--health-delay-ms", itoa(p.Region.HealthDelayMs), "--token-delay-ms", itoa(f.TokenDelayMs),
		"--max-concurrent-requests", itoa(f.Slots), "--drain-timeout", "2s", "--log-level", "warn"}
	if f.KVCapacityTokens > 0 {
		args = append(args, "--kv-cache-capacity-tokens", itoa(f.KVCapacityTokens))
	}
	return args
}

// hubPorts are the hub's listeners: the API, the pylons' tunnel listener
// and metrics.
type hubPorts struct{ api, backend, metrics int }

// hubSet is every hub replica's ports, in start order.
type hubSet []hubPorts

// backends is the comma-separated tunnel listeners pylons dial.
func (h hubSet) backends() string {
	out := make([]string, len(h))
	for i, p := range h {
		out[i] = addr(p.backend)
	}
	return strings.Join(out, ",")
}

// apiURLs is the comma-separated API base URLs gateways call.
func (h hubSet) apiURLs() string {
	out := make([]string, len(h))
	for i, p := range h {
		out[i] = "http://" + addr(p.api)
	}
	return strings.Join(out, ",")
}

// secrets are the files holding the stack's credentials; none is on the
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

// hubArgs leaves out --lb-config-path when lbConfigPath is empty: the hub
// then allows every algorithm with default settings.
func hubArgs(p hubPorts, lbConfigPath string, s secrets) []string {
	args := []string{"--listen", addr(p.api), "--backend-listen", addr(p.backend), "--metrics-listen", addr(p.metrics),
		"--registration-token-file", s.registration, "--gateway-token-file", s.gateway,
		"--drain-timeout", "2s", "--log-level", "warn"}
	if lbConfigPath != "" {
		// The fleet's lb-config names its model, so the hub knows it from
		// the start: the startup grace (every model counts as known while
		// pylons reconnect) would only make a request for a model nobody
		// serves wait before its 404.
		args = append(args, "--lb-config-path", lbConfigPath, "--proxy-startup-grace-ms", "0")
	}
	return args
}

// pylonArgs announces the pylon's engines together: their summed slots
// and cold prefill rate.
func pylonArgs(f Fleet, p Pylon, hubs hubSet, enginePorts []int, listen, metrics int, s secrets) []string {
	urls := make([]string, len(enginePorts))
	for i, port := range enginePorts {
		urls[i] = "http://" + addr(port)
	}
	n := len(enginePorts)
	return []string{"--listen", addr(listen), "--metrics-listen", addr(metrics),
		"--stargate-address", hubs.backends(), "--upstream-http-base-url", strings.Join(urls, ","),
		"--model-name", f.Model, "--inference-server-id", "pylon-" + p.Name, "--cluster-id", p.Cluster.ID,
		"--region", p.Region.Name,
		// The tunnels stay on loopback: the token may cross it in plaintext.
		"--auth-token-file", s.registration, "--insecure-plaintext", "--initial-input-tps", itoa(n * p.Cluster.ColdTPS),
		"--max-engine-concurrency", itoa(n * f.Slots), "--kv-cache-stats-path", "/kv-cache/stats",
		"--min-update-interval-ms", "250", "--pylon-queue-mismatch-retry-enabled=" + strconv.FormatBool(f.QueueAdmission),
		"--drain-timeout", "2s", "--log-level", "warn"}
}

// gatewayPorts are the gateway's listeners and its embedded Olric node's.
type gatewayPorts struct{ api, metrics, olric, memberlist int }

func gatewayArgs(f Fleet, p gatewayPorts, hubs hubSet, s secrets) []string {
	args := []string{"--listen", addr(p.api), "--metrics-listen", addr(p.metrics), "--hub-url", hubs.apiURLs(),
		"--hub-token-file", s.gateway, "--api-keys-file", s.apiKeys, "--drain-timeout", "2s", "--log-level", "warn"}
	model := map[string]int{}
	if f.MaxWaitMs > 0 {
		model["max_wait_ms"] = f.MaxWaitMs
	}
	if f.RequestsPerMinute > 0 {
		model["requests_per_minute"] = f.RequestsPerMinute
	}
	if len(model) > 0 {
		b, _ := json.Marshal(map[string]map[string]int{f.Model: model})
		args = append(args, "--model-config-json", string(b))
	}
	return args
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
