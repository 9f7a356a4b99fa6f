package hubclient

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/resolve"
	"github.com/stargate-router/stargate/pkg/roundtrip"
)

// Defaults and bounds of the hub pool (docs/gateway.md#several-hubs).
const (
	// DefaultResolveInterval is how often hub host names are resolved
	// again, as the pylon does for its tunnels.
	DefaultResolveInterval = 10 * time.Second
	// DefaultAttempts is how many hubs one request may try: enough to
	// step over a hub that just died and one more, few enough that a
	// request never walks a whole fleet that is down.
	DefaultAttempts = 3
	// InitialBackoff is how long a hub is skipped after its first failed
	// exchange; each further failure in a row doubles it, up to
	// MaxBackoff. A hub that restarts is back within a few seconds, and
	// a request that lands on a dead hub costs only a refused dial and a
	// retry, so the bounds stay short.
	InitialBackoff = time.Second
	// MaxBackoff bounds how long a failed hub is skipped.
	MaxBackoff = 10 * time.Second
)

// Resolver looks up the addresses of a hub host name. *net.Resolver
// satisfies it; tests inject their own.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// State is a hub's passive health, as reported to Config.OnState.
type State int

const (
	// Up means the hub's last exchange succeeded, or it has had none yet.
	Up State = iota
	// Down means the hub's last exchange failed before its response head; it
	// is skipped while its backoff lasts and another hub is up.
	Down
	// Gone means the hub's address no longer resolves; it is forgotten.
	Gone
)

// Config configures a pool of hubs (NewPool).
type Config struct {
	// URLs are the configured hub base URLs (scheme and host only). A
	// host name that resolves to several addresses (a Kubernetes
	// headless Service) is one hub per address.
	URLs []*url.URL
	// ConnectTimeout bounds a dial, and a host name lookup.
	ConnectTimeout time.Duration
	// TokenFile, when set, holds the hub token; it is read again as soon
	// as it changes (see New).
	TokenFile string
	// ResolveInterval is how often Run resolves the host names again;
	// zero means DefaultResolveInterval.
	ResolveInterval time.Duration
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Clock drives backoff and re-resolution; nil means clock.Real.
	Clock clock.Clock
	// Log receives hub changes; nil discards them.
	Log *slog.Logger
	// OnState, when set, is called on every change of a hub's state, by
	// its dial address (host:port). Calls are serialized; it must not
	// call back into the Client.
	OnState func(hub string, s State)
	// Transport, when set, builds the round tripper of the hub at dial
	// address addr (tests); nil means the production transport, which
	// dials addr whatever the URL's host.
	Transport func(addr string) http.RoundTripper
	// Rand draws the two candidates of a pick; it is used under the
	// Client's lock. Nil means a generator seeded at random.
	Rand *rand.Rand
}

// Hub is one hub the pool may send a request to: one dial address.
type Hub struct {
	// addr is the dial address host:port, the hub's name in logs and
	// metrics.
	addr string
	// base is the configured URL it came from: requests keep its host,
	// so the Host header and TLS server name stay the configured name
	// when addr is an IP.
	base *url.URL
	// rt is the hub's transport; requests go on it directly (see Do).
	rt http.RoundTripper
	// inflight counts exchanges from Do until their body is closed.
	inflight atomic.Int64
	// removed is set once the address stops resolving: its idle
	// connections are closed as its last exchanges end.
	removed atomic.Bool

	// Under Client.mu.
	up        bool
	failures  int
	downUntil time.Time
}

// Addr is the hub's dial address host:port.
func (h *Hub) Addr() string { return h.addr }

// Client sends the gateway's requests to one hub among several. Its
// methods are safe for concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger
	clk clock.Clock
	// static is true for New and NewWithTransport: one fixed hub, never
	// resolved.
	static bool

	// token is the hub token file, nil without one.
	token *tokenFile

	mu   sync.Mutex
	hubs []*Hub // sorted by addr
	rnd  *rand.Rand
}

// NewPool returns a Client over cfg.URLs. It knows no hub until Resolve
// has run; Run keeps the set current.
func NewPool(cfg Config) *Client {
	if cfg.ResolveInterval <= 0 {
		cfg.ResolveInterval = DefaultResolveInterval
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) //nolint:gosec // G404: load spreading needs no secrecy
	}
	if cfg.Transport == nil {
		ct := cfg.ConnectTimeout
		cfg.Transport = func(addr string) http.RoundTripper { return newTransport(addr, ct) }
	}
	cfg.URLs = slices.Clone(cfg.URLs)
	c := &Client{cfg: cfg, log: cfg.Log, clk: cfg.Clock, rnd: cfg.Rand}
	if cfg.TokenFile != "" {
		c.token = &tokenFile{path: cfg.TokenFile, clk: cfg.Clock}
	}
	return c
}

// newStatic is a Client with the one hub base, dialed by its own host
// name, never resolved: the single-hub client of tests and benchmarks.
func newStatic(base *url.URL, rt http.RoundTripper, tokenFile string) *Client {
	c := NewPool(Config{URLs: []*url.URL{base}, TokenFile: tokenFile})
	c.static = true
	c.hubs = []*Hub{{addr: base.Host, base: base, rt: rt, up: true}}
	return c
}

// newTransport is the production transport of one hub. With addr set,
// every connection goes to addr whatever the request URL's host, so the
// URL (and with it the Host header and the TLS server name) keeps the
// configured host name while the pool picks the address.
func newTransport(addr string, connectTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	dial := d.DialContext
	if addr != "" {
		dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
	}
	return &http.Transport{
		Proxy:       nil,
		DialContext: dial,
		// Every gateway request goes to the same few hub hosts: the
		// default of 2 idle connections per host would redial constantly.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// Bodies are relayed byte for byte; transparent gzip would change
		// what the client sees.
		DisableCompression: true,
		// The wait for the response head is bounded per request by the
		// server on its injected clock (--hub-response-header-timeout),
		// not here, so tests can drive it without sleeping.
		ResponseHeaderTimeout: 0,
		ForceAttemptHTTP2:     false,
	}
}

// Len is the number of hubs known now.
func (c *Client) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hubs)
}

// Hubs returns the dial addresses of the hubs known now, sorted.
func (c *Client) Hubs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.hubs))
	for i, h := range c.hubs {
		out[i] = h.addr
	}
	return out
}

// Pick chooses the hub for the next attempt of a request that has
// already tried the hubs in tried; nil means none is left (or none is
// known). Among the hubs that are up it takes the one with fewer
// exchanges in flight of two drawn at random (power of two choices); when
// every untried hub is down it takes the one whose backoff ends first,
// since trying a hub that may be back beats failing at once.
func (c *Client) Pick(tried []*Hub) *Hub {
	now := c.clk.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	nUp := 0
	var down *Hub
	for _, h := range c.hubs {
		switch {
		case slices.Contains(tried, h):
		case now.Before(h.downUntil):
			if down == nil || h.downUntil.Before(down.downUntil) {
				down = h
			}
		default:
			nUp++
		}
	}
	if nUp == 0 {
		return down
	}
	if nUp == 1 {
		return c.nthUp(0, tried, now)
	}
	i := c.rnd.IntN(nUp)
	j := c.rnd.IntN(nUp - 1)
	if j >= i {
		j++
	}
	a, b := c.nthUp(i, tried, now), c.nthUp(j, tried, now)
	if b.inflight.Load() < a.inflight.Load() {
		return b
	}
	return a
}

// nthUp is the n-th (from 0) untried hub that is up; c.mu is held.
func (c *Client) nthUp(n int, tried []*Hub, now time.Time) *Hub {
	for _, h := range c.hubs {
		if slices.Contains(tried, h) || now.Before(h.downUntil) {
			continue
		}
		if n == 0 {
			return h
		}
		n--
	}
	return nil
}

// NewRequest returns the request for path with header h and body,
// addressed to hub.
func (c *Client) NewRequest(ctx context.Context, hub *Hub, method, path string, h http.Header, body []byte) (*http.Request, error) {
	return newRequest(ctx, hub.base, c.token, method, path, h, body)
}

// closeIdle closes the hub's idle connections, as http.Client's
// CloseIdleConnections does: when its transport keeps any.
func (h *Hub) closeIdle() {
	if t, ok := h.rt.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// Do sends req to hub. An exchange counts as in flight on hub until the
// response body is closed, so callers must close it. A failure while
// req's context is live (the hub refused, reset or closed the connection
// before its response head) marks the hub down for its backoff; a
// response head of any status marks it up.
func (c *Client) Do(hub *Hub, req *http.Request) (*http.Response, error) {
	hub.inflight.Add(1)
	// The transport, not http.Client: a redirect from the hub (an
	// engine's, relayed by the pylon and the hub) reaches the client as an
	// answer instead of being followed, which would re-send the prompt to
	// the URL it names; and Client's copy of the header set is not made.
	resp, err := roundtrip.Do(hub.rt, req)
	if err != nil {
		c.release(hub)
		if req.Context().Err() == nil {
			c.markDown(hub, err)
		}
		return nil, err
	}
	c.markUp(hub)
	resp.Body = &trackedBody{ReadCloser: resp.Body, done: func() { c.release(hub) }}
	return resp, nil
}

// release ends one exchange on hub.
func (c *Client) release(hub *Hub) {
	if hub.inflight.Add(-1) == 0 && hub.removed.Load() {
		hub.closeIdle()
	}
}

// trackedBody calls done once, on the first Close.
type trackedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// markDown starts or extends hub's backoff after a failed exchange.
func (c *Client) markDown(hub *Hub, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hub.failures++
	backoff := InitialBackoff << min(hub.failures-1, 8)
	hub.downUntil = c.clk.Now().Add(min(backoff, MaxBackoff))
	if hub.up {
		hub.up = false
		c.log.Warn("hub exchange failed; skipping the hub while others are up", "hub", hub.addr, "backoff", min(backoff, MaxBackoff).String(), "err", err)
		c.report(hub, Down)
	}
}

// markUp ends hub's backoff after an exchange that got its head.
func (c *Client) markUp(hub *Hub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hub.failures = 0
	hub.downUntil = time.Time{}
	if !hub.up {
		hub.up = true
		c.log.Info("hub answers again", "hub", hub.addr)
		c.report(hub, Up)
	}
}

// report tells OnState about hub, unless hub was replaced or removed;
// c.mu is held, which serializes the calls.
func (c *Client) report(hub *Hub, s State) {
	if c.cfg.OnState == nil || hub.removed.Load() {
		return
	}
	c.cfg.OnState(hub.addr, s)
}

// CloseIdle closes idle hub connections (shutdown, tests).
func (c *Client) CloseIdle() {
	c.mu.Lock()
	hubs := slices.Clone(c.hubs)
	c.mu.Unlock()
	for _, h := range hubs {
		h.closeIdle()
	}
}

// Run resolves the hub host names every ResolveInterval until ctx ends;
// call Resolve first for the initial set. A static Client returns at
// once.
func (c *Client) Run(ctx context.Context) {
	if c.static {
		return
	}
	for clock.Sleep(c.clk, ctx.Done(), c.cfg.ResolveInterval) {
		c.Resolve(ctx)
	}
}

// Resolve resolves every configured URL's host and updates the set of
// hubs: one per resolved address (an IP literal is itself). A new address
// becomes a hub that is up; a vanished one is dropped, its exchanges in
// flight left to finish. A host whose lookup fails keeps its hubs: a DNS
// hiccup must not empty the pool.
func (c *Client) Resolve(ctx context.Context) {
	if c.static {
		return
	}
	type target struct{ base *url.URL }
	desired := make(map[string]target)
	failed := make(map[string]bool)
	for _, u := range c.cfg.URLs {
		ips, err := c.lookup(ctx, u.Hostname())
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("resolving a --hub-url host failed; keeping its hubs", "url", u.String(), "err", err)
			}
			failed[u.String()] = true
			continue
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, Port(u))
			if _, dup := desired[addr]; !dup {
				desired[addr] = target{base: u}
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.hubs[:0:0]
	for _, h := range c.hubs {
		if _, ok := desired[h.addr]; ok || failed[h.base.String()] {
			kept = append(kept, h)
			delete(desired, h.addr)
			continue
		}
		c.log.Info("hub address no longer resolves; dropping it", "hub", h.addr, "url", h.base.String())
		if c.cfg.OnState != nil {
			c.cfg.OnState(h.addr, Gone)
		}
		h.removed.Store(true)
		h.closeIdle()
	}
	for addr, t := range desired {
		h := &Hub{addr: addr, base: t.base, rt: c.cfg.Transport(addr), up: true}
		c.log.Info("hub added", "hub", addr, "url", t.base.String())
		kept = append(kept, h)
		c.report(h, Up)
	}
	slices.SortFunc(kept, func(a, b *Hub) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	c.hubs = kept
}

// lookup resolves host, bounded by ConnectTimeout on the injected clock.
// An IP literal resolves to itself.
func (c *Client) lookup(ctx context.Context, host string) ([]string, error) {
	return resolve.Lookup(ctx, c.clk, c.cfg.Resolver, host, c.cfg.ConnectTimeout)
}

// Port is u's port, or its scheme's default.
func Port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// FailureReason classifies a failed exchange for the retry metric:
// "connect" when no connection to the hub could be made (refused, dial
// timeout, unreachable), so the hub never saw the request; "exchange"
// when the connection broke before the response head (reset, EOF), so the
// hub may have started on it.
func FailureReason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "connect"
	}
	return "exchange"
}

// FailureReasons are the values FailureReason returns.
var FailureReasons = []string{"connect", "exchange"}
