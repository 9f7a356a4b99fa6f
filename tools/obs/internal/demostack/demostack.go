// Package demostack runs the repository's demo stack (bin/demo with
// --keep: a gateway, a hub and 2 regions x 2 clusters on loopback) and
// reads its URLs from what the demo prints, so the checks scrape and load
// the same binaries `make build` produced, started the way `make demo`
// starts them.
package demostack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Endpoints are the running stack's URLs as the demo prints them.
type Endpoints struct {
	// Gateway is the gateway's base URL (without /v1); APIKey its key.
	Gateway, APIKey string
	// Hub is the hub's base URL; GatewayToken is what a caller of the hub
	// presents (the hub answers 401 without it).
	Hub, GatewayToken string
	// GatewayMetrics and HubMetrics are /metrics URLs.
	GatewayMetrics, HubMetrics string
	// PylonMetrics are the pylons' /metrics URLs by pylon name: the
	// cluster id when a cluster has one pylon, "<cluster>-p<i>" when it has
	// several (PylonCluster maps it back).
	PylonMetrics map[string]string
	// PylonCluster maps each pylon name to its cluster id.
	PylonCluster map[string]string
	// Region maps each cluster id to its region.
	Region map[string]string
	// Model is the model the stack serves.
	Model string
}

var (
	reRegion  = regexp.MustCompile(`^\s*region (\S+)\s+\(.*\):(.*)$`)
	reCluster = regexp.MustCompile(`(\S+) [\d.]+k/[\d.]+k tok/s`)
	// rePylonOf is a pylon name of a cluster with several pylons.
	rePylonOf  = regexp.MustCompile(`^(.+)-p\d+$`)
	reModel    = regexp.MustCompile(`^\s*hub routes (\S+) with `)
	reGateway  = regexp.MustCompile(`^\s*gateway\s+(http://\S+)/v1\s+\(API key (\S+),`)
	reHubState = regexp.MustCompile(`^\s*hub\s+(http://\S+)\s+\(gateway token (\S+); routing state `)
	reMetrics  = regexp.MustCompile(`^\s*metrics\s+gateway (http://\S+)\s+hub (http://\S+)`)
	rePylon    = regexp.MustCompile(`^\s*(?:metrics\s+)?pylon (\S+) (http://\S+/metrics)`)
	reTry      = regexp.MustCompile(`^\s*try\s+curl `)
)

// parser accumulates the demo's output lines.
type parser struct {
	ep       Endpoints
	keep     bool // the DEMO_KEEP block started
	complete bool // the block ended (its "try" line)
}

func newParser() *parser {
	return &parser{ep: Endpoints{PylonMetrics: map[string]string{}, PylonCluster: map[string]string{}, Region: map[string]string{}}}
}

func (p *parser) line(s string) {
	if m := reRegion.FindStringSubmatch(s); m != nil {
		for _, c := range reCluster.FindAllStringSubmatch(m[2], -1) {
			p.ep.Region[c[1]] = m[1]
		}
	}
	if m := reModel.FindStringSubmatch(s); m != nil {
		p.ep.Model = m[1]
	}
	if strings.HasPrefix(s, "DEMO_KEEP") {
		p.keep = true
	}
	if !p.keep {
		return
	}
	switch {
	case reGateway.MatchString(s):
		m := reGateway.FindStringSubmatch(s)
		p.ep.Gateway, p.ep.APIKey = m[1], m[2]
	case reHubState.MatchString(s):
		m := reHubState.FindStringSubmatch(s)
		p.ep.Hub, p.ep.GatewayToken = m[1], m[2]
	case reMetrics.MatchString(s):
		m := reMetrics.FindStringSubmatch(s)
		p.ep.GatewayMetrics, p.ep.HubMetrics = m[1], m[2]
	case rePylon.MatchString(s):
		m := rePylon.FindStringSubmatch(s)
		p.ep.PylonMetrics[m[1]] = m[2]
	case reTry.MatchString(s):
		p.complete = true
	}
}

// endpoints returns what was read, or what is missing.
func (p *parser) endpoints() (Endpoints, error) {
	var missing []string
	for name, v := range map[string]string{"gateway URL": p.ep.Gateway, "API key": p.ep.APIKey, "hub URL": p.ep.Hub, "gateway token": p.ep.GatewayToken,
		"gateway metrics": p.ep.GatewayMetrics, "hub metrics": p.ep.HubMetrics, "model": p.ep.Model} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(p.ep.PylonMetrics) == 0 {
		missing = append(missing, "pylon metrics")
	}
	for name := range p.ep.PylonMetrics {
		c := name
		if p.ep.Region[c] == "" {
			if m := rePylonOf.FindStringSubmatch(name); m != nil {
				c = m[1]
			}
		}
		p.ep.PylonCluster[name] = c
		if p.ep.Region[c] == "" {
			missing = append(missing, "region of "+name)
		}
	}
	if len(missing) > 0 {
		return p.ep, fmt.Errorf("the demo's output lacks: %s", strings.Join(missing, ", "))
	}
	return p.ep, nil
}

// Options say how to run the demo.
type Options struct {
	// Demo is the path of bin/demo; BinDir the folder of the binaries it
	// starts.
	Demo, BinDir string
	// ResultsDir receives the demo's run folder (logs, its workload).
	ResultsDir string
	// Args are extra demo flags (a small workload: --sessions, --turns).
	Args []string
	// Log receives the demo's output as it runs (nil: discarded).
	Log io.Writer
	// StartTimeout bounds the demo's startup and first workload.
	StartTimeout time.Duration
}

// Stack is a running demo.
type Stack struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

// Start runs the demo with --keep and returns once it printed its URLs.
func Start(ctx context.Context, o Options) (*Stack, Endpoints, error) {
	args := append([]string{"--bin-dir", o.BinDir, "--results-dir", o.ResultsDir, "--keep"}, o.Args...)
	cmd := exec.Command(o.Demo, args...) //nolint:gosec // G204: the Makefile names the demo binary
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, Endpoints{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, Endpoints{}, fmt.Errorf("starting %s: %w", o.Demo, err)
	}
	s := &Stack{cmd: cmd, done: make(chan struct{})}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	p := newParser()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if !signalled {
				p.line(sc.Text())
				if p.complete {
					signalled = true
					close(ready)
				}
			}
		}
		s.err = cmd.Wait()
		close(s.done)
	}()
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		ep, err := p.endpoints()
		if err != nil {
			s.Stop()
			return nil, ep, err
		}
		return s, ep, nil
	case <-s.done:
		return nil, Endpoints{}, fmt.Errorf("the demo exited before printing its URLs: %w", s.err)
	case <-t.C:
		s.Stop()
		return nil, Endpoints{}, fmt.Errorf("the demo printed no URLs within %s", timeout)
	case <-ctx.Done():
		s.Stop()
		return nil, Endpoints{}, ctx.Err()
	}
}

// Stop interrupts the demo (it stops every process it started) and waits
// for it; after 30 s it kills the demo itself.
func (s *Stack) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// Err is the demo's exit error once stopped; an interrupt is not one.
func (s *Stack) Err() error {
	var ee *exec.ExitError
	if errors.As(s.err, &ee) && ee.ExitCode() == 130 {
		return nil
	}
	return s.err
}
