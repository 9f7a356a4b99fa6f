package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// endpoints are the URLs of a running stack.
type endpoints struct {
	gateway, gatewayMetrics string
	hub, hubMetrics         string
	pylonMetrics            map[string]string // by cluster id
	apiKey                  string
}

// startStack writes the demo's credentials to secretDir, starts the
// fleet's engines and the hub (with the lb-config at lbPath), then the
// pylons and the gateway, and waits until the hub can route to every
// cluster.
func startStack(ctx context.Context, st *stack, f fleet, lbPath, secretDir string) (*endpoints, error) {
	s, apiKey, err := writeSecrets(secretDir)
	if err != nil {
		return nil, err
	}
	svcs := []service{{name: "hub", binary: "hub", ports: 3,
		args:  func(p []int) []string { return hubArgs(hubPorts{p[0], p[1], p[2]}, lbPath, s) },
		ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }}}
	var clusters []cluster
	for _, r := range f.regions {
		for _, c := range r.clusters {
			clusters = append(clusters, c)
			svcs = append(svcs, service{name: "engine-" + c.id, binary: "mock-engine", ports: 1,
				args:  func(p []int) []string { return mockArgs(f, r, c, p[0]) },
				ready: func(p []int) string { return "http://" + addr(p[0]) + "/health" }})
		}
	}
	ports, err := st.startAll(ctx, svcs...)
	if err != nil {
		return nil, err
	}
	hub := hubPorts{ports[0][0], ports[0][1], ports[0][2]}

	// The pylons dial the hub and the gateway calls it, so they start
	// second. The gateway is ready once its Olric node has formed its
	// (one-member) cluster.
	svcs = []service{{name: "gateway", binary: "gateway", ports: 4,
		env:   func(p []int) []string { return gatewayEnv(gatewayPorts{p[0], p[1], p[2], p[3]}) },
		args:  func(p []int) []string { return gatewayArgs(f, gatewayPorts{p[0], p[1], p[2], p[3]}, hub.api, s) },
		ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }}}
	for i, c := range clusters {
		engine := ports[i+1][0]
		svcs = append(svcs, service{name: "pylon-" + c.id, binary: "pylon", ports: 2,
			args:  func(p []int) []string { return pylonArgs(f, c, hub.backend, engine, p[0], p[1], s) },
			ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }})
	}
	ports, err = st.startAll(ctx, svcs...)
	if err != nil {
		return nil, err
	}
	ep := &endpoints{
		gateway: "http://" + addr(ports[0][0]), gatewayMetrics: "http://" + addr(ports[0][1]) + "/metrics",
		hub: "http://" + addr(hub.api), hubMetrics: "http://" + addr(hub.metrics) + "/metrics",
		pylonMetrics: map[string]string{}, apiKey: apiKey,
	}
	for i, c := range clusters {
		ep.pylonMetrics[c.id] = "http://" + addr(ports[i+1][1]) + "/metrics"
	}
	if err := waitRoutable(ctx, ep.hub, f); err != nil {
		return nil, err
	}
	return ep, nil
}

// waitRoutable polls the hub's /debug/state until every cluster of the
// fleet is routable for the model: registered with an input TPS (pulsar
// ranks only weighted clusters) and a measured RTT (the hub routes to no
// cluster before its first /health probe).
func waitRoutable(ctx context.Context, hubURL string, f fleet) error {
	want := f.clusterIDs()
	missing := want
	err := poll(ctx, nil, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hubURL+"/debug/state", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		var st debugState
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return false, nil
		}
		missing = st.unroutable(f.model, want)
		return len(missing) == 0, nil
	}, "the hub did not see every cluster routable")
	if err != nil {
		return fmt.Errorf("%w (still waiting for %v)", err, missing)
	}
	return nil
}

// debugState is the part of the hub's /debug/state the demo reads.
type debugState struct {
	Routing struct {
		Targets []struct {
			Model    string `json:"model"`
			Clusters []struct {
				ClusterID string `json:"cluster_id"`
				RTTNanos  int64  `json:"rtt_ns"`
				Stats     struct {
					MaxInputTPS      float64 `json:"max_input_tps"`
					LastMeanInputTPS float64 `json:"last_mean_input_tps"`
				} `json:"stats"`
			} `json:"clusters"`
		} `json:"targets"`
	} `json:"routing"`
}

// unroutable lists the clusters of want that model cannot be routed to yet.
func (st *debugState) unroutable(model string, want []string) []string {
	ok := map[string]bool{}
	for _, t := range st.Routing.Targets {
		if t.Model != model {
			continue
		}
		for _, c := range t.Clusters {
			ok[c.ClusterID] = c.RTTNanos > 0 && (c.Stats.MaxInputTPS > 0 || c.Stats.LastMeanInputTPS > 0)
		}
	}
	var out []string
	for _, id := range want {
		if !ok[id] {
			out = append(out, id)
		}
	}
	return out
}

// writeSecrets writes fresh random credentials to private files in dir:
// the pylons' registration token, the gateway's token for the hub and one
// gateway API key (returned, for the load generator).
func writeSecrets(dir string) (secrets, string, error) {
	s := secrets{registration: filepath.Join(dir, "registration-token"), gateway: filepath.Join(dir, "gateway-token"),
		apiKeys: filepath.Join(dir, "api-keys")}
	key := "sk-demo-" + randomHex()
	for path, content := range map[string]string{
		s.registration: randomHex(), s.gateway: randomHex(),
		s.apiKeys: key + " demo", // the name is the principal in the gateway's logs and rate limits
	} {
		if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
			return s, "", err
		}
	}
	return s, key, nil
}

func randomHex() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}
