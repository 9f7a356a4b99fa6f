package stack

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"
)

// The fault-injection suite (pkg/internal/faults) stops and starts single
// children of a running stack: a process killed mid-load, a hub restarted
// with its pylons reconnecting, gateways coming back after all were gone.
// A restarted child gets its old ports and command line, so the others
// find it where they expect it. Unlike the rest of Stack, Children, Kill,
// Terminate, Restart and Running may be called from several goroutines at
// once: gateways are restarted together so their Olric nodes find each
// other.

// Children lists the names of the stack's children, sorted: "hub",
// "engine-<cluster>", "gateway" (then "gateway-2", ... with several),
// "pylon-<cluster>".
func (s *Stack) Children() []string {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	out := make([]string, 0, len(s.l.procs))
	for _, p := range s.l.procs {
		out = append(out, p.name)
	}
	slices.Sort(out)
	return out
}

// Kill sends SIGKILL to the named child and returns once it has exited:
// no drain, no goodbye to its peers, as when a node is lost.
func (s *Stack) Kill(name string) error {
	p, err := s.l.running(name)
	if err != nil {
		return err
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return nil
}

// Terminate sends SIGTERM to the named child, as an orchestrator stopping
// it does, and waits for it to exit; after grace it sends SIGKILL. It
// reports whether the child exited within grace on its own.
func (s *Stack) Terminate(name string, grace time.Duration) (bool, error) {
	p, err := s.l.running(name)
	if err != nil {
		return false, err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return true, nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return false, nil
	}
}

// Restart starts the named child again, after Kill or Terminate, on its
// old ports with its old arguments, and waits until it is ready. A
// gateway's Olric node is given every other gateway as its peers, so it
// rejoins them whichever started first.
func (s *Stack) Restart(ctx context.Context, name string) error {
	return s.l.restart(ctx, name)
}

// Running reports whether the named child is alive.
func (s *Stack) Running(name string) bool {
	_, err := s.l.running(name)
	return err == nil
}

// latest is the named child's newest process (nil if none).
func (l *launcher) latest(name string) *proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range slices.Backward(l.procs) {
		if p.name == name {
			return p
		}
	}
	return nil
}

// running is the named child's process while it is alive.
func (l *launcher) running(name string) (*proc, error) {
	p := l.latest(name)
	if p == nil {
		return nil, fmt.Errorf("stack: no child named %q", name)
	}
	select {
	case <-p.exited:
		return nil, fmt.Errorf("stack: %s is not running", name)
	default:
		return p, nil
	}
}

// restart runs an exited child again where it was. The new process takes
// the old one's place (and wave, so stop keeps its order). It is not
// retried on other ports: the others know these.
func (l *launcher) restart(ctx context.Context, name string) error {
	old := l.latest(name)
	if old == nil {
		return fmt.Errorf("stack: no child named %q", name)
	}
	select {
	case <-old.exited:
	default:
		return fmt.Errorf("stack: %s is still running; Kill or Terminate it first", name)
	}
	var env []string
	if old.svc.env != nil {
		env = old.svc.env(old.ports)
	}
	p, err := l.spawn(name, old.svc.binary, env, old.svc.args(old.ports))
	if err != nil {
		return err
	}
	l.mu.Lock()
	p.wave, p.svc, p.ports = old.wave, old.svc, old.ports
	l.procs = slices.DeleteFunc(l.procs, func(q *proc) bool { return q == old })
	l.mu.Unlock()
	if err := l.waitReady(ctx, old.svc.ready(old.ports), p); err != nil {
		return fmt.Errorf("%s: restart: %w%s", name, err, l.logTail(name))
	}
	return nil
}
