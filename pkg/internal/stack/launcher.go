package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// settle is how long a started binary has to answer.
const settle = 20 * time.Second

// launcher starts this project's binaries as child processes and stops
// every one of them. Each child writes its output to <logDir>/<name>.log.
type launcher struct {
	binDir, logDir string
	// http polls readiness; its idle connections are closed by stop so no
	// keep-alive goroutine outlives the stack.
	http *http.Client

	mu    sync.Mutex
	procs []*proc
	// wave counts startAll calls; children of a later wave depend on
	// earlier ones and are stopped first.
	wave int
	// ports are every port handed out, so two children started at once
	// never get the same one.
	ports map[int]bool
}

// proc is one child and a channel closed when it has exited.
type proc struct {
	name   string
	wave   int
	cmd    *exec.Cmd
	exited chan struct{}
	// svc and ports are how it was started, so restart can run it again
	// where the others expect it.
	svc   service
	ports []int
}

// service is one child to start: its binary, how many ports it listens
// on, its arguments and extra environment (nil = none) for those ports and
// the URL that answers 200 once it is ready.
type service struct {
	name, binary string
	ports        int
	args, env    func(ports []int) []string
	ready        func(ports []int) string
}

func newLauncher(binDir, logDir string, client *http.Client) *launcher {
	return &launcher{binDir: binDir, logDir: logDir, http: client, ports: map[int]bool{}}
}

// freePorts asks the kernel for n unused loopback ports. Another process
// can take one before the child binds; start retries in that case.
func (l *launcher) freePorts(n int) ([]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, 0, n)
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !l.ports[p] {
			l.ports[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// startAll starts svcs at once and waits until every one is ready; it
// returns each one's ports in order.
func (l *launcher) startAll(ctx context.Context, svcs ...service) ([][]int, error) {
	l.mu.Lock()
	l.wave++
	l.mu.Unlock()
	ports := make([][]int, len(svcs))
	errs := make([]error, len(svcs))
	var wg sync.WaitGroup
	for i := range svcs {
		wg.Go(func() { ports[i], errs[i] = l.start(ctx, svcs[i]) })
	}
	wg.Wait()
	return ports, errors.Join(errs...)
}

// start runs svc, retrying with fresh ports when it exits before it is
// ready (most likely a port taken in the meantime).
func (l *launcher) start(ctx context.Context, svc service) ([]int, error) {
	var lastErr error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		ports, err := l.freePorts(svc.ports)
		if err != nil {
			return nil, err
		}
		var env []string
		if svc.env != nil {
			env = svc.env(ports)
		}
		p, err := l.spawn(svc.name, svc.binary, env, svc.args(ports))
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		p.svc, p.ports = svc, ports
		l.mu.Unlock()
		lastErr = l.waitReady(ctx, svc.ready(ports), p)
		if lastErr == nil {
			return ports, nil
		}
		select {
		case <-p.exited:
		default:
			// Alive but not ready within settle: another attempt would
			// not do better.
			return nil, fmt.Errorf("%s: %w%s", svc.name, lastErr, l.logTail(svc.name))
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, fmt.Errorf("%s: %w%s", svc.name, lastErr, l.logTail(svc.name))
}

// spawn starts one child with its output appended to its log file.
func (l *launcher) spawn(name, binary string, env, args []string) (*proc, error) {
	//nolint:gosec // G304: the log folder is the caller's own, the name a service's.
	log, err := os.OpenFile(filepath.Join(l.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }() // the child holds its own descriptor
	//nolint:gosec // G204: this project's own binaries from the caller's bin folder.
	cmd := exec.Command(filepath.Join(l.binDir, binary), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A process group of its own: Ctrl-C in the terminal reaches only the
	// parent, which stops its children itself (and still writes partial
	// results first).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(log, "# %s %s\n", binary, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (run `make build` first?): %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	l.mu.Lock()
	p.wave = l.wave
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// waitReady polls url until it answers 200, the child exits or settle
// passes.
func (l *launcher) waitReady(ctx context.Context, url string, p *proc) error {
	return poll(ctx, p.exited, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := l.http.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}, "no 200 from "+url)
}

// poll calls ready every 50 ms until it reports true or an error, exited
// is closed, ctx is done or settle passes (then the error says what).
func poll(ctx context.Context, exited <-chan struct{}, ready func() (bool, error), what string) error {
	deadline := time.NewTimer(settle)
	defer deadline.Stop()
	for {
		if ok, err := ready(); ok || err != nil {
			return err
		}
		select {
		case <-exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s within %v", what, settle)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the end of a child's log, for an error message.
func (l *launcher) logTail(name string) string {
	b, err := os.ReadFile(filepath.Join(l.logDir, name+".log")) //nolint:gosec // G304: as in spawn
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(len(lines)-10, 0):]
	return "\n  " + strings.Join(lines, "\n  ")
}

// stop stops every child, the last started wave first (the gateway and
// pylons before the hub they talk to, so none logs a lost hub): SIGTERM to
// a wave, then wait for it. A child still running after the grace period
// gets SIGKILL; stop returns only once every child has exited, so none is
// left behind.
func (l *launcher) stop() {
	l.mu.Lock()
	procs, last := l.procs, l.wave
	l.procs = nil
	l.mu.Unlock()
	grace := time.NewTimer(10 * time.Second)
	defer grace.Stop()
	expired := false
	for wave := last; wave >= 0; wave-- {
		var stopping []*proc
		for _, p := range procs {
			if p.wave == wave {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				stopping = append(stopping, p)
			}
		}
		for _, p := range stopping {
			if !expired {
				select {
				case <-p.exited:
					continue
				case <-grace.C:
					expired = true
				}
			}
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	l.http.CloseIdleConnections()
}
