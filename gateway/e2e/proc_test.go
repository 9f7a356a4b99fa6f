package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	model        = "e2e-model"
	stopGrace    = 5 * time.Second
	readyTimeout = 30 * time.Second
)

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

type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func launch(name, path string, args []string) (*proc, error) {
	p := &proc{name: name, args: args, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = 2 * time.Second
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

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

type env struct {
	t  *testing.T
	cl *http.Client
}

func newEnv(t *testing.T) *env {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &env{t: t, cl: &http.Client{Transport: tr}}
}

// poll checks cond every interval until it holds, and returns nil, or
// until timeout has passed, and returns cond's last error. The processes
// under test signal readiness only through their endpoints (a probe, a
// metric, a listed model), so the tests poll those observable conditions;
// nothing waits a fixed time.
func poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		<-tick.C
	}
}

// errExited ends a poll whose process has died: it will never be ready.
var errExited = errors.New("exited before it was ready")

func (e *env) waitReady(p *proc, url string) error {
	var exited error
	err := poll(readyTimeout, 20*time.Millisecond, func() error {
		if p.exited() {
			exited = fmt.Errorf("%s %w", p.name, errExited)
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := e.cl.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: status %d", p.name, url, resp.StatusCode)
		}
		return nil
	})
	if exited != nil {
		return exited
	}
	return err
}

// start launches a child on fresh ports, retrying when it lost a port.
func (e *env) start(name, path string, nports int, args func([]int) []string, ready func([]int) string) []int {
	_, ports := e.startProc(name, path, nports, args, ready)
	return ports
}

// startProc is start returning the process too.
func (e *env) startProc(name, path string, nports int, args func([]int) []string, ready func([]int) string) (*proc, []int) {
	t := e.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, nports)
		p, err := launch(name, path, args(ports))
		if err != nil {
			t.Fatal(err)
		}
		if err = e.waitReady(p, ready(ports)); err == nil {
			t.Cleanup(func() {
				p.stop()
				if t.Failed() {
					t.Logf("==== %s %s ====\n%s", p.name, strings.Join(p.args, " "), p.out.String())
				}
			})
			return p, ports
		}
		p.stop()
		if attempt < 5 && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		t.Fatalf("%s did not start: %v\n%s", name, err, p.out.String())
	}
}

// stack starts mock engine, hub, pylon and gateway and returns the hub
// and the gateway's base URL and its metrics URL.
func (e *env) stack(gatewayFlags ...string) (h hub, gw, metrics string) {
	h = e.backend()
	gw, metrics = e.gateway(h, gatewayFlags...)
	return h, gw, metrics
}

// hub is a running hub: its API URL and the file holding the token only
// the gateway sends it, and the base URL of the mock engine behind it.
type hub struct {
	url, tokenFile string
	engine         string
}

// secret writes a fresh secret file for this test and returns its path.
func (e *env) secret(name string) string {
	e.t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	path := filepath.Join(e.t.TempDir(), name)
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// backend starts mock engine, hub and pylon, with every credential a
// deployment uses (the gateway token on the hub's API, the registration
// token on its tunnel listener), and returns the hub once it lists the
// model.
func (e *env) backend() hub {
	gwToken, regToken := e.secret("gateway-token"), e.secret("registration-token")
	mock := e.start("mock-engine", bin.mock, 1, func(p []int) []string {
		return []string{"--listen", addr(p[0]), "--model-name", model, "--drain-timeout", "2s"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/health" })
	hp := e.start("hub", bin.hub, 3, func(p []int) []string {
		return []string{"--listen", addr(p[0]), "--backend-listen", addr(p[1]), "--metrics-listen", addr(p[2]), "--drain-timeout", "2s",
			"--gateway-token-file", gwToken, "--registration-token-file", regToken}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	e.start("pylon", bin.pylon, 2, func(p []int) []string {
		return []string{"--stargate-address", addr(hp[1]), "--upstream-http-base-url", "http://" + addr(mock[0]),
			"--model-name", model, "--inference-server-id", "pylon-1", "--cluster-id", "cluster-1",
			"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--initial-input-tps", "100000",
			"--min-update-interval-ms", "100", "--drain-timeout", "2s",
			// The tunnel is plaintext on loopback; a deployment uses TLS.
			"--auth-token-file", regToken, "--insecure-plaintext"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	h := hub{url: "http://" + addr(hp[0]), tokenFile: gwToken, engine: "http://" + addr(mock[0])}
	// The model is routable once the hub lists it.
	err := poll(readyTimeout, 20*time.Millisecond, func() error {
		status, b, err := e.hubGet(h, "/v1/models", true)
		if err != nil {
			return err
		}
		if status != http.StatusOK || !strings.Contains(b, model) {
			return fmt.Errorf("GET /v1/models: %d %s", status, b)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("the hub never listed the model: %v", err)
	}
	return h
}

// hubGet sends GET path to the hub, with the gateway's token when
// withToken, and returns the status and body.
func (e *env) hubGet(h hub, path string, withToken bool) (int, string, error) {
	req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
	if withToken {
		tok, err := os.ReadFile(h.tokenFile)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := e.cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(b), nil
}

// gateway starts one gateway in front of h, sending h's token.
func (e *env) gateway(h hub, flags ...string) (gw, metrics string) {
	ports := e.start("gateway", bin.gateway, 2, func(p []int) []string {
		return append([]string{"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--hub-url", h.url,
			"--hub-token-file", h.tokenFile, "--drain-timeout", "2s"}, flags...)
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	return "http://" + addr(ports[0]), "http://" + addr(ports[1]) + "/metrics"
}

// olricGateway starts a gateway in front of h with an embedded Olric node
// joining peers (memberlist addresses), authenticated with the shared
// secret file olricSecret, and returns it with its gossip address.
func (e *env) olricGateway(h hub, olricSecret string, peers []string, flags ...string) (p *proc, gw, metrics, gossip string) {
	n := e.startOlricMember(h, olricSecret, peers, flags...)
	return n.p, n.gw, n.metrics, n.gossip
}

// olricMember is a gateway started with an Olric node: the process, its API
// and metrics URLs, and its Olric gossip and data (RESP) addresses.
type olricMember struct {
	p                         *proc
	gw, metrics, gossip, data string
}

// startOlricMember is olricGateway returning the node's data address too,
// for tests that talk to the Olric cluster directly.
func (e *env) startOlricMember(h hub, olricSecret string, peers []string, flags ...string) olricMember {
	p, ports := e.startProc("gateway", bin.gateway, 4, func(p []int) []string {
		return append([]string{"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--hub-url", h.url,
			"--hub-token-file", h.tokenFile, "--drain-timeout", "2s",
			"--olric-enabled", "--olric-bind-addr", "127.0.0.1", "--olric-bind-port", strconv.Itoa(p[2]),
			"--olric-memberlist-bind-addr", "127.0.0.1", "--olric-memberlist-bind-port", strconv.Itoa(p[3]),
			"--olric-peers", strings.Join(peers, ","), "--olric-max-join-attempts", "3", "--olric-join-retry-interval", "200ms",
			"--olric-routing-refresh", olricRoutingRefresh.String(), "--olric-auth-secret-file", olricSecret}, flags...)
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	return olricMember{p: p, gw: "http://" + addr(ports[0]), metrics: "http://" + addr(ports[1]) + "/metrics", gossip: addr(ports[3]), data: addr(ports[2])}
}

// olricRoutingRefresh is the test gateways' --olric-routing-refresh:
// after the partition owners settle, every cluster client knows them
// within this time.
const olricRoutingRefresh = 200 * time.Millisecond

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
