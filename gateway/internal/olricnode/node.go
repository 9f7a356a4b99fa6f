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
	K8sService string
	// ReplicaCount is how many members hold each partition: the owner and
	// ReplicaCount-1 backups. Olric keeps as many as there are members,
	// so a lone node still works with one copy.
	ReplicaCount int
	// ReadQuorum is how many copies a Get must find the key on to answer
	// it, WriteQuorum how many copies a Put must reach to succeed; 0 means
	// 1. Both apply to every DMap (Olric v0.7.4 has no per-DMap
	// replication settings). docs/reliability/session-store.md says why
	// the hint store wants 1 and 1.
	ReadQuorum, WriteQuorum int
	// ReplicationMode is "sync" (a Put returns once every backup took it;
	// the default when empty) or "async" (the owner returns after its own
	// write and sends the backups in the background).
	ReplicationMode string
	// ReadRepair has a Get that found copies with different timestamps
	// write the newest to the others before it answers.
	ReadRepair bool
	// DMapTTL gives the keys of the named DMaps that are written without
	// a TTL of their own (an Incr creating a counter) this TTL, set on the
	// partition owner in the write that creates them. The rate limiter
	// needs it: Olric's Incr cannot set a TTL, and its Expire blanks the
	// backup copies (ratelimit.Olric says how).
	DMapTTL         map[string]time.Duration
	PartitionCount  uint64
	TableSize       uint64
	StartupTimeout  time.Duration
	ShutdownTimeout time.Duration
	MaxJoinAttempts int
	JoinRetry       time.Duration
	RoutingRefresh  time.Duration
	ClientOpTimeout time.Duration
	LogLevel        string
	// AuthSecret is the secret every member of the cluster shares. Set,
	// the data port answers only connections that AUTH with Password(it)
	// (every client of this node sends it), and memberlist seals gossip
	// with a key derived from it, so a process without it can neither
	// read nor write entries nor join. Empty runs open, which the gateway
	// allows only for a node reachable on loopback alone (Exposure).
	AuthSecret string
	// CompactionInterval is how often Olric compacts the storage tables;
	// 0 keeps Olric's default (10 minutes). Tests shorten it.
	CompactionInterval time.Duration
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
// it started (joined, or formed a cluster alone after the join attempts)
// and the cluster client reached it. An error means the gateway must not
// serve: a node that cannot start within StartupTimeout is fatal, since
// serving without the shared state would silently split rate limits and
// hints per replica.
//
// Olric's Started callback uses process-global counters, so nodes in one
// process (tests) must be started one after another.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Node, error) {
	c, err := olricConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	peers, err := discover(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	c.Peers = peers
	// Discovery has its own bound (its attempts); the startup timeout
	// covers what follows: start, join and the cluster client.
	deadline := time.Now().Add(cfg.StartupTimeout)
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
	if err := n.waitStarted(ctx, ready, deadline); err != nil {
		return nil, err
	}
	n.embedded = db.NewEmbeddedClient()
	if n.cluster, err = dialCluster(ctx, cfg, n.self, deadline, log); err != nil {
		n.shutdownDB()
		return nil, err
	}
	return n, nil
}

// olricConfig translates cfg into Olric's configuration, peers aside.
func olricConfig(cfg Config, log *slog.Logger) (*config.Config, error) {
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
	c.ReadQuorum, c.WriteQuorum = max(cfg.ReadQuorum, 1), max(cfg.WriteQuorum, 1)
	mode, err := replicationMode(cfg.ReplicationMode)
	if err != nil {
		return nil, err
	}
	c.ReplicationMode, c.ReadRepair = mode, cfg.ReadRepair
	// MemberCountQuorum stays 1: above it, a member that sees fewer peers
	// refuses every DMap and, as coordinator, stops assigning the
	// partitions of dead members, so the survivors of a loss (or a lone
	// gateway) would lose every hint and rate limit instead of keeping
	// the copies they hold.
	c.MemberCountQuorum = 1
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
	// The engine is Olric's own (kvstore, which Sanitize builds from this
	// configuration) wrapped in compactingEngine, which every fragment's
	// engine inherits through Fork and which replaces kvstore's compaction
	// (engine.go says why).
	engine := config.NewEngine()
	engine.Config["tableSize"] = cfg.TableSize
	if err := engine.Sanitize(); err != nil {
		return nil, fmt.Errorf("olric storage engine: %w", err)
	}
	engine.Implementation = &compactingEngine{Engine: engine.Implementation, now: time.Now}
	c.DMaps.Engine = engine
	for name, ttl := range cfg.DMapTTL {
		if c.DMaps.Custom == nil {
			c.DMaps.Custom = map[string]config.DMap{}
		}
		c.DMaps.Custom[name] = config.DMap{TTLDuration: ttl, Engine: engine}
	}
	if cfg.CompactionInterval > 0 {
		c.DMaps.TriggerCompactionInterval = cfg.CompactionInterval
	}
	if cfg.AuthSecret != "" {
		c.Authentication = &config.Authentication{Password: Password(cfg.AuthSecret)}
		// memberlist builds its keyring from SecretKey and, with the
		// verify flags, drops unsealed packets instead of accepting them.
		c.MemberlistConfig.SecretKey = gossipKey(cfg.AuthSecret)
		c.MemberlistConfig.GossipVerifyIncoming, c.MemberlistConfig.GossipVerifyOutgoing = true, true
	} else if why := cfg.Exposure(); why != "" {
		log.Warn("olric runs without authentication although other processes can reach it: anyone who reaches its ports can rewrite rate-limit counters and last-cluster hints", "exposure", why)
	}
	return c, nil
}

// replicationMode maps the gateway's name of a replication mode to
// Olric's constant; "" is sync, Olric's default.
func replicationMode(name string) (int, error) {
	switch name {
	case "", "sync":
		return config.SyncReplicationMode, nil
	case "async":
		return config.AsyncReplicationMode, nil
	}
	return 0, fmt.Errorf("olric replication mode %q: want sync or async", name)
}

// waitStarted waits for Olric's Started callback, a Start error, the
// startup deadline or ctx, and takes the node down on all but the first.
func (n *Node) waitStarted(ctx context.Context, ready <-chan struct{}, deadline time.Time) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case err := <-n.errc:
		// Start errors (port in use) never fire Started, and may leave
		// the listeners that did bind running.
		_ = shutdownWithin(n.db.Shutdown, n.cfg.ShutdownTimeout)
		return fmt.Errorf("olric start on %s:%d / memberlist %d: %w", n.cfg.BindAddr, n.cfg.BindPort, n.cfg.MemberlistBindPort, err)
	case <-timer.C:
		n.shutdownDB()
		return fmt.Errorf("olric did not start within --olric-startup-timeout %s", n.cfg.StartupTimeout)
	case <-ctx.Done():
		n.shutdownDB()
		return ctx.Err()
	}
}

// dialCluster connects the cluster client to the node at self, retried
// every JoinRetry until the startup deadline. self is the address the data
// listener bound, as Olric resolved it, never the configured one (Olric
// replaces a wildcard by a private IP it picks, so dialling loopback there
// found nothing and the gateway could not start). Retried because members
// that start together are still exchanging routing tables when Started
// fires, and the node may then not answer the client's first commands
// within ClientOpTimeout: seen as "i/o timeout" with three gateways
// started at once on a loaded 2-core machine. A failed attempt leaves its
// few sockets to the node open (Olric returns no client to close them),
// bounded by the number of attempts.
func dialCluster(ctx context.Context, cfg Config, self string, deadline time.Time, log *slog.Logger) (*olric.ClusterClient, error) {
	cc := config.NewClient()
	cc.DialTimeout, cc.ReadTimeout, cc.WriteTimeout = cfg.ClientOpTimeout, cfg.ClientOpTimeout, cfg.ClientOpTimeout
	// No client retries: a retried Incr after a timeout could count twice.
	cc.MaxRetries = -1
	opts := []olric.ClusterClientOption{olric.WithConfig(cc), olric.WithRoutingTableFetchInterval(cfg.RoutingRefresh),
		olric.WithLogger(slog.NewLogLogger(log.With("component", "olric-client").Handler(), slog.LevelWarn))}
	if cfg.AuthSecret != "" {
		opts = append(opts, olric.WithPassword(Password(cfg.AuthSecret)))
	}
	for attempt := 1; ; attempt++ {
		cl, err := olric.NewClusterClient([]string{self}, opts...)
		if err == nil {
			return cl, nil
		}
		if time.Until(deadline) < cfg.JoinRetry {
			return nil, fmt.Errorf("olric cluster client to %s, %d attempts within --olric-startup-timeout %s: %w",
				self, attempt, cfg.StartupTimeout, err)
		}
		log.Warn("olric cluster client cannot reach its node yet; retrying", "addr", self, "attempt", attempt, "err", err)
		t := time.NewTimer(cfg.JoinRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
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

// DataAddr is the host:port the data (RESP) listener bound and peers
// dial: the member's name in the cluster.
func (n *Node) DataAddr() string { return n.self }

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
