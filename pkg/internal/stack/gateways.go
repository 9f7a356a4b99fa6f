package stack

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// extra appends Options.ExtraArgs of binary, then of name, to what args
// returns.
func (s *Stack) extra(name, binary string, args func([]int) []string) func([]int) []string {
	more := append(slices.Clone(s.opts.ExtraArgs[binary]), s.opts.ExtraArgs[name]...)
	if len(more) == 0 {
		return args
	}
	return func(p []int) []string { return append(args(p), more...) }
}

// hubCount is Options.Hubs with its default.
func (s *Stack) hubCount() int { return max(s.opts.Hubs, 1) }

// hubName is the child name of the i-th hub (from 0): "hub", "hub-2", ...
func hubName(i int) string {
	if i == 0 {
		return "hub"
	}
	return "hub-" + itoa(i+1)
}

// gatewayCount is Options.Gateways with its default.
func (s *Stack) gatewayCount() int { return max(s.opts.Gateways, 1) }

// olricSecret writes the secret the gateways' Olric nodes share when there
// are several (a node with peers must authenticate them) and returns its
// path; with one gateway, nothing.
func (s *Stack) olricSecret() (string, error) {
	if s.gatewayCount() < 2 {
		return "", nil
	}
	path := filepath.Join(s.secretDir, "olric-secret")
	return path, os.WriteFile(path, []byte(randomHex()+"\n"), 0o600)
}

// gatewayService is one gateway. With several gateways its Olric node is
// given the memberlist addresses of every other gateway known when it
// (re)starts, and the shared secret.
func (s *Stack) gatewayService(name string, hubs hubSet, sec secrets, olricSecret string) service {
	f := s.fleet
	return service{name: name, binary: "gateway", ports: 4,
		env: func(p []int) []string {
			env := gatewayEnv(gatewayPorts{p[0], p[1], p[2], p[3]})
			if olricSecret == "" {
				return env
			}
			return append(env, "OLRIC_AUTH_SECRET_FILE="+olricSecret, "OLRIC_PEERS="+strings.Join(s.peersOf(name), ","))
		},
		args:  s.extra(name, "gateway", func(p []int) []string { return gatewayArgs(f, gatewayPorts{p[0], p[1], p[2], p[3]}, hubs, sec) }),
		ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }}
}

// peersOf lists the memberlist addresses of every gateway but name.
func (s *Stack) peersOf(name string) []string {
	s.gossipMu.Lock()
	defer s.gossipMu.Unlock()
	var out []string
	for n, a := range s.gossip {
		if n != name {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// addGateway records a started gateway's URLs and memberlist address.
func (s *Stack) addGateway(ep *Endpoints, name string, p []int) {
	g := gatewayPorts{p[0], p[1], p[2], p[3]}
	url, metrics := "http://"+addr(g.api), "http://"+addr(g.metrics)+"/metrics"
	if len(ep.Gateways) == 0 {
		ep.Gateway, ep.GatewayMetrics = url, metrics
	}
	ep.Gateways, ep.GatewaysMetrics = append(ep.Gateways, url), append(ep.GatewaysMetrics, metrics)
	s.gossipMu.Lock()
	s.gossip[name] = addr(g.memberlist)
	s.gossipMu.Unlock()
}

// startMoreGateways starts gateways 2..Options.Gateways at once, each
// joining the first one's Olric node, once the first is ready.
func (s *Stack) startMoreGateways(ctx context.Context, ep *Endpoints, hubs hubSet, sec secrets, olricSecret string) error {
	var svcs []service
	for i := 2; i <= s.gatewayCount(); i++ {
		svcs = append(svcs, s.gatewayService("gateway-"+itoa(i), hubs, sec, olricSecret))
	}
	if len(svcs) == 0 {
		return nil
	}
	ports, err := s.l.startAll(ctx, svcs...)
	if err != nil {
		return err
	}
	for i, svc := range svcs {
		s.addGateway(ep, svc.name, ports[i])
	}
	return nil
}
