package olricnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/olric-data/olric"
	"github.com/olric-data/olric/config"
)

// Config is the node's settings; see the gateway's OLRIC_* variables.
type Config struct {
	Env                     string
	BindAddr                string
	BindPort                int
	MemberlistBindAddr      string
	MemberlistBindPort      int
	MemberlistAdvertiseAddr string
	Peers                   []string
	// K8sService is a headless Service DNS name resolved to pod IPs for
	// discovery when Peers is empty: a DNS lookup needs no Kubernetes RBAC,
	// unlike listing pods.
	K8sService      string
	ReplicaCount    int
	PartitionCount  uint64
	TableSize       uint64
	StartupTimeout  time.Duration
	ShutdownTimeout time.Duration
	MaxJoinAttempts int
	JoinRetry       time.Duration
	RoutingRefresh  time.Duration
	ClientOpTimeout time.Duration
	LogLevel        string
	// Resolve looks up K8sService; nil uses net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]string, error)
	// LocalAddrs lists this host's interface addresses, which discovery
	// drops from K8sService's answer; nil uses net.InterfaceAddrs.
	LocalAddrs func() ([]net.Addr, error)
}

// Node is a started member.
type Node struct {
	db       *olric.Olric
	embedded *olric.EmbeddedClient
	cluster  *olric.ClusterClient
	cfg      Config
	errc     chan error
	// self is this member's advertised data address, Olric's name for it.
	self string
}

// Start creates the node, joins its peers and returns once Olric reports
// it started (joined, or formed a cluster alone after the join attempts).
// An error means the gateway must not serve: a node that cannot start
// within StartupTimeout is fatal, since serving without the shared state
// would silently split rate limits and hints per replica.
//
// Olric's Started callback uses process-global counters, so nodes in one
// process (tests) must be started one after another.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Node, error) {
	c := config.New(cfg.Env)
	c.BindAddr, c.BindPort = cfg.BindAddr, cfg.BindPort
	c.MemberlistConfig.BindAddr = cfg.MemberlistBindAddr
	c.MemberlistConfig.BindPort = cfg.MemberlistBindPort
	// Peers are reached on the port they advertise, so it must equal the
	// bind port (Olric's default advertises 3322 whatever the bind port).
	c.MemberlistConfig.AdvertisePort = cfg.MemberlistBindPort
	if cfg.MemberlistAdvertiseAddr != "" {
		c.MemberlistConfig.AdvertiseAddr = cfg.MemberlistAdvertiseAddr
	}
	c.ReplicaCount = cfg.ReplicaCount
	c.PartitionCount = cfg.PartitionCount
	c.MaxJoinAttempts = cfg.MaxJoinAttempts
	c.JoinRetryInterval = cfg.JoinRetry
	c.BootstrapTimeout = cfg.StartupTimeout
	c.LeaveTimeout = cfg.ShutdownTimeout
	c.LogLevel, c.LogVerbosity = cfg.LogLevel, 1
	// Olric and memberlist write "[LEVEL] ..." lines through one
	// *log.Logger; Olric filters by LogLevel, slog gets them at WARN.
	c.Logger = slog.NewLogLogger(log.With("component", "olric").Handler(), slog.LevelWarn)
	// Each touched partition reserves a table of TableSize bytes; Olric's
	// default (1 MiB x 271 partitions) shows as hundreds of MB of heap.
	c.DMaps.Engine = config.NewEngine()
	c.DMaps.Engine.Config["tableSize"] = cfg.TableSize
	peers, err := discover(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	c.Peers = peers
	ready := make(chan struct{})
	c.Started = func() { close(ready) }
	if err := c.Sanitize(); err != nil {
		return nil, fmt.Errorf("olric config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("olric config: %w", err)
	}
	db, err := olric.New(c)
	if err != nil {
		return nil, fmt.Errorf("olric: %w", err)
	}
	// olric.New resolved the bind address and named the member after it.
	n := &Node{db: db, cfg: cfg, errc: make(chan error, 1), self: c.MemberlistConfig.Name}
	go func() { n.errc <- db.Start() }()
	timer := time.NewTimer(cfg.StartupTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case err := <-n.errc:
		// Start errors (port in use) never fire Started, and may leave
		// the listeners that did bind running.
		_ = shutdownWithin(db.Shutdown, cfg.ShutdownTimeout)
		return nil, fmt.Errorf("olric start on %s:%d / memberlist %d: %w", cfg.BindAddr, cfg.BindPort, cfg.MemberlistBindPort, err)
	case <-timer.C:
		n.shutdownDB()
		return nil, fmt.Errorf("olric did not start within --olric-startup-timeout %s", cfg.StartupTimeout)
	case <-ctx.Done():
		n.shutdownDB()
		return nil, ctx.Err()
	}
	n.embedded = db.NewEmbeddedClient()
	seed := cfg.BindAddr
	if seed == "" || seed == "0.0.0.0" || seed == "::" {
		seed = "127.0.0.1"
	}
	cc := config.NewClient()
	cc.DialTimeout, cc.ReadTimeout, cc.WriteTimeout = cfg.ClientOpTimeout, cfg.ClientOpTimeout, cfg.ClientOpTimeout
	// No client retries: a retried Incr after a timeout could count twice.
	cc.MaxRetries = -1
	cl, err := olric.NewClusterClient([]string{net.JoinHostPort(seed, strconv.Itoa(cfg.BindPort))},
		olric.WithConfig(cc), olric.WithRoutingTableFetchInterval(cfg.RoutingRefresh),
		olric.WithLogger(slog.NewLogLogger(log.With("component", "olric-client").Handler(), slog.LevelWarn)))
	if err != nil {
		n.shutdownDB()
		return nil, fmt.Errorf("olric cluster client: %w", err)
	}
	n.cluster = cl
	return n, nil
}

// discover returns the static peers, or the headless Service's addresses
// on the memberlist port. DNS failures are retried like joins; an empty
// answer after that starts the node alone with a warning (the first pod of
// a new deployment has no peers).
func discover(ctx context.Context, cfg Config, log *slog.Logger) ([]string, error) {
	if len(cfg.Peers) > 0 || cfg.K8sService == "" {
		return cfg.Peers, nil
	}
	resolve := cfg.Resolve
	if resolve == nil {
		resolve = net.DefaultResolver.LookupHost
	}
	port := strconv.Itoa(cfg.MemberlistBindPort)
	self := selfAddrs(cfg)
	for attempt := 1; ; attempt++ {
		addrs, err := resolve(ctx, cfg.K8sService)
		peers := make([]string, 0, len(addrs))
		for _, a := range addrs {
			if !self[normalizeIP(a)] {
				peers = append(peers, net.JoinHostPort(a, port))
			}
		}
		if err == nil && len(peers) > 0 {
			return peers, nil
		}
		if attempt >= cfg.MaxJoinAttempts {
			log.Warn("olric discovery found no peers; starting alone", "service", cfg.K8sService, "err", err)
			return nil, nil
		}
		t := time.NewTimer(cfg.JoinRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// selfAddrs is the set of addresses that name this node: the memberlist
// bind and advertise addresses and every interface address of the host.
// A headless Service's answer includes the asking pod itself, and Olric
// refuses to start with itself as a peer ("cannot be peer with itself");
// every peer shares the memberlist port, so the same IP means this node.
func selfAddrs(cfg Config) map[string]bool {
	self := map[string]bool{}
	for _, a := range []string{cfg.MemberlistBindAddr, cfg.MemberlistAdvertiseAddr} {
		if a != "" {
			self[normalizeIP(a)] = true
		}
	}
	local := cfg.LocalAddrs
	if local == nil {
		local = net.InterfaceAddrs
	}
	addrs, err := local()
	if err != nil {
		return self
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			self[ipn.IP.String()] = true
		}
	}
	return self
}

// normalizeIP writes an IP address in one canonical form, so that the
// same address from DNS and from an interface compares equal; anything
// that is not an IP is returned as it is.
func normalizeIP(a string) string {
	if ip := net.ParseIP(a); ip != nil {
		return ip.String()
	}
	return a
}

// Embedded is the in-process client (no network hop for local partitions).
func (n *Node) Embedded() *olric.EmbeddedClient { return n.embedded }

// Cluster is the client that sends each command to the partition owner.
func (n *Node) Cluster() *olric.ClusterClient { return n.cluster }

// Members returns the number of cluster members this node sees.
func (n *Node) Members(ctx context.Context) (int, error) {
	ms, err := n.embedded.Members(ctx)
	return len(ms), err
}

// Shutdown leaves the cluster gracefully, bounded by ShutdownTimeout.
func (n *Node) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	if n.cluster != nil {
		errs = append(errs, n.cluster.Close(ctx))
	}
	if n.embedded != nil {
		errs = append(errs, n.embedded.Close(ctx))
	}
	errs = append(errs, shutdownWithin(n.db.Shutdown, time.Until(deadline(ctx))))
	select {
	case err := <-n.errc:
		_ = err // Start returns once Shutdown ran; that is the expected end
	case <-ctx.Done():
	}
	return errors.Join(errs...)
}

func (n *Node) shutdownDB() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	_ = shutdownWithin(n.db.Shutdown, n.cfg.ShutdownTimeout)
	select {
	case err := <-n.errc:
		_ = err // Start returns once Shutdown ran; that is the expected end
	case <-ctx.Done():
	}
}

// MemberlistPort is the gossip port the node bound.
func (n *Node) MemberlistPort() int { return n.cfg.MemberlistBindPort }

// RefreshRouting refetches partition owners now instead of at the next
// RoutingRefresh tick. Until the cluster client knows the current owners,
// its commands land on a former owner that runs them non-atomically, so
// callers that need exact counts (tests, after a join) refresh first.
func (n *Node) RefreshRouting(ctx context.Context) error { return n.cluster.RefreshMetadata(ctx) }

// errShutdownHung reports an Olric shutdown that outlived its bound.
var errShutdownHung = errors.New("olric shutdown did not return within its timeout")

// shutdownWithin runs an Olric shutdown and waits for it at most timeout.
// Olric v0.7.4's server Shutdown waits for its RESP listener to stop
// without looking at its context, and a listener closed in the instant
// before it starts serving never stops: a gateway whose node failed to
// start would then hang instead of exiting. Past the bound the shutdown
// is abandoned (its goroutine stays blocked; the process is about to exit
// or the node is gone anyway).
func shutdownWithin(shutdown func(context.Context) error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errShutdownHung
	}
}

// deadline is ctx's deadline; ctx always has one here (Shutdown sets it).
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
