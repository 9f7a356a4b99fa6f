package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// model is the model every scenario serves.
	model = "e2e-model"
	// heartbeat is every pylon's --min-update-interval-ms.
	heartbeat = 100 * time.Millisecond
	// stopGrace is how long a SIGTERMed process may take before SIGKILL.
	stopGrace = 5 * time.Second
	// readyTimeout bounds a child's start-up to its readiness probe.
	readyTimeout = 30 * time.Second
	// logTail is how much of a child's output a failing test prints.
	logTail = 64 << 10
)

// syncBuffer collects a child's stdout and stderr; the exec copier writes
// while a test may read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one child process.
type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed once the process has been waited for
}

// launch starts path with args; a goroutine waits for it and closes done.
func launch(name, path string, args []string) (*proc, error) {
	p := &proc{name: name, args: args, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = 2 * time.Second // bounds the output copier if a pipe stays open
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILLs. It returns
// once the process is gone; calling it again does nothing.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail is the end of the process's output.
func (p *proc) tail() string {
	s := p.out.String()
	if len(s) > logTail {
		s = "...\n" + s[len(s)-logTail:]
	}
	return s
}

// env is one scenario's processes, HTTP client and secrets.
type env struct {
	t  *testing.T
	cl *http.Client
	// gatewayToken is what requests present to every hub of the scenario
	// (the gateway's token); gatewayTokenFile and registrationTokenFile
	// hold the hubs' and pylons' tokens, since a hub refuses to start
	// without them.
	gatewayToken, gatewayTokenFile, registrationTokenFile string
}

// newEnv returns an env whose client's connections are closed when the
// test ends, after its processes are stopped.
func newEnv(t *testing.T) *env {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	dir := t.TempDir()
	e := &env{t: t, cl: &http.Client{Transport: tr}, gatewayToken: "e2e-gateway-token",
		gatewayTokenFile: filepath.Join(dir, "gateway-token"), registrationTokenFile: filepath.Join(dir, "registration-token")}
	for path, token := range map[string]string{e.gatewayTokenFile: e.gatewayToken, e.registrationTokenFile: "e2e-registration-token"} {
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the child binds it: start retries.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("picking a free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// errExited means a child ended before it was ready.
var errExited = errors.New("process exited before it was ready")

// waitReady polls url, the child's readiness probe, every 20 ms until it
// answers 200, and stops at once when the process exits; timeout is only
// the failure deadline.
func (e *env) waitReady(p *proc, url string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if code, err := e.status(url); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-p.done:
			return errExited
		case <-deadline.C:
			return fmt.Errorf("%s not ready within %v", url, timeout)
		case <-poll.C:
		}
	}
}

// status GETs url and returns its status code.
func (e *env) status(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := e.cl.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// startAt launches a child and waits for its readiness URL. On success
// the child is stopped when the test ends (its output is logged if the
// test failed) and startAt returns the time it became ready.
func (e *env) startAt(name, path string, args []string, readyURL string) (*proc, time.Time, error) {
	p, err := launch(name, path, args)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := e.waitReady(p, readyURL, readyTimeout); err != nil {
		p.stop()
		return p, time.Time{}, err
	}
	ready := time.Now()
	t := e.t
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("==== %s %s ====\n%s", p.name, strings.Join(p.args, " "), p.tail())
		}
	})
	return p, ready, nil
}

// start picks nports free ports, starts a child with args(ports) and
// waits for readyURL(ports); a child that lost a port to another process
// is started again on new ports.
func (e *env) start(name, path string, nports int, args func([]int) []string, readyURL func([]int) string) (*proc, []int) {
	t := e.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, nports)
		p, _, err := e.startAt(name, path, args(ports), readyURL(ports))
		if err == nil {
			return p, ports
		}
		if p != nil && attempt < 5 && strings.Contains(p.out.String(), "address already in use") {
			t.Logf("%s lost a port to another process; retrying on new ports", name)
			continue
		}
		out := ""
		if p != nil {
			out = p.tail()
		}
		t.Fatalf("%s did not start: %v\n%s", name, err, out)
	}
}

// mockEngine is a running bin/mock-engine.
type mockEngine struct {
	*proc
	url string
}

// mock starts a mock engine serving model with extra flags.
func (e *env) mock(flags ...string) *mockEngine {
	e.t.Helper()
	p, ports := e.start("mock-engine", bin.mock, 1, func(ports []int) []string {
		return append([]string{"--listen", addr(ports[0]), "--model-name", model, "--drain-timeout", "2s"}, flags...)
	}, func(ports []int) string { return "http://" + addr(ports[0]) + "/health" })
	return &mockEngine{proc: p, url: "http://" + addr(ports[0])}
}

// hubProc is a running bin/hub.
type hubProc struct {
	*proc
	ports      []int // listen, backend-listen, metrics-listen
	flags      []string
	url        string
	backend    string
	adminURL   string // the metrics listener: /metrics and /debug/state
	metricsURL string
	token      string // the gateway token requests present
	readyAt    time.Time
}

// hubArgs are a hub's flags: its ports, the scenario's tokens (a hub
// refuses to start without them), no startup grace (so an unknown model
// is a 404 from the start; a scenario that restarts a hub turns it back
// on), then flags, which win over any of these.
func (e *env) hubArgs(ports []int, flags []string) []string {
	return append([]string{
		"--listen", addr(ports[0]), "--backend-listen", addr(ports[1]), "--metrics-listen", addr(ports[2]),
		"--hub-id", "e2e", "--drain-timeout", "2s", "--gateway-token-file", e.gatewayTokenFile,
		"--registration-token-file", e.registrationTokenFile, "--proxy-startup-grace-ms", "0",
	}, flags...)
}

// newHubProc describes a hub started on ports.
func (e *env) newHubProc(p *proc, ports []int, flags []string, ready time.Time) *hubProc {
	admin := "http://" + addr(ports[2])
	return &hubProc{proc: p, ports: ports, flags: flags, url: "http://" + addr(ports[0]), backend: addr(ports[1]),
		adminURL: admin, metricsURL: admin + "/metrics", token: e.gatewayToken, readyAt: ready}
}

// hub starts a hub with extra flags.
func (e *env) hub(flags ...string) *hubProc {
	e.t.Helper()
	p, ports := e.start("hub", bin.hub, 3, func(ports []int) []string { return e.hubArgs(ports, flags) },
		func(ports []int) string { return "http://" + addr(ports[0]) + "/readyz" })
	return e.newHubProc(p, ports, flags, time.Now())
}

// hubAt starts a hub on the ports of an earlier one, for a restart.
func (e *env) hubAt(old *hubProc) *hubProc {
	e.t.Helper()
	ports := old.ports
	p, ready, err := e.startAt("hub (restarted)", bin.hub, e.hubArgs(ports, old.flags), "http://"+addr(ports[0])+"/readyz")
	if err != nil {
		out := ""
		if p != nil {
			out = p.tail()
		}
		e.t.Fatalf("restarting the hub on %v: %v\n%s", ports, err, out)
	}
	return e.newHubProc(p, ports, old.flags, ready)
}

// pylonProc is a running bin/pylon.
type pylonProc struct {
	*proc
	id         string
	cluster    string
	metricsURL string
}

// pylon starts a pylon with --inference-server-id id in front of m, dialing
// h, with a 100 ms heartbeat and extra flags (which may set --cluster-id).
func (e *env) pylon(h *hubProc, m *mockEngine, id string, flags ...string) *pylonProc {
	e.t.Helper()
	cluster := id
	if i := slices.Index(flags, "--cluster-id"); i >= 0 && i+1 < len(flags) {
		cluster = flags[i+1]
	}
	p, ports := e.start("pylon "+id, bin.pylon, 2, func(ports []int) []string {
		return append([]string{
			"--stargate-address", h.backend, "--upstream-http-base-url", m.url, "--model-name", model,
			"--inference-server-id", id, "--listen", addr(ports[0]), "--metrics-listen", addr(ports[1]),
			"--min-update-interval-ms", strconv.Itoa(int(heartbeat / time.Millisecond)),
			"--upstream-health-wait-ms", "10000", "--drain-timeout", "2s",
			// The scenario's token, and loopback tunnels may carry it in
			// plaintext; a scenario's own flags (TLS, another token) win.
			"--auth-token-file", e.registrationTokenFile, "--insecure-plaintext",
		}, flags...)
	}, func(ports []int) string { return "http://" + addr(ports[0]) + "/readyz" })
	return &pylonProc{proc: p, id: id, cluster: cluster, metricsURL: "http://" + addr(ports[1]) + "/metrics"}
}
