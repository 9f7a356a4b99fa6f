package main

import (
	"context"
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
	procs  []*exec.Cmd
}

type service struct {
	name string
	url  string
}

// freePort asks the kernel for an unused loopback port. Another process can
// take it before the child binds; startEngine retries in that case.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *stack) startEngine(ctx context.Context, name string, args []string) (service, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return service{}, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		//nolint:gosec // G204: the demo runs this project's own binaries from --bin-dir.
		cmd := exec.Command(filepath.Join(s.binDir, "mock-engine"), append([]string{"--listen", addr}, args...)...)
		cmd.Stdout, cmd.Stderr = s.out, s.out
		if err := cmd.Start(); err != nil {
			return service{}, fmt.Errorf("starting %s (run `make build` first?): %w", name, err)
		}
		s.procs = append(s.procs, cmd)
		url := "http://" + addr
		if lastErr = waitHealthy(ctx, url+"/health", cmd); lastErr == nil {
			return service{name: name, url: url}, nil
		}
	}
	return service{}, fmt.Errorf("%s did not become healthy: %w", name, lastErr)
}

// waitHealthy polls url until it answers 200, the child exits or settle
// passes.
func waitHealthy(ctx context.Context, url string, cmd *exec.Cmd) error {
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
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
		case <-exited:
			return fmt.Errorf("process exited: %v", cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("no answer from %s within %v", url, settle)
}

// stop sends SIGTERM to every child, then SIGKILL to those still running
// after a grace period.
func (s *stack) stop() {
	for _, c := range s.procs {
		if c.Process != nil && c.ProcessState == nil {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range s.procs {
		for c.ProcessState == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if c.ProcessState == nil && c.Process != nil {
			_ = c.Process.Kill()
		}
	}
}
