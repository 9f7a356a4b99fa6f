package demostack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Endpoints are the running stack's URLs as the demo prints them.
type Endpoints struct {
	// Gateway is the gateway's base URL (without /v1).
	Gateway string
	// HubMetrics is the hub's /metrics URL and HubAdmin its admin
	// listener's base URL (HubMetrics without /metrics): /debug/state,
	// /debug/routing and /ui live there. The demo's hub has no admin
	// token.
	HubMetrics, HubAdmin string
}

var (
	// reMetrics is printKeep's line `  metrics        gateway <url>  hub <url>`.
	reMetrics = regexp.MustCompile(`^\s*metrics\s+gateway\s+(http://\S+)\s+hub\s+(http://\S+)\s*$`)
	// reGateway is printKeep's line `  gateway        <url>/v1  (API key ...`.
	reGateway = regexp.MustCompile(`^\s*gateway\s+(http://\S+)/v1\s`)
)

// keepMarker starts the block the demo prints once its workload is done
// and the stack stays up.
const keepMarker = "DEMO_KEEP"

// parser reads the demo's output line by line. Only lines after the
// DEMO_KEEP marker count: the banner before the workload names URLs too,
// but the stack is not known to stay up until the marker.
type parser struct {
	keep bool
	ep   Endpoints
	err  error
}

// line takes one output line and reports whether the endpoints are
// complete (or known to be unusable: see err).
func (p *parser) line(s string) bool {
	if strings.HasPrefix(strings.TrimSpace(s), keepMarker) {
		p.keep = true
		return false
	}
	if !p.keep {
		return false
	}
	if m := reGateway.FindStringSubmatch(s); m != nil {
		p.ep.Gateway = m[1]
	}
	m := reMetrics.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	p.ep.HubMetrics = m[2]
	p.ep.HubAdmin, p.err = adminBase(m[2])
	return true
}

// adminBase is the admin listener's base URL of a /metrics URL.
func adminBase(metricsURL string) (string, error) {
	base, ok := strings.CutSuffix(metricsURL, "/metrics")
	if !ok || base == "" {
		return "", fmt.Errorf("the hub's metrics URL %q does not end in /metrics, so its admin base is unknown", metricsURL)
	}
	return base, nil
}

// ParseOutput reads the endpoints from the demo's whole output, as
// Start does line by line; tests and a reader of a saved log use it.
func ParseOutput(out string) (Endpoints, error) {
	var p parser
	for l := range strings.Lines(out) {
		if p.line(strings.TrimRight(l, "\r\n")) {
			return p.ep, p.err
		}
	}
	if !p.keep {
		return Endpoints{}, errors.New("the demo's output has no " + keepMarker + " block (was it run with --keep, and did its workload finish?)")
	}
	return Endpoints{}, errors.New("the demo's " + keepMarker + " block has no `metrics  gateway <url>  hub <url>` line")
}
