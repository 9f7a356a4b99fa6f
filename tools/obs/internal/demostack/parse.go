package demostack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
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
	// HubAdmin is the hub's admin listener's base URL (HubMetrics without
	// /metrics): /debug/state, /debug/routing and /ui live there. The
	// demo's hub has no admin token.
	HubAdmin string
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

// keepMarker starts the block the demo prints once its workload is done
// and the stack stays up.
const keepMarker = "DEMO_KEEP"

// parser accumulates the demo's output lines. Only lines after the
// DEMO_KEEP marker give URLs: the banner before the workload names some
// too, but the stack is not known to stay up until the marker.
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
	if strings.HasPrefix(strings.TrimSpace(s), keepMarker) {
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
	admin, err := adminBase(p.ep.HubMetrics)
	if err != nil {
		return p.ep, err
	}
	p.ep.HubAdmin = admin
	return p.ep, nil
}

// adminBase is the admin listener's base URL of a /metrics URL.
func adminBase(metricsURL string) (string, error) {
	base, ok := strings.CutSuffix(metricsURL, "/metrics")
	if !ok || base == "" {
		return "", fmt.Errorf("the hub's metrics URL %q does not end in /metrics, so its admin base is unknown", metricsURL)
	}
	return base, nil
}

// ParseOutput reads the endpoints from the demo's whole output, as Start
// does line by line; tests and a reader of a saved log use it.
func ParseOutput(out string) (Endpoints, error) {
	p := newParser()
	for l := range strings.Lines(out) {
		p.line(strings.TrimRight(l, "\r\n"))
		if p.complete {
			return p.endpoints()
		}
	}
	if !p.keep {
		return Endpoints{}, errors.New("the demo's output has no " + keepMarker + " block (was it run with --keep, and did its workload finish?)")
	}
	return Endpoints{}, errors.New("the demo's " + keepMarker + " block does not end (no `try` line)")
}
