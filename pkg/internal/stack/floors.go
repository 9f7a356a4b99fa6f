package stack

import "context"

// floorBinary is the relay-floor hop's program: a bare
// net/http/httputil reverse proxy with no routing, tunnel or observation.
const floorBinary = "baseline-proxy"

// floorName is the child name of the i-th relay-floor hop counted from the
// engine (from 0): "floor-1", "floor-2", ...
func floorName(i int) string { return "floor-" + itoa(i+1) }

// startFloorHops chains Options.FloorHops relay-floor hops in front of the
// fleet's first engine. Each is a wave of its own because it needs the
// port of the hop before it; Stop therefore stops the outermost first. A
// hop is ready once the engine's /health answers through it.
func (s *Stack) startFloorHops(ctx context.Context, ep *Endpoints) error {
	if s.opts.FloorHops <= 0 {
		return nil
	}
	target := ep.Engines[s.fleet.EngineIDs()[0]]
	for i := range s.opts.FloorHops {
		name, upstream := floorName(i), target
		ports, err := s.l.startAll(ctx, service{name: name, binary: floorBinary, ports: 1,
			args: s.extra(name, floorBinary, func(p []int) []string {
				return []string{"--listen", addr(p[0]), "--target", upstream}
			}),
			ready: func(p []int) string { return "http://" + addr(p[0]) + "/health" }})
		if err != nil {
			return err
		}
		target = "http://" + addr(ports[0][0])
		ep.FloorHops = append(ep.FloorHops, target)
	}
	return nil
}

// PID is the process id of the named child while it runs, for a caller
// that reads the child's /proc entries (CPU time, syscalls) around a
// measurement. A restarted child has a new one.
func (s *Stack) PID(name string) (int, error) {
	p, err := s.l.running(name)
	if err != nil {
		return 0, err
	}
	return p.cmd.Process.Pid, nil
}
