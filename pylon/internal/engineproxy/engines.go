package engineproxy

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stargate-router/stargate/pkg/affinity"
	"github.com/stargate-router/stargate/pkg/clock"
)

// Backoff of an engine whose connection failed: it takes no new requests
// (while another engine is eligible) for EngineInitialBackoff, doubling
// on each failure after the backoff ran out, up to EngineMaxBackoff; a
// response head from the engine resets it.
const (
	EngineInitialBackoff = time.Second
	EngineMaxBackoff     = 30 * time.Second
)

// Status values of pylon_upstream_engine_requests_total besides the
// engine's status class (2xx, 3xx, 4xx, 5xx).
const (
	engineStatusError     = "error"     // transport failure before a response head; the request failed
	engineStatusRetried   = "retried"   // transport failure before a response head; retried on another engine
	engineStatusCancelled = "cancelled" // the hub cancelled the request before a response head
)

// ParseUpstreamURLs splits --upstream-http-base-url into its engines: a
// comma-separated list of absolute http:// or https:// base URLs without
// query or fragment. Surrounding spaces and trailing slashes are removed;
// an empty entry or a duplicate is an error naming the flag and the entry.
func ParseUpstreamURLs(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, errors.New("--upstream-http-base-url: required")
	}
	var out []string
	var errs []error
	for _, raw := range strings.Split(list, ",") {
		u := strings.TrimRight(strings.TrimSpace(raw), "/")
		if err := checkUpstreamURL(u); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, prev := range out {
			if prev == u {
				errs = append(errs, fmt.Errorf("--upstream-http-base-url %q: listed twice", u))
			}
		}
		out = append(out, u)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// checkUpstreamURL validates one engine base URL (trailing "/" removed).
func checkUpstreamURL(s string) error {
	if s == "" {
		return errors.New("--upstream-http-base-url: empty entry in the list")
	}
	if !utf8.ValidString(s) {
		// The engine's label (host:port, a Prometheus label value) must
		// be UTF-8; the registry would refuse it at start.
		return fmt.Errorf("--upstream-http-base-url %q: not valid UTF-8", s)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("--upstream-http-base-url %q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("--upstream-http-base-url %q: must be an http:// or https:// URL", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("--upstream-http-base-url %q: has no host", s)
	case !utf8.ValidString(u.Host):
		// A percent-encoded host is decoded by the parser, so a valid
		// URL can still name a host whose label is not UTF-8.
		return fmt.Errorf("--upstream-http-base-url %q: host is not valid UTF-8 once decoded", s)
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("--upstream-http-base-url %q: must not have a query", s)
	case u.Fragment != "":
		return fmt.Errorf("--upstream-http-base-url %q: must not have a fragment", s)
	case u.User != nil:
		return fmt.Errorf("--upstream-http-base-url %q: must not carry credentials", s)
	}
	return nil
}

// EngineLabels returns the engine label of each base URL: its host:port
// (the scheme's default port when none is given). Engines that share a
// host:port (path-routed behind one address) get their path appended, so
// the labels stay distinct. The set is bounded by the configuration.
func EngineLabels(urls []string) []string {
	labels := make([]string, len(urls))
	paths := make([]string, len(urls))
	count := map[string]int{}
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			labels[i] = s
			continue
		}
		port := u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		labels[i] = net.JoinHostPort(u.Hostname(), port)
		paths[i] = u.EscapedPath()
		count[labels[i]]++
	}
	for i := range labels {
		if count[labels[i]] > 1 {
			labels[i] += paths[i]
		}
	}
	return labels
}

// engine is one upstream base URL with its load and health. The mutable
// fields are guarded by pool.mu.
type engine struct {
	idx   int
	base  string // without a trailing slash
	label string
	id    uint64 // affinity.HashID(base): every pylon in front of it names it alike
	// url is base parsed once, for requests built without parsing a URL
	// each (newUpstreamRequest); nil unless base is a plain scheme, host
	// and unescaped path (as a validated base is), and then the request
	// is built the standard way, which reports any error.
	url  *url.URL
	host string // url's host without an empty port, as http.NewRequest sets URL.Host and Request.Host

	outstanding int           // requests sent and not yet fully relayed
	down        bool          // the last attempt failed before a response head
	downUntil   time.Time     // no new requests before this while another engine is eligible
	backoff     time.Duration // the current down period
}

// pool spreads requests over the engines. With engine affinity on, a
// request with an affinity key goes to the engine its key prefers
// (pkg/affinity's rendezvous hash) unless that engine is full, down or
// over its load bound; every other request goes to the engine with the
// fewest outstanding requests, ties broken round robin. Engines marked
// down are skipped until their backoff runs out.
type pool struct {
	clk clock.Clock
	m   *Metrics
	// affinity and factor are --engine-affinity and
	// --engine-affinity-load-factor as affinity.Pick takes it; limit is
	// an engine's share of --max-engine-concurrency (0: unknown), the
	// outstanding requests at which it counts as full.
	affinity bool
	factor   float64
	limit    int
	// queueWhenFull is --engine-affinity-when-full=queue: the limit no
	// longer moves a key off its engine.
	queueWhenFull bool

	mu      sync.Mutex
	engines []*engine
	next    int // round-robin cursor: where the next scan starts
}

func newPool(cfg *Config, m *Metrics) *pool {
	urls := cfg.engineURLs()
	p := &pool{clk: cfg.Clock, m: m, affinity: cfg.EngineAffinity, factor: affinityFactor(cfg.EngineAffinityLoadFactor),
		queueWhenFull: cfg.EngineAffinityQueueWhenFull}
	if total, n := cfg.MaxEngineConcurrency, uint64(len(urls)); total > 0 {
		// The flag counts the engines together; each is assumed to run
		// an equal share, rounded up so that no slot goes uncounted.
		share := total / n
		if total%n != 0 {
			share++
		}
		p.limit = int(min(share, math.MaxInt32))
	}
	for i, l := range EngineLabels(urls) {
		e := &engine{idx: i, base: urls[i], label: l, id: affinity.HashID(urls[i])}
		if u, err := url.Parse(urls[i]); err == nil && u.Host != "" && u.Opaque == "" && u.RawPath == "" &&
			u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" {
			e.url, e.host = u, strings.TrimSuffix(u.Host, ":")
		}
		p.engines = append(p.engines, e)
		m.engineUp(l, true)
	}
	return p
}

// affinityFactor turns --engine-affinity-load-factor into affinity.Pick's
// factor: 0 (no bound) becomes negative.
func affinityFactor(f float64) float64 {
	if f == 0 {
		return -1
	}
	return f
}

// eligibleLocked reports whether e may take new requests at now.
func (e *engine) eligibleLocked(now time.Time) bool {
	return !e.down || !now.Before(e.downUntil)
}

// acquire picks the engine for the next attempt of a request with
// affinity key key ("" for none) and counts it outstanding; release undoes
// that. exclude (may be nil) is never picked. With onlyEligible, an engine
// inside its down period is never picked and the result may be nil;
// otherwise, when no engine is eligible, the least loaded of the others
// is tried anyway (a single engine is always tried). With several engines
// and affinity on, the pick is counted by outcome.
func (p *pool) acquire(key string, exclude *engine, onlyEligible bool) *engine {
	now := p.clk.Now()
	byKey := p.affinity && len(p.engines) > 1 && key != ""
	var k affinity.Key
	var first *engine
	if byKey {
		// The key's order depends on nothing the lock guards.
		k = affinity.HashKey(key)
		first = p.engines[affinity.Preferred(k, len(p.engines), func(j int) uint64 { return p.engines[j].id })]
	}
	p.mu.Lock()
	var best *engine
	outcome := pickNone
	switch {
	case byKey:
		best, outcome = p.byKeyLocked(k, first, exclude, onlyEligible, now)
	case p.affinity && len(p.engines) > 1:
		best, outcome = p.leastOutstandingLocked(exclude, onlyEligible, now), pickNoKey
	default:
		best = p.leastOutstandingLocked(exclude, onlyEligible, now)
	}
	if best != nil {
		best.outstanding++
	}
	p.mu.Unlock()
	if best != nil {
		p.m.enginePick(outcome)
	}
	return best
}

// byKeyLocked is the affinity pick among the engines other than exclude
// (only the eligible ones with onlyEligible): the engine k prefers unless
// it is down, at its concurrency limit (unless queueWhenFull) or over the
// load bound, else the least loaded; nil when no engine is left. The outcome is preferred when
// the pick is first, k's first choice among all engines.
func (p *pool) byKeyLocked(k affinity.Key, first, exclude *engine, onlyEligible bool, now time.Time) (*engine, pickOutcome) {
	var placeBuf [8]affinity.Place
	var engineBuf [8]*engine
	places, cands := placeBuf[:0], engineBuf[:0]
	for _, e := range p.engines {
		eligible := e.eligibleLocked(now)
		if e == exclude || (onlyEligible && !eligible) {
			continue
		}
		full := !eligible || (!p.queueWhenFull && p.limit > 0 && e.outstanding >= p.limit)
		places = append(places, affinity.Place{ID: e.id, Load: e.outstanding, Full: full})
		cands = append(cands, e)
	}
	if len(places) == 0 {
		return nil, pickNone
	}
	best := cands[affinity.Pick(k, places, p.factor)]
	if best == first {
		return best, pickPreferred
	}
	return best, pickSpilled
}

// leastOutstandingLocked is the engine with the fewest outstanding
// requests, ties broken round robin, as acquire describes; nil when none
// is left.
func (p *pool) leastOutstandingLocked(exclude *engine, onlyEligible bool, now time.Time) *engine {
	n := len(p.engines)
	var best *engine
	for pass := 0; pass < 2 && best == nil; pass++ {
		if pass == 1 && onlyEligible {
			break
		}
		for i := range n {
			e := p.engines[(p.next+i)%n]
			if e == exclude || (pass == 0 && !e.eligibleLocked(now)) {
				continue
			}
			if best == nil || e.outstanding < best.outstanding {
				best = e
			}
		}
	}
	if best == nil {
		return nil
	}
	p.next = (best.idx + 1) % n
	return best
}

func (p *pool) release(e *engine) {
	p.mu.Lock()
	e.outstanding--
	p.mu.Unlock()
}

// failed marks e down after a connection or transport failure before a
// response head. A failure inside the current down period (requests that
// were already in flight) does not extend it; the first failure after it
// ran out doubles it.
func (p *pool) failed(e *engine) {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.down && now.Before(e.downUntil) {
		return
	}
	if e.down {
		e.backoff = min(e.backoff*2, EngineMaxBackoff)
	} else {
		e.backoff = EngineInitialBackoff
	}
	e.down = true
	e.downUntil = now.Add(e.backoff)
	p.m.engineUp(e.label, false)
}

// succeeded marks e up: it answered.
func (p *pool) succeeded(e *engine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !e.down {
		return
	}
	e.down, e.backoff, e.downUntil = false, 0, time.Time{}
	p.m.engineUp(e.label, true)
}

// healthOrder is every engine, the eligible ones first, each group in
// configuration order.
func (p *pool) healthOrder() []*engine {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*engine, 0, len(p.engines))
	for _, e := range p.engines {
		if e.eligibleLocked(now) {
			out = append(out, e)
		}
	}
	for _, e := range p.engines {
		if !e.eligibleLocked(now) {
			out = append(out, e)
		}
	}
	return out
}

// statusClass is the engine status label of a response head.
func statusClass(code int) string {
	switch {
	case code >= 200 && code < 300:
		return "2xx"
	case code >= 300 && code < 400:
		return "3xx"
	case code >= 400 && code < 500:
		return "4xx"
	case code >= 500 && code < 600:
		return "5xx"
	}
	return "other"
}
