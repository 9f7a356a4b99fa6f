package demostack

import (
	"strings"
	"testing"
)

// demoOutput is what bin/demo --keep printed on a run (URLs shortened).
const demoOutput = `stargate demo: starting a gateway, a hub and 4 clusters on loopback (logs in /tmp/x/logs)
stack up in 0.5 s: gateway http://127.0.0.1:33127/v1 -> hub http://127.0.0.1:45489 -> 4 clusters
  hub routes demo-model with pulsar-wait-and-widen (cache_affinity_wait_ms 200, last_cluster_affinity on)
  region near (hub RTT ~1 ms, engine TTFT +10 ms):  near-a 64k/133k tok/s  near-b 32k/66k tok/s
  region far  (hub RTT ~25 ms, engine TTFT +35 ms):  far-a 48k/100k tok/s  far-b 64k/133k tok/s
requests   55: 55 ok, 0 failed

DEMO_KEEP: the stack stays up until Ctrl-C
  gateway        http://127.0.0.1:33127/v1  (API key sk-demo-975c, in /tmp/stargate-demo-1/api-keys)
  hub            http://127.0.0.1:45489  (gateway token gw-0123; routing state http://127.0.0.1:37061/debug/state)
  metrics        gateway http://127.0.0.1:34461/metrics  hub http://127.0.0.1:37061/metrics
                 pylon far-a http://127.0.0.1:46659/metrics
                 pylon far-b http://127.0.0.1:33613/metrics
                 pylon near-a http://127.0.0.1:33477/metrics
                 pylon near-b http://127.0.0.1:37461/metrics
  try            curl -sN http://127.0.0.1:33127/v1/chat/completions -H 'Authorization: Bearer sk-demo-975c' \
`

func TestParserReadsTheKeepBlock(t *testing.T) {
	p := newParser()
	for _, l := range strings.Split(demoOutput, "\n") {
		p.line(l)
	}
	if !p.complete {
		t.Fatal("the try line did not complete the block")
	}
	ep, err := p.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if ep.Gateway != "http://127.0.0.1:33127" || ep.APIKey != "sk-demo-975c" || ep.Hub != "http://127.0.0.1:45489" || ep.GatewayToken != "gw-0123" ||
		ep.GatewayMetrics != "http://127.0.0.1:34461/metrics" || ep.HubMetrics != "http://127.0.0.1:37061/metrics" || ep.Model != "demo-model" {
		t.Fatalf("endpoints = %+v", ep)
	}
	if len(ep.PylonMetrics) != 4 || ep.PylonMetrics["near-b"] != "http://127.0.0.1:37461/metrics" {
		t.Fatalf("pylons = %v", ep.PylonMetrics)
	}
	if ep.Region["far-a"] != "far" || ep.Region["near-b"] != "near" || len(ep.Region) != 4 {
		t.Fatalf("regions = %v", ep.Region)
	}
}

func TestParserSaysWhatIsMissing(t *testing.T) {
	p := newParser()
	for _, l := range strings.Split(demoOutput, "\n") {
		if !strings.Contains(l, "region far") && !strings.Contains(l, "routing state") {
			p.line(l)
		}
	}
	_, err := p.endpoints()
	if err == nil || !strings.Contains(err.Error(), "hub URL") || !strings.Contains(err.Error(), "region of far-a") {
		t.Fatalf("endpoints error = %v", err)
	}
}

// With several pylons per cluster the demo names them "<cluster>-p<i>";
// each maps back to its cluster and region, and fractional prefill rates
// still name the clusters.
func TestParserMapsPylonsToTheirCluster(t *testing.T) {
	out := strings.NewReplacer(
		"pylon far-a ", "pylon far-a-p1 ", "pylon far-b ", "pylon far-a-p2 ",
		"near-b 32k/66k tok/s", "near-b 1.5k/12k tok/s",
	).Replace(demoOutput)
	p := newParser()
	for _, l := range strings.Split(out, "\n") {
		p.line(l)
	}
	ep, err := p.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if ep.PylonCluster["far-a-p1"] != "far-a" || ep.PylonCluster["far-a-p2"] != "far-a" || ep.PylonCluster["near-b"] != "near-b" {
		t.Fatalf("pylon clusters = %v", ep.PylonCluster)
	}
	if ep.Region["near-b"] != "near" {
		t.Fatalf("regions = %v", ep.Region)
	}
}

func TestParseOutput(t *testing.T) {
	ep, err := ParseOutput(demoOutput)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Gateway != "http://127.0.0.1:33127" || ep.HubMetrics != "http://127.0.0.1:37061/metrics" || ep.HubAdmin != "http://127.0.0.1:37061" {
		t.Errorf("got %+v", ep)
	}
}

func TestParseOutputFails(t *testing.T) {
	before, after, _ := strings.Cut(demoOutput, "DEMO_KEEP")
	for _, c := range []struct {
		name, out, want string
	}{
		// The banner names the gateway too, but the stack only stays up
		// after the marker.
		{"no keep block", before, "has no DEMO_KEEP block"},
		{"block cut short", before + "DEMO_KEEP: up\n  gateway        http://127.0.0.1:1/v1  (API key k, in f)\n", "does not end"},
		{"metrics not /metrics", before + "DEMO_KEEP" + strings.Replace(after, "37061/metrics", "37061/prom", 1), `"http://127.0.0.1:37061/prom" does not end in /metrics`},
		{"no hub line", before + "DEMO_KEEP" + strings.Replace(after, "routing state", "state", 1), "hub URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ep, err := ParseOutput(c.out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %+v, %v; want an error with %q", ep, err, c.want)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"  gateway        http://127.0.0.1:1/v1  (API key sk-demo-6ec3, in /tmp/k)":             "  gateway        http://127.0.0.1:1/v1  (API key <redacted>, in /tmp/k)",
		"  hub            http://127.0.0.1:2  (gateway token 4801da; routing state http://x/y)": "  hub            http://127.0.0.1:2  (gateway token <redacted>; routing state http://x/y)",
		"  try   curl -sN http://x/v1 -H 'Authorization: Bearer sk-demo-6ec3' \\":               "  try   curl -sN http://x/v1 -H 'Authorization: Bearer <redacted>' \\",
		"requests   279: 279 ok": "requests   279: 279 ok",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
