package stack

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// answers reports whether something accepts connections at addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// environ is the environment a child was started with, from /proc.
func environ(t *testing.T, s *Stack, name string) []string {
	t.Helper()
	p := s.l.latest(name)
	if p == nil {
		t.Fatalf("no child %s", name)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/environ")
	if err != nil {
		t.Skipf("reading a child's environment: %v", err)
	}
	return strings.Split(string(b), "\x00")
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// A child killed or terminated can be restarted where it was; restart
// refuses a running child and an unknown one; Stop still stops the
// restarted children and nothing else is left. One gateway runs alone, as
// before Options.Gateways existed.
func TestKillTerminateRestart(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	logs := t.TempDir()
	st, err := Start(t.Context(), Options{BinDir: fakeBin(t), LogDir: logs, Fleet: LegacyBenchFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	want := []string{"engine-far-a", "engine-far-b", "engine-near-a", "engine-near-b", "gateway", "hub",
		"pylon-far-a", "pylon-far-b", "pylon-near-a", "pylon-near-b"}
	if got := st.Children(); !slices.Equal(got, want) {
		t.Fatalf("children %v, want %v", got, want)
	}
	pylon := listenAddrs(t, logs)["pylon-near-a"]
	// With one gateway the gateway runs as before: no peers, no secret.
	env := environ(t, st, "gateway")
	for _, k := range []string{"OLRIC_PEERS", "OLRIC_AUTH_SECRET_FILE"} {
		if v, ok := envValue(env, k); ok {
			t.Errorf("%s=%q with one gateway", k, v)
		}
	}
	if ep := st.Endpoints(); len(ep.Gateways) != 1 || ep.Gateways[0] != ep.Gateway {
		t.Errorf("gateways %v", ep.Gateways)
	}

	if err := st.Restart(t.Context(), "pylon-near-a"); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("restart of a running child: %v", err)
	}
	if err := st.Kill("pylon-near-a"); err != nil {
		t.Fatal(err)
	}
	if st.Running("pylon-near-a") || answers(pylon) {
		t.Fatal("pylon-near-a still runs after Kill")
	}
	if err := st.Kill("pylon-near-a"); err == nil {
		t.Fatal("Kill of an exited child succeeded")
	}
	if err := st.Restart(t.Context(), "pylon-near-a"); err != nil {
		t.Fatal(err)
	}
	if !st.Running("pylon-near-a") || !answers(pylon) {
		t.Fatalf("pylon-near-a not back on %s", pylon)
	}

	// The fake hub leaves on SIGTERM, as the real one does after its drain.
	if clean, err := st.Terminate("hub", 10*time.Second); err != nil || !clean {
		t.Fatalf("Terminate = %v, %v; want a clean exit", clean, err)
	}
	if err := st.Restart(t.Context(), "hub"); err != nil {
		t.Fatal(err)
	}
	if err := st.Restart(t.Context(), "no-such-child"); err == nil {
		t.Fatal("restart of an unknown child succeeded")
	}
	// A restarted child replaces its old process: still one each.
	if got := st.Children(); !slices.Equal(got, want) {
		t.Fatalf("children after restarts %v", got)
	}
	st.Stop()
	assertAllGone(t, logs)
}

// Several gateways: each one after the first joins the ones before it,
// and a restarted gateway joins every other one; they share one Olric
// secret. ExtraArgs reach the children they name, after the stack's own
// flags.
func TestSeveralGatewaysAndExtraArgs(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	logs := t.TempDir()
	st, err := Start(t.Context(), Options{BinDir: fakeBin(t), LogDir: logs, Fleet: LegacyBenchFleet(), Gateways: 3,
		ExtraArgs: map[string][]string{"gateway": {"--extra-all", "1"}, "gateway-2": {"--extra-two"}, "hub": {"--extra-hub"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	ep := st.Endpoints()
	if len(ep.Gateways) != 3 || len(ep.GatewaysMetrics) != 3 || ep.Gateways[0] != ep.Gateway || ep.GatewaysMetrics[0] != ep.GatewayMetrics {
		t.Fatalf("gateways %v %v (first %s)", ep.Gateways, ep.GatewaysMetrics, ep.Gateway)
	}
	gossip := map[string]string{}
	for _, g := range []string{"gateway", "gateway-2", "gateway-3"} {
		wantEnd := " --extra-all 1"
		if g == "gateway-2" {
			wantEnd += " --extra-two"
		}
		if line := firstLine(t, filepath.Join(logs, g+".log")); !strings.HasSuffix(line, wantEnd) {
			t.Errorf("%s: %q, want it to end with %q", g, line, wantEnd)
		}
		env := environ(t, st, g)
		secret, ok := envValue(env, "OLRIC_AUTH_SECRET_FILE")
		if b, err := os.ReadFile(secret); !ok || err != nil || len(strings.TrimSpace(string(b))) < 32 {
			t.Errorf("%s: Olric secret %q (%v)", g, secret, err)
		}
		port, _ := envValue(env, "OLRIC_MEMBERLIST_BIND_PORT")
		gossip[g] = "127.0.0.1:" + port
	}
	if line := firstLine(t, filepath.Join(logs, "hub.log")); !strings.HasSuffix(line, " --extra-hub") {
		t.Errorf("hub: %q", line)
	}
	if peers, _ := envValue(environ(t, st, "gateway"), "OLRIC_PEERS"); peers != "" {
		t.Errorf("the first gateway joins %q, want nobody", peers)
	}
	for _, g := range []string{"gateway-2", "gateway-3"} {
		if peers, _ := envValue(environ(t, st, g), "OLRIC_PEERS"); peers != gossip["gateway"] {
			t.Errorf("%s joins %q, want the first gateway %s", g, peers, gossip["gateway"])
		}
	}
	if err := st.Kill("gateway"); err != nil {
		t.Fatal(err)
	}
	if err := st.Restart(t.Context(), "gateway"); err != nil {
		t.Fatal(err)
	}
	others := []string{gossip["gateway-2"], gossip["gateway-3"]}
	slices.Sort(others)
	if peers, _ := envValue(environ(t, st, "gateway"), "OLRIC_PEERS"); peers != strings.Join(others, ",") {
		t.Errorf("the restarted gateway joins %q, want %v", peers, others)
	}
	st.Stop()
	assertAllGone(t, logs)
}

// firstLine is a child log's first line: "# binary args".
func firstLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}
