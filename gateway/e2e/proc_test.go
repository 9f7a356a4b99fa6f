package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
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

func (e *env) waitReady(p *proc, url string) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready", p.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := e.cl.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %v", p.name, url, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// stack starts mock engine, hub, pylon and gateway and returns the
// gateway's base URL and its metrics URL.
func (e *env) stack(gatewayFlags ...string) (gw, metrics string) {
	hubURL := e.backend()
	return e.gateway(hubURL, gatewayFlags...)
}

// hubFlags are extra flags for the next backend's hub.
var hubFlags []string

// backend starts mock engine, hub and pylon and returns the hub's URL
// once it lists the model.
func (e *env) backend() string {
	mock := e.start("mock-engine", bin.mock, 1, func(p []int) []string {
		return []string{"--listen", addr(p[0]), "--model-name", model, "--drain-timeout", "2s"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/health" })
	hub := e.start("hub", bin.hub, 3, func(p []int) []string {
		return append([]string{"--listen", addr(p[0]), "--backend-listen", addr(p[1]), "--metrics-listen", addr(p[2]), "--drain-timeout", "2s"}, hubFlags...)
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	e.start("pylon", bin.pylon, 2, func(p []int) []string {
		return []string{"--stargate-address", addr(hub[1]), "--upstream-http-base-url", "http://" + addr(mock[0]),
			"--model-name", model, "--inference-server-id", "pylon-1", "--cluster-id", "cluster-1",
			"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--initial-input-tps", "100000",
			"--min-update-interval-ms", "100", "--drain-timeout", "2s"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	// The model is routable once the hub lists it.
	hubURL := "http://" + addr(hub[0])
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := e.cl.Get(hubURL + "/v1/models")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if strings.Contains(string(b), model) {
				break
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the hub never listed the model")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return hubURL
}

// gateway starts one gateway in front of hubURL.
func (e *env) gateway(hubURL string, flags ...string) (gw, metrics string) {
	ports := e.start("gateway", bin.gateway, 2, func(p []int) []string {
		return append([]string{"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--hub-url", hubURL,
			"--drain-timeout", "2s"}, flags...)
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	return "http://" + addr(ports[0]), "http://" + addr(ports[1]) + "/metrics"
}

// olricGateway starts a gateway with an embedded Olric node joining
// peers (memberlist addresses) and returns it with its gossip address.
func (e *env) olricGateway(hubURL string, peers []string, flags ...string) (p *proc, gw, metrics, gossip string) {
	p, ports := e.startProc("gateway", bin.gateway, 4, func(p []int) []string {
		return append([]string{"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--hub-url", hubURL,
			"--drain-timeout", "2s", "--olric-enabled", "--olric-bind-addr", "127.0.0.1", "--olric-bind-port", strconv.Itoa(p[2]),
			"--olric-memberlist-bind-addr", "127.0.0.1", "--olric-memberlist-bind-port", strconv.Itoa(p[3]),
			"--olric-peers", strings.Join(peers, ","), "--olric-max-join-attempts", "3", "--olric-join-retry-interval", "200ms",
			"--olric-routing-refresh", "200ms"}, flags...)
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	return p, "http://" + addr(ports[0]), "http://" + addr(ports[1]) + "/metrics", addr(ports[3])
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
