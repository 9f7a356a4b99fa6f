package demostack

import (
	"strings"
	"testing"
)

// keepOutput is the end of what bin/demo --keep printed on a run
// (credentials and most pylons cut).
const keepOutput = `stargate demo: starting a gateway, a hub and 4 clusters on loopback (logs in /tmp/r/demo-20261202T154607Z/logs)
stack up in 0.5 s: gateway http://127.0.0.1:39023/v1 -> hub http://127.0.0.1:41231 -> 4 clusters
  hub routes demo-model with pulsar-wait-and-widen (cache_affinity_wait_ms 20, last_cluster_affinity on)
sessions   64 multi-turn sessions; 34 escaped their cluster (changed it between two turns, 44 moves in all);
total      4.5 s including startup

DEMO_KEEP: the stack stays up until Ctrl-C
  gateway        http://127.0.0.1:39023/v1  (API key sk-demo-6ec3, in /tmp/stargate-demo-1766292701/api-keys)
  hub            http://127.0.0.1:41231  (gateway token 4801da; routing state http://127.0.0.1:43693/debug/state)
  metrics        gateway http://127.0.0.1:44137/metrics  hub http://127.0.0.1:43693/metrics
                 pylon far-a-p1 http://127.0.0.1:37371/metrics
  try            curl -sN http://127.0.0.1:39023/v1/chat/completions -H 'Authorization: Bearer sk-demo-6ec3' \
`

func TestParseOutput(t *testing.T) {
	ep, err := ParseOutput(keepOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := Endpoints{Gateway: "http://127.0.0.1:39023", HubMetrics: "http://127.0.0.1:43693/metrics", HubAdmin: "http://127.0.0.1:43693"}
	if ep != want {
		t.Errorf("got %+v, want %+v", ep, want)
	}
}

func TestParseOutputFails(t *testing.T) {
	before, after, _ := strings.Cut(keepOutput, "DEMO_KEEP")
	for _, c := range []struct {
		name, out, want string
	}{
		// The banner names the hub too, but the stack only stays up after
		// the marker.
		{"no keep block", before, "has no DEMO_KEEP block"},
		{"no metrics line", before + "DEMO_KEEP: up\n  gateway        http://127.0.0.1:1/v1  (API key k, in f)\n", "no `metrics  gateway <url>  hub <url>` line"},
		{"metrics not /metrics", before + "DEMO_KEEP" + strings.Replace(after, "43693/metrics", "43693/prom", 1), `"http://127.0.0.1:43693/prom" does not end in /metrics`},
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
