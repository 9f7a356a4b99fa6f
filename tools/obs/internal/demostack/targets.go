package demostack

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/stargate-router/stargate/tools/obs/internal/scrape"
)

// Target is one /metrics endpoint to scrape, with the target labels a
// Prometheus of a real deployment would give it (docs/operations.md):
// job always, cluster and region on pylons and engines.
type Target struct {
	Job, URL string
	Labels   map[string]string
}

// Name is a short name for reports: the job and the cluster, if any.
func (t Target) Name() string {
	if c := t.Labels["cluster"]; c != "" {
		return t.Job + "/" + c
	}
	return t.Job
}

// Targets lists every endpoint of the stack: gateway, hub, each pylon and
// the engine behind it. The demo does not print the engines' URLs; each
// pylon names its engine in pylon_upstream_engine_up{engine="host:port"},
// and the mock engine serves /metrics on its API port.
func (ep Endpoints) Targets(ctx context.Context, c *http.Client) ([]Target, error) {
	ts := []Target{{Job: "gateway", URL: ep.GatewayMetrics}, {Job: "hub", URL: ep.HubMetrics}}
	for _, name := range slices.Sorted(maps.Keys(ep.PylonMetrics)) {
		cluster := ep.PylonCluster[name]
		if cluster == "" {
			cluster = name
		}
		labels := map[string]string{"cluster": cluster, "region": ep.Region[cluster]}
		url := ep.PylonMetrics[name]
		ts = append(ts, Target{Job: "pylon", URL: url, Labels: labels})
		engines, err := engineAddrs(ctx, c, url)
		if err != nil {
			return nil, err
		}
		for _, e := range engines {
			ts = append(ts, Target{Job: "engine", URL: "http://" + e + "/metrics", Labels: labels})
		}
	}
	return ts, nil
}

// engineAddrs reads the engine label values of a pylon's
// pylon_upstream_engine_up.
func engineAddrs(ctx context.Context, c *http.Client, pylonMetrics string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pylonMetrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	text, err := scrape.ParseText(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pylonMetrics, err)
	}
	var out []string
	for _, s := range text.Samples {
		if e := s.Labels["engine"]; s.Name == "pylon_upstream_engine_up" && e != "" {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no pylon_upstream_engine_up{engine} series to find the engine by", pylonMetrics)
	}
	slices.Sort(out)
	return out, nil
}
