package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pkg/resolve"
)

// Defaults applied by New to zero Config fields, and the reconnect backoff
// (docs/pylon.md#hubs-and-the-tunnel).
const (
	DefaultResolveInterval = 10 * time.Second
	DefaultDialTimeout     = 5 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
	// DefaultPingInterval and DefaultPingTimeout bound how long a
	// blackholed connection survives (about 10 s after the last frame).
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 5 * time.Second

	// InitialBackoff is the shortest wait after a connection closes or an
	// attempt fails, and the scale of the first ones; MaxBackoff is the
	// longest. Each wait is drawn at random between InitialBackoff and
	// three times the previous wait, capped at MaxBackoff (decorrelated
	// jitter, see backoff).
	InitialBackoff = time.Second
	// MaxBackoff bounds how long a pylon can stay away from a hub that has
	// come back: the wait in progress when the hub returns is at most this.
	// 10 s rather than upstream's 30 s: every second a pylon stays
	// disconnected its cluster is invisible to that hub, while a refused
	// attempt costs the hub almost nothing (1000 pylons at this cap make
	// about 145 attempts per second against a hub that is down).
	MaxBackoff = 10 * time.Second
	// StableAfter is how long a connection must have lived for the backoff
	// to start again from InitialBackoff.
	StableAfter = 60 * time.Second
)

// Resolver looks up the addresses of a hub host name. *net.Resolver
// satisfies it; tests inject their own.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Config configures a Client. Zero durations take the Default* values.
type Config struct {
	// Addresses are the hubs, each host:port. A host that resolves to
	// several addresses (a headless Service) gets one connection per
	// address.
	Addresses []string
	// ResolveInterval is how often host names are resolved again; workers
	// start for new addresses and stop (draining) for vanished ones.
	ResolveInterval time.Duration
	// Resolver resolves host names. Nil means net.DefaultResolver.
	Resolver Resolver
	// Handshake is sent on every connection. V defaults to
	// protocol.Version; AuthToken is ignored and filled from Token.
	Handshake protocol.Handshake
	// Token, when set, is called before every dial, so a token file is
	// re-read on each use and a rotated token applies without a restart.
	// An error fails that attempt.
	Token func() (string, error)
	// Handler serves every stream the hub opens: RegistrationPath, /health
	// and proxied requests.
	Handler http.Handler
	// Clock drives backoff, re-resolution and drain waits. Nil means
	// clock.Real.
	Clock clock.Clock
	// Log receives connection events. Nil discards them.
	Log *slog.Logger
	// TLS, when set, makes the pylon the TLS client of each hub. Its
	// ServerName defaults to the configured host name.
	TLS *tls.Config
	// DialTimeout bounds a lookup, a TCP connect, and the TLS and tunnel
	// handshakes together.
	DialTimeout time.Duration
	// DrainTimeout bounds how long, on shutdown or when a hub address goes
	// away, in-flight streams may finish after GOAWAY before the connection
	// is closed.
	DrainTimeout time.Duration
	// PingInterval is how long the connection may go without a frame
	// before the pylon sends a PING; PingTimeout is how long it waits for
	// the answer. They run on the wall clock inside x/net. A negative
	// PingInterval disables pings.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// AllowPlaintextToken permits sending the Token on a connection
	// without TLS. Run refuses a Token without TLS otherwise: the pylon
	// writes its handshake first, so whoever answers at the hub address,
	// or reads the wire, would get the token.
	AllowPlaintextToken bool
	// Rand draws the reconnect jitter; it is used under the Client's lock.
	// Nil means a generator seeded at random, which is what production
	// needs: pylons seeded alike would retry in lockstep again.
	Rand *rand.Rand
	// OnState, when set, is called on every change of a hub address's
	// connection state (for pylon_reverse_tunnel_connected{router}), with
	// connected=false also when the address is dropped. Calls are
	// serialized; it must not call back into the Client.
	OnState func(addr string, connected bool)
}

// Client keeps one tunnel to every hub address. Its methods are safe for
// concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger
	clk clock.Clock

	mu      sync.Mutex
	workers map[string]*worker // by dial address host:port
}

// New returns a Client; call Run to start connecting.
func New(cfg Config) *Client {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setDefault(&cfg.ResolveInterval, DefaultResolveInterval)
	setDefault(&cfg.DialTimeout, DefaultDialTimeout)
	setDefault(&cfg.DrainTimeout, DefaultDrainTimeout)
	setDefault(&cfg.PingInterval, DefaultPingInterval)
	setDefault(&cfg.PingTimeout, DefaultPingTimeout)
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
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) //nolint:gosec // G404: jitter needs spread, not secrecy
	}
	if cfg.Handshake.V == 0 {
		cfg.Handshake.V = protocol.Version
	}
	cfg.Addresses = slices.Clone(cfg.Addresses)
	return &Client{cfg: cfg, log: cfg.Log, clk: cfg.Clock, workers: make(map[string]*worker)}
}

// Connected reports, for every hub address currently targeted, whether its
// tunnel is up.
func (c *Client) Connected() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.workers))
	for addr, w := range c.workers {
		out[addr] = w.connected
	}
	return out
}

// Run resolves the hub addresses, keeps one connection to each, and
// re-resolves every ResolveInterval. When ctx is done it drains every
// connection (GOAWAY, then up to DrainTimeout for in-flight streams),
// waits for all goroutines and returns nil. It returns an error at once for
// an unusable configuration.
func (c *Client) Run(ctx context.Context) error {
	if c.cfg.Handler == nil {
		return errors.New("tunnel: Config.Handler is nil")
	}
	if len(c.cfg.Addresses) == 0 {
		return errors.New("tunnel: Config.Addresses is empty")
	}
	if c.cfg.Token != nil && c.cfg.TLS == nil && !c.cfg.AllowPlaintextToken {
		return errors.New("tunnel: a Token without TLS would be sent in plaintext; set Config.TLS or Config.AllowPlaintextToken")
	}
	for _, a := range c.cfg.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("tunnel: hub address %q: %w", a, err)
		}
	}
	var wg sync.WaitGroup
	for {
		c.reconcile(ctx, &wg)
		if !clock.Sleep(c.clk, ctx.Done(), c.cfg.ResolveInterval) {
			break
		}
	}
	// Every worker's context derives from ctx, so all are draining now.
	// They stay listed until they finish, so their last state change
	// still reaches OnState.
	wg.Wait()
	c.mu.Lock()
	for addr, w := range c.workers {
		w.cancel()
		delete(c.workers, addr)
	}
	c.mu.Unlock()
	return nil
}

// target is one dial address and the host name it came from.
type target struct {
	source     string // the configured host:port
	serverName string // the configured host, for TLS
}

// reconcile resolves every configured address and starts or stops workers
// so there is exactly one per resolved address. A host whose lookup fails
// keeps its current workers: a DNS hiccup must not cut live tunnels.
func (c *Client) reconcile(ctx context.Context, wg *sync.WaitGroup) {
	desired := make(map[string]target)
	failed := make(map[string]bool)
	for _, a := range c.cfg.Addresses {
		host, port, _ := net.SplitHostPort(a)
		ips, err := c.lookup(ctx, host)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("tunnel: resolving hub address failed; keeping current connections", "address", a, "err", err)
			}
			failed[a] = true
			continue
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, port)
			if _, dup := desired[addr]; !dup {
				desired[addr] = target{source: a, serverName: host}
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, w := range c.workers {
		if _, ok := desired[addr]; ok || failed[w.target.source] {
			continue
		}
		c.log.Info("tunnel: hub address no longer resolves; draining its connection", "hub", addr, "address", w.target.source)
		delete(c.workers, addr)
		if w.connected && c.cfg.OnState != nil {
			c.cfg.OnState(addr, false)
		}
		w.cancel()
	}
	for addr, t := range desired {
		if _, ok := c.workers[addr]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{c: c, addr: addr, target: t, cancel: cancel}
		c.workers[addr] = w
		c.log.Info("tunnel: connecting to hub", "hub", addr, "address", t.source)
		wg.Go(func() { w.run(wctx) })
	}
}

// lookup resolves host, bounded by DialTimeout on the injected clock. An
// IP literal resolves to itself.
func (c *Client) lookup(ctx context.Context, host string) ([]string, error) {
	return resolve.Lookup(ctx, c.clk, c.cfg.Resolver, host, c.cfg.DialTimeout)
}

// jitter draws a uniform value in [0, 1) for a reconnect wait. The lock
// serialises the workers' draws: a *rand.Rand is not safe for concurrent
// use.
func (c *Client) jitter() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Rand.Float64()
}

// setState records w's connection state and reports a change through
// OnState, but only while w is the current worker for its address, so a
// draining predecessor cannot overwrite its successor's state.
func (c *Client) setState(w *worker, connected bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.connected == connected {
		return
	}
	w.connected = connected
	if c.workers[w.addr] == w && c.cfg.OnState != nil {
		c.cfg.OnState(w.addr, connected)
	}
}
