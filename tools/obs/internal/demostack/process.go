package demostack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long Stop waits for the demo after SIGINT. The demo
// gives its children 10 s to stop on SIGTERM before it kills them, so a
// healthy demo is gone well within this.
const stopGrace = 20 * time.Second

// drainGrace is how long the demo's output is still read after it
// exited.
const drainGrace = time.Second

// tailLines is how many of the demo's last output lines an error quotes.
const tailLines = 15

// Options say how to run the demo.
type Options struct {
	// BinDir holds bin/demo and every binary it starts.
	BinDir string
	// ResultsDir receives the demo's run folder (its children's logs, the
	// lb-config, the workload and the loadgen report).
	ResultsDir string
	// Args are more demo flags (the workload's shape).
	Args []string
	// Output receives everything the demo prints, credentials redacted
	// (nil: discarded).
	Output io.Writer
	// StartTimeout bounds the wait for the demo's URLs, its workload
	// included, besides ctx (0: two minutes).
	StartTimeout time.Duration
	// StopGrace replaces stopGrace when > 0 (tests).
	StopGrace time.Duration
}

// defaultStartTimeout is the wait for the URLs when Options gives none:
// the demo's small workloads end within a minute on two cores.
const defaultStartTimeout = 2 * time.Minute

// Stack is a running demo.
type Stack struct {
	cmd   *exec.Cmd
	grace time.Duration
	done  chan struct{} // closed once the demo exited and its output was read (or drainGrace passed)
	// waitErr is cmd.Wait's answer, set before done closes.
	waitErr error
	tail    *tail
	once    sync.Once
	stopErr error
}

// Start runs bin/demo --keep and returns once it printed the stack's URLs,
// i.e. once its workload is done and the stack stays up. ctx and
// o.StartTimeout bound the wait (and ending it stops the demo); the
// caller must Stop the stack.
func Start(ctx context.Context, o Options) (*Stack, Endpoints, error) {
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	demo := filepath.Join(o.BinDir, "demo")
	args := append([]string{"--bin-dir", o.BinDir, "--results-dir", o.ResultsDir, "--keep"}, o.Args...)
	cmd := exec.Command(demo, args...) //nolint:gosec // G204: the caller names its own bin folder
	cmd.Env = os.Environ()
	// A process group of its own, so a Ctrl-C in the terminal reaches only
	// this process, which stops the demo in order; and SIGTERM to the demo
	// if this process dies without stopping it (the demo then stops its
	// children itself).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// An os.Pipe rather than StdoutPipe: Wait then returns when the demo
	// exits, even while a process it started still holds the pipe open.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, Endpoints{}, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_, _ = pr.Close(), pw.Close()
		return nil, Endpoints{}, fmt.Errorf("starting %s (build the binaries first): %w", demo, err)
	}
	_ = pw.Close() // the demo holds its own copy
	s := &Stack{cmd: cmd, grace: stopGrace, done: make(chan struct{}), tail: &tail{max: tailLines}}
	if o.StopGrace > 0 {
		s.grace = o.StopGrace
	}
	log := o.Output
	if log == nil {
		log = io.Discard
	}
	type parsed struct {
		ep  Endpoints
		err error
	}
	ready := make(chan parsed, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		p := newParser()
		found := false
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := redact(sc.Text())
			fmt.Fprintln(log, line)
			s.tail.add(line)
			if found {
				continue
			}
			if p.line(sc.Text()); p.complete {
				found = true
				ep, err := p.endpoints()
				ready <- parsed{ep, err}
			}
		}
	}()
	go func() {
		s.waitErr = cmd.Wait()
		// The rest of the output, unless a leftover process keeps the
		// pipe open.
		t := time.NewTimer(drainGrace)
		select {
		case <-read:
		case <-t.C:
		}
		t.Stop()
		_ = pr.Close()
		<-read
		close(s.done)
	}()
	select {
	case r := <-ready:
		if r.err != nil {
			_ = s.Stop()
			return nil, r.ep, r.err
		}
		return s, r.ep, nil
	case <-s.done:
		_ = s.Stop() // the sweep of its process group
		return nil, Endpoints{}, fmt.Errorf("expected the demo to print its URLs and stay up; it exited (%w) first; its last output:\n%s",
			s.waitErr, s.tail.String())
	case <-ctx.Done():
		stopErr := s.Stop()
		return nil, Endpoints{}, errors.Join(fmt.Errorf("expected the demo to print its URLs (its workload done, the stack up); found none before %w; its last output:\n%s",
			context.Cause(ctx), s.tail.String()), stopErr)
	}
}

// Stop interrupts the demo (it stops every process it started, then
// exits) and waits for it. A demo still running after stopGrace is
// killed, and so is every process it started, found through /proc: they
// run in process groups of their own, which a kill of the demo's group
// would miss. Stop is safe to call more than once; it returns an error
// when the demo had to be killed or exited with a failure.
func (s *Stack) Stop() error {
	s.once.Do(func() {
		s.stopErr = s.stop()
		// Whatever the demo left in its process group. A group id is not
		// reused while the group has members, and the kernel hands out
		// pids in sequence, so right after the demo's exit the id names
		// this group or nothing.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	})
	return s.stopErr
}

func (s *Stack) stop() error {
	pid := s.cmd.Process.Pid
	select {
	case <-s.done:
		return s.exitErr()
	default:
	}
	_ = syscall.Kill(-pid, syscall.SIGINT)
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-s.done:
		// Interrupted during its workload, the demo says so with 130.
		var ee *exec.ExitError
		if errors.As(s.waitErr, &ee) && ee.ExitCode() == exitInterrupted {
			return nil
		}
		return s.exitErr()
	case <-t.C:
	}
	kids := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	<-s.done
	err := fmt.Errorf("expected the demo to stop within %s of SIGINT; it did not, so it and the %d processes it started were killed", s.grace, len(kids))
	if left := waitGone(kids, killWait); len(left) > 0 {
		err = fmt.Errorf("%w; processes %v still ran %s later", err, left, killWait)
	}
	return err
}

// killWait bounds how long Stop waits for killed processes to exit.
const killWait = 5 * time.Second

// waitGone waits until every pid has exited (or is a zombie, which runs
// nothing), at most within, and returns those still running.
func waitGone(pids []int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		var left []int
		for _, p := range pids {
			if !gone(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs: no such process, or a zombie
// its new parent has not collected yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat") //nolint:gosec // G304: a /proc path built from a pid
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndex(string(b), ") ")
	return i >= 0 && strings.HasPrefix(string(b[i+2:]), "Z")
}

// exitInterrupted is the demo's exit code when a signal ended its
// workload.
const exitInterrupted = 130

// exitErr says how the demo ended when that was not a clean exit. After
// --keep and an interrupt a healthy demo exits 0.
func (s *Stack) exitErr() error {
	if s.waitErr == nil {
		return nil
	}
	return fmt.Errorf("the demo exited with %w; its last output:\n%s", s.waitErr, s.tail.String())
}

// secrets are the demo's credentials as it prints them (the API key, the
// gateway token, a bearer in its curl example): the demo keeps them out of
// its results folder, and so does this copy of its output.
var secrets = regexp.MustCompile(`(API key |gateway token |Bearer )[^\s;,')]+`)

// redact hides the credentials in one line of the demo's output.
func redact(line string) string {
	return secrets.ReplaceAllString(line, "${1}<redacted>")
}

// descendants lists the processes below pid, children first, from
// /proc/<pid>/task/<tid>/children (Linux). It returns what it could read.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	for _, f := range tasks {
		b, err := os.ReadFile(f) //nolint:gosec // G304: a /proc path built from a pid
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(field); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// tail keeps the last max lines written to it.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// String is the kept lines, indented.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "  (no output)"
	}
	return "  " + strings.Join(t.lines, "\n  ")
}
