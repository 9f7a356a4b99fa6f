package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routepage"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// writeFile writes content to a file in the test's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testLBConfigRejected: an lb-config field the algorithm does not take stops
// the hub at startup with an error naming the algorithm and the field.
func testLBConfigRejected(t *testing.T) {
	path := writeFile(t, "lb.json", `{"models":{"`+model+`":{"algorithm":"power-of-n","last_cluster_affinity":true}}}`)
	ports := freePorts(t, 3)
	p, err := launch("hub", bin.hub, newEnv(t).hubArgs(ports, []string{"--lb-config-path", path}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
		t.Fatal("the hub kept running with an invalid lb config")
	}
	out := p.out.String()
	if p.cmd.ProcessState.ExitCode() == 0 ||
		!strings.Contains(out, "power-of-n config does not support field(s): last_cluster_affinity") {
		t.Fatalf("exit %d, output:\n%s", p.cmd.ProcessState.ExitCode(), out)
	}
}

// testLastClusterAffinity runs pulsar-wait-and-widen with
// last_cluster_affinity over two clusters: a session without a hint goes to
// its key's rank-1 cluster; the same key hinted with the other cluster is
// served there (returning, promoted); the session metric counts both; a
// hint from a caller without the gateway token (let in by
// --allow-anonymous-clients) is ignored; and a routing expression cannot
// turn the feature on.
func testLastClusterAffinity(t *testing.T) {
	e := newEnv(t)
	lbPath := writeFile(t, "lb.json", `{"models":{"`+model+`":{"algorithm":"pulsar-wait-and-widen",
		"cache_affinity_wait_ms":200,"last_cluster_affinity":true}}}`)
	h := e.hub("--lb-config-path", lbPath, "--allow-anonymous-clients")
	a := e.pylon(h, e.mock("--ttft-ms", "1", "--token-delay-ms", "1"), "pylon-a", "--initial-input-tps", "50000",
		"--region", "eu-west")
	b := e.pylon(h, e.mock("--ttft-ms", "1", "--token-delay-ms", "1"), "pylon-b", "--initial-input-tps", "50000")
	e.waitRegistered(h, a, b)
	ctx := t.Context()
	gateway := func(hint string) http.Header {
		hdr := http.Header{}
		hdr.Set("x-cache-affinity-key", "mt:v1:session:e2e")
		if hint != "" {
			hdr.Set("x-stargate-last-cluster-id", hint)
		}
		return hdr
	}

	// Both clusters must be ranked (their max_input_tps arrives with the
	// first stats report).
	var home string
	waitFor(t, 10*time.Second, "a first session request to be served", func() (bool, string) {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(32), OutputTokens: 2, Header: gateway("")})
		home = r.Header.Get("x-stargate-cluster-id")
		return r.ok(2), r.String()
	})
	other := "pylon-a"
	if home == "pylon-a" {
		other = "pylon-b"
	}
	for range 3 {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(32), OutputTokens: 2, Header: gateway(other)})
		if got := r.Header.Get("x-stargate-cluster-id"); !r.ok(2) || got != other {
			t.Fatalf("returning session hinted %s was served by %q: %v", other, got, r)
		}
	}
	// Without the gateway token the hint and the key are dropped: the
	// request is unclassified and routes like any keyless request.
	if r := h.stream(ctx, e.cl, chat{Content: promptOf(32), OutputTokens: 2, Header: gateway(other), Anonymous: true}); !r.ok(2) {
		t.Fatalf("untrusted request: %v", r)
	}

	m := mustScrape(t, e.cl, h.metricsURL)
	for _, c := range []struct {
		state, selection string
		min              float64
	}{
		{"new", "primary", 1}, {"returning", "primary", 3},
		{"new", "fallback", 0}, {"returning", "fallback", 0}, {"stale", "primary", 0}, {"stale", "fallback", 0},
	} {
		got := m.value("stargate_routing_session_selections_total", "model", model, "algorithm", "pulsar-wait-and-widen",
			"session_state", c.state, "selection", c.selection)
		if got < c.min || (c.min == 0 && got != 0) || (c.state == "returning" && c.selection == "primary" && got != 3) {
			t.Errorf("session_state=%s selection=%s: %v", c.state, c.selection, got)
		}
	}

	// last_cluster_affinity is not an expression parameter.
	hdr := gateway("")
	hdr.Set("x-routing-method", "pulsar-wait-and-widen;last_cluster_affinity=true")
	r := h.stream(ctx, e.cl, chat{Content: promptOf(8), OutputTokens: 1, Header: hdr})
	if r.Status != http.StatusBadRequest || r.Header.Get("x-stargate-error-code") != "unknown_parameter" {
		t.Errorf("expression with last_cluster_affinity: status %d, code %q", r.Status, r.Header.Get("x-stargate-error-code"))
	}
	// A valid expression is served and counted.
	hdr.Set("x-routing-method", "pulsar-wait-and-widen;cache_affinity_wait_ms=0")
	if r := h.stream(ctx, e.cl, chat{Content: promptOf(8), OutputTokens: 1, Header: hdr}); !r.ok(1) {
		t.Errorf("valid expression: %v", r)
	}
	m = mustScrape(t, e.cl, h.metricsURL)
	if got := m.value("stargate_routing_expressions_total", "algorithm", "pulsar-wait-and-widen", "cache", "build"); got != 1 {
		t.Errorf("stargate_routing_expressions_total{cache=build} = %v, want 1", got)
	}
	checkRoutingPage(t, e, h, home, other)
}

// checkRoutingPage reads the routing page's JSON after testLastClusterAffinity:
// both clusters, grouped by the region pylon-a was started with and by RTT
// for pylon-b; the one session's turns in order, named by a hash, never by
// its key; the returning turns counted.
func checkRoutingPage(t *testing.T, e *env, h *hubProc, home, other string) {
	t.Helper()
	var body json.RawMessage
	if err := getJSON(e.cl, h.adminURL+"/debug/routing?window_s=600", "", &body); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "mt:v1:session:e2e") {
		t.Error("/debug/routing names the session by its raw affinity key")
	}
	var v routepage.View
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("/debug/routing: %v", err)
	}
	regions := map[string]string{}
	for _, c := range v.Clusters {
		regions[c.ClusterID] = c.Region + "/" + c.RegionSource
	}
	if regions["pylon-a"] != "eu-west/pylon" || regions["pylon-b"] != "rtt-1/rtt" {
		t.Errorf("cluster regions %v, want pylon-a eu-west (its --region) and pylon-b rtt-1", regions)
	}
	if len(v.Sessions.Items) != 1 {
		t.Fatalf("sessions %+v, want the test's one session", v.Sessions)
	}
	s := v.Sessions.Items[0]
	var clusters []string
	for _, turn := range s.Turns {
		clusters = append(clusters, turn.ClusterID)
	}
	if len(s.Turns) < 4 || clusters[0] != home || clusters[1] != other || clusters[2] != other || clusters[3] != other ||
		s.Turns[0].Flow != "first" || s.Turns[2].Flow != "stay" {
		t.Errorf("session turns on %v (flows of the first three: %v), want %s then %s three times", clusters,
			[]string{s.Turns[0].Flow, s.Turns[1].Flow, s.Turns[2].Flow}, home, other)
	}
	returning := 0
	for _, d := range v.Decisions {
		if d.Algorithm == "pulsar-wait-and-widen" {
			returning += d.SessionClasses["returning"]
		}
	}
	if returning != 3 || v.Records.InWindow < 6 || !v.Records.WindowCovered || v.HubID == "" {
		t.Errorf("returning %d, records %+v, hub %q", returning, v.Records, v.HubID)
	}
}

// testPrefixAffinity runs prefix-affinity over three clusters: the first
// request of a prompt is placed by load and its cluster becomes the
// prompt's holder once its answer starts; every later request sharing the
// prompt's prefix, keyless, is served there as a cache-tier decision; a
// malformed summary is routed as if none had been sent. The tiers and the
// index show in the metrics and /debug/state.
func testPrefixAffinity(t *testing.T) {
	e := newEnv(t)
	lbPath := writeFile(t, "lb.json", `{"models":{"`+model+`":{"algorithm":"prefix-affinity"}}}`)
	h := e.hub("--lb-config-path", lbPath)
	var pylons []*pylonProc
	for _, id := range []string{"pylon-a", "pylon-b", "pylon-c"} {
		pylons = append(pylons, e.pylon(h, e.mock("--ttft-ms", "1", "--token-delay-ms", "1"), id, "--initial-input-tps", "50000"))
	}
	e.waitRegistered(h, pylons...)
	ctx := t.Context()
	summary := func(blocks int, seed uint64) string {
		hashes := make([]uint64, blocks)
		for i := range hashes {
			hashes[i] = seed<<32 | uint64(i)
		}
		return prefixhash.FormatHeader(prefixhash.Summarize(hashes, prefixhash.DefaultBlockTokens))
	}
	withSummary := func(v string) http.Header {
		hdr := http.Header{}
		hdr.Set("x-stargate-prompt-prefix", v)
		return hdr
	}
	var holder string
	waitFor(t, 10*time.Second, "the prompt's first request to be served", func() (bool, string) {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(64), OutputTokens: 2, Header: withSummary(summary(100, 7))})
		holder = r.Header.Get("x-stargate-cluster-id")
		return r.ok(2), r.String()
	})
	// Later turns of the same prompt: their summaries share every
	// checkpoint of the first one (a longer prompt, the same start).
	for i := range 6 {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(64), OutputTokens: 2, Header: withSummary(summary(100+10*i, 7))})
		if got := r.Header.Get("x-stargate-cluster-id"); !r.ok(2) || got != holder {
			t.Fatalf("request %d sharing the prefix held by %s was served by %q: %v", i, holder, got, r)
		}
	}
	if r := h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 1, Header: withSummary("1.16.3.not-base64!")}); !r.ok(1) {
		t.Fatalf("malformed summary: %v", r)
	}
	m := mustScrape(t, e.cl, h.metricsURL)
	if got := m.value("stargate_prefix_routed_total", "model", model, "tier", "cache"); got != 6 {
		t.Errorf("cache-tier answers: %v, want 6", got)
	}
	if got := m.value("stargate_prefix_routed_total", "model", model, "tier", "load"); got < 1 {
		t.Errorf("load-tier answers: %v, want the first request", got)
	}
	if got := m.value("stargate_prefix_summaries_total", "model", model, "result", "invalid"); got != 1 {
		t.Errorf("invalid summaries: %v, want 1", got)
	}
	if got := m.value("stargate_prefix_index_marks_total"); got < 7 {
		t.Errorf("index marks: %v, want at least 7", got)
	}
	var st struct {
		Prefix struct {
			Nodes    int `json:"nodes"`
			Clusters int `json:"clusters"`
		} `json:"prefix_index"`
	}
	if err := getJSON(e.cl, h.adminURL+"/debug/state", "", &st); err != nil {
		t.Fatal(err)
	}
	if st.Prefix.Nodes == 0 || st.Prefix.Clusters < 1 {
		t.Errorf("/debug/state prefix_index: %+v", st.Prefix)
	}
	var v routepage.View
	if err := getJSON(e.cl, h.adminURL+"/debug/routing", "", &v); err != nil {
		t.Fatal(err)
	}
	p := v.Prefix
	if !p.Enabled || p.Index.Nodes == 0 || p.Tiers["cache"] != 6 || len(p.Hottest) == 0 || p.Hottest[0].Requests != 7 ||
		len(p.Hottest[0].Clusters) != 1 || p.Hottest[0].Clusters[0].ClusterID != holder {
		t.Errorf("/debug/routing prefix %+v, want the prompt's 7 requests all answered by %s", p, holder)
	}
}
