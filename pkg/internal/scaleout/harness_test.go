package scaleout

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/stack"
)

var binDir = flag.String("bin", os.Getenv("STARGATE_SCALEOUT_BIN"),
	"folder holding gateway, hub, pylon and mock-engine (make build writes ./bin); the tests skip without it")

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is the demo's two regions of two clusters each, with fewer slots
// (4) so that the sessions workload below keeps most clusters busy and
// some turns overflow: the case where hubs that see only their own
// reservations could disagree.
func fleet() stack.Fleet {
	f := stack.DemoFleet()
	f.Slots = 4
	return f
}

// lbConfig writes the demo's routing: pulsar-wait-and-widen with
// last_cluster_affinity, waiting 200 ms for a session's cluster.
func lbConfig(t *testing.T, model string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"models": map[string]any{model: map[string]any{
		"algorithm": "pulsar-wait-and-widen", "cache_affinity_wait_ms": 200, "last_cluster_affinity": true}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lb-config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startStack starts hubs hub replicas and gateways gateways on loopback
// and stops them when the test ends. A failed test keeps its child logs.
func startStack(t *testing.T, hubs, gateways int) *stack.Stack {
	t.Helper()
	if *binDir == "" {
		t.Skip("the scale-out tests need the binaries: -args -bin <dir> or STARGATE_SCALEOUT_BIN (make e2e)")
	}
	bin, err := filepath.Abs(*binDir)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := os.MkdirTemp("", "stargate-scaleout-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("child logs: %s", logs)
			return
		}
		_ = os.RemoveAll(logs)
	})
	f := fleet()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{BinDir: bin, LogDir: logs, Fleet: f, LBConfigPath: lbConfig(t, f.Model),
		Principal: "scaleout", Hubs: hubs, Gateways: gateways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st
}

// httpClient is a client of its own per test, closed at cleanup so no
// keep-alive goroutine outlives the test.
func httpClient(t *testing.T) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// routed is how many requests the hub at metricsURL has finished, by
// status.
func routed(ctx context.Context, c *http.Client, metricsURL string) (map[string]float64, error) {
	fams, err := promscrape.Scrape(ctx, c, metricsURL)
	if err != nil {
		return nil, err
	}
	return fams.CounterByLabel("stargate_requests_total", "status"), nil
}

// hubCounters sums, over every hub of ep, the hub counters the scale-out
// report names: retries by reason, and returning sessions' selections by
// rank (primary: their cluster; fallback: they escaped).
func hubCounters(ctx context.Context, c *http.Client, metricsURLs []string) (retries map[string]float64, returning map[string]float64, err error) {
	retries, returning = map[string]float64{}, map[string]float64{}
	for _, u := range metricsURLs {
		fams, err := promscrape.Scrape(ctx, c, u)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range fams.CounterByLabel("stargate_proxy_retries_total", "reason") {
			retries[k] += v
		}
		for _, m := range fams["stargate_routing_session_selections_total"].GetMetric() {
			state, sel := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "session_state":
					state = l.GetValue()
				case "selection":
					sel = l.GetValue()
				}
			}
			if state == "returning" {
				returning[sel] += m.GetCounter().GetValue()
			}
		}
	}
	return retries, returning, nil
}

// sum adds a map's values.
func sum(m map[string]float64) float64 {
	var n float64
	for _, v := range m {
		n += v
	}
	return n
}

// drain reads and closes a response body, returning what it read.
func drain(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	return string(b)
}

// describe formats a per-hub count line for the test log.
func describe(names []string, counts []float64) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f", n, counts[i])
	}
	return strings.Join(parts, ", ")
}
