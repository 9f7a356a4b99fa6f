package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// stack starts binaries as child processes and stops every one of them.
type stack struct {
	binDir string
	out    io.Writer
	procs  []*proc
	// cleanup runs after every child has stopped.
	cleanup []func()
}

// proc is one child and a channel closed when it has exited.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// freePort asks the kernel for an unused loopback port. Another process can
// take it before the child binds; start retries in that case.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// start runs binary with the args that args(ports) returns, retrying with
// fresh ports if it does not become ready at readyPath on the first port.
func (s *stack) start(ctx context.Context, name, binary string, nports int, args func(ports []int) []string, readyPath string) ([]int, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports := make([]int, nports)
		for i := range ports {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			ports[i] = p
		}
		//nolint:gosec // G204: the demo runs this project's own binaries from --bin-dir.
		cmd := exec.Command(filepath.Join(s.binDir, binary), args(ports)...)
		cmd.Stdout, cmd.Stderr = s.out, s.out
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting %s (run `make build` first?): %w", name, err)
		}
		p := &proc{cmd: cmd, exited: make(chan struct{})}
		go func() {
			_ = cmd.Wait()
			close(p.exited)
		}()
		s.procs = append(s.procs, p)
		if lastErr = waitReady(ctx, "http://"+addr(ports[0])+readyPath, p); lastErr == nil {
			return ports, nil
		}
	}
	return nil, fmt.Errorf("%s did not become ready: %w", name, lastErr)
}

// waitReady polls url until it answers 200, the child exits or settle
// passes.
func waitReady(ctx context.Context, url string, p *proc) error {
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("process exited: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("no answer from %s within %v", url, settle)
}

// waitClusters polls the hub's /debug/state until model has n clusters.
func waitClusters(ctx context.Context, hubURL, model string, n int) error {
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hubURL+"/debug/state", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var st struct {
				Routing struct {
					Targets []struct {
						Model    string `json:"model"`
						Clusters []struct {
							ClusterID string `json:"cluster_id"`
						} `json:"clusters"`
					} `json:"targets"`
				} `json:"routing"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&st)
			_ = resp.Body.Close()
			for _, t := range st.Routing.Targets {
				if t.Model == model && len(t.Clusters) >= n {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the hub did not see %d clusters for %s within %v", n, model, settle)
}

// stop stops the children in reverse start order (pylons before the hub,
// so they do not log a lost hub): SIGTERM, then SIGKILL for one still
// running after the grace period.
func (s *stack) stop() {
	deadline := time.Now().Add(10 * time.Second)
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		select {
		case <-p.exited:
			continue
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(time.Until(deadline)):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	for _, f := range s.cleanup {
		f()
	}
}
