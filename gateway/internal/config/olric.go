package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/ratelimit"
	"github.com/stargate-router/stargate/pkg/cli"
)

// validate checks the Olric settings one field at a time, reads the
// shared secret, and, when the node is enabled, refuses addresses Olric
// cannot use and a node other hosts can reach without the secret.
func (o *Olric) validate(peers string) []error {
	var errs []error
	for p := range strings.SplitSeq(peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Peers = append(o.Peers, p)
		}
	}
	switch o.Env {
	case "local", "lan", "wan":
	default:
		errs = append(errs, fmt.Errorf("--olric-env (OLRIC_ENV) %q: want local, lan or wan", o.Env))
	}
	switch o.LogLevel {
	case "DEBUG", "INFO", "WARN", "ERROR":
	default:
		errs = append(errs, fmt.Errorf("--olric-log-level (OLRIC_LOG_LEVEL) %q: want DEBUG, INFO, WARN or ERROR", o.LogLevel))
	}
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New(msg))
		}
	}
	check(o.BindPort > 0 && o.BindPort < 65536, "--olric-bind-port (OLRIC_BIND_PORT) must be 1..65535 (Olric has no ephemeral ports)")
	check(o.MemberlistBindPort > 0 && o.MemberlistBindPort < 65536, "--olric-memberlist-bind-port (OLRIC_MEMBERLIST_BIND_PORT) must be 1..65535")
	check(o.ReplicaCount >= 1, "--olric-replica-count (OLRIC_REPLICA_COUNT) must be >= 1")
	check(o.ReadQuorum >= 1 && o.ReadQuorum <= max(o.ReplicaCount, 1), fmt.Sprintf(
		"--olric-read-quorum (OLRIC_READ_QUORUM) %d: must be 1..--olric-replica-count (OLRIC_REPLICA_COUNT) %d", o.ReadQuorum, o.ReplicaCount))
	check(o.WriteQuorum >= 1 && o.WriteQuorum <= max(o.ReplicaCount, 1), fmt.Sprintf(
		"--olric-write-quorum (OLRIC_WRITE_QUORUM) %d: must be 1..--olric-replica-count (OLRIC_REPLICA_COUNT) %d", o.WriteQuorum, o.ReplicaCount))
	switch o.ReplicationMode {
	case "sync", "async":
	default:
		errs = append(errs, fmt.Errorf("--olric-replication-mode (OLRIC_REPLICATION_MODE) %q: want sync or async", o.ReplicationMode))
	}
	check(o.PartitionCount >= 1, "--olric-partition-count (OLRIC_PARTITION_COUNT) must be >= 1")
	check(o.TableSize >= 1024, "--olric-table-size (OLRIC_TABLE_SIZE) must be >= 1024")
	check(o.StartupTimeout > 0, "--olric-startup-timeout (OLRIC_STARTUP_TIMEOUT) must be > 0")
	check(o.ShutdownTimeout > 0, "--olric-shutdown-timeout (OLRIC_SHUTDOWN_TIMEOUT) must be > 0")
	check(o.MaxJoinAttempts >= 1, "--olric-max-join-attempts (OLRIC_MAX_JOIN_ATTEMPTS) must be >= 1")
	check(o.JoinRetry > 0, "--olric-join-retry-interval (OLRIC_JOIN_RETRY_INTERVAL) must be > 0")
	check(o.RoutingRefresh > 0, "--olric-routing-refresh (OLRIC_ROUTING_REFRESH) must be > 0")
	check(o.ClientOpTimeout > 0, "--olric-client-timeout (OLRIC_CLIENT_TIMEOUT) must be > 0")
	check(o.LastClusterDMap != "", "--olric-last-cluster-dmap (OLRIC_LAST_CLUSTER_DMAP_NAME) must not be empty")
	check(o.RateLimitDMap != "", "--olric-dmap-name (OLRIC_DMAP_NAME) must not be empty")
	// The limiter's counters are created by an Incr, which cannot set a
	// TTL: the DMap gives them theirs (ratelimit.Olric says why).
	o.DMapTTL = map[string]time.Duration{o.RateLimitDMap: ratelimit.KeyTTL}
	if err := o.readSecret(); err != nil {
		errs = append(errs, err)
	}
	if o.Enabled {
		errs = append(errs, o.checkAddrs()...)
		errs = append(errs, o.checkAuth()...)
	}
	return errs
}

// readSecret reads the shared secret once, at startup, unlike the hub
// token: Olric fixes its password and gossip key when the node starts,
// so a rotated file could only take effect with a restart anyway.
func (o *Olric) readSecret() error {
	if o.AuthSecretFile == "" {
		return nil
	}
	s, err := cli.ReadSecretFile(o.AuthSecretFile)
	if err != nil {
		return fmt.Errorf("--olric-auth-secret-file (OLRIC_AUTH_SECRET_FILE): %w", err)
	}
	if len(s) < olricnode.MinSecretBytes {
		return fmt.Errorf("--olric-auth-secret-file (OLRIC_AUTH_SECRET_FILE) %s: the secret has %d bytes, want at least %d (e.g. openssl rand -hex 32)",
			o.AuthSecretFile, len(s), olricnode.MinSecretBytes)
	}
	o.AuthSecret = s
	return nil
}

// checkAddrs accepts only IP addresses that name one interface. Olric
// names a member after its data address and peers dial that name, so it
// cannot be a wildcard: given 0.0.0.0, Olric binds a private IP it picks
// itself. And a member bound to loopback cannot be reached by peers on
// other hosts, which discovery always returns.
func (o *Olric) checkAddrs() []error {
	var errs []error
	const local = "one IP address of this host (127.0.0.1 alone, the host's or pod's IP with peers)"
	for _, a := range []struct {
		flag, addr, want string
		optional         bool
	}{
		{"--olric-bind-addr (OLRIC_BIND_ADDR)", o.BindAddr, local, false},
		{"--olric-memberlist-bind-addr (OLRIC_MEMBERLIST_BIND_ADDR)", o.MemberlistBindAddr, local, false},
		{"--olric-memberlist-advertise-addr (OLRIC_MEMBERLIST_ADVERTISE_ADDR)", o.MemberlistAdvertiseAddr, "the one IP address peers reach this node at", true},
	} {
		if a.addr == "" && a.optional {
			continue
		}
		if ip := net.ParseIP(a.addr); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("%s %q: want %s; Olric names the member after its address and peers dial it, "+
				"so neither a wildcard nor a host name works", a.flag, a.addr, a.want))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	var remote []string
	if o.K8sService != "" {
		remote = append(remote, "--olric-k8s-service "+o.K8sService)
	}
	for _, p := range o.Peers {
		host, _, err := net.SplitHostPort(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("--olric-peers (OLRIC_PEERS) %q: want host:port", p))
		} else if !olricnode.IsLoopback(host) {
			remote = append(remote, "peer "+p)
		}
	}
	if len(remote) > 0 && (olricnode.IsLoopback(o.BindAddr) || olricnode.IsLoopback(o.MemberlistBindAddr)) {
		errs = append(errs, fmt.Errorf("--olric-bind-addr (OLRIC_BIND_ADDR) %s and --olric-memberlist-bind-addr (OLRIC_MEMBERLIST_BIND_ADDR) %s: "+
			"a member on loopback cannot be reached from %s; bind both to this host's or pod's IP",
			o.BindAddr, o.MemberlistBindAddr, strings.Join(remote, ", ")))
	}
	return errs
}

// checkAuth refuses a node that other processes can reach beyond this
// host's loopback without the shared secret, unless the operator says so
// explicitly: anyone who reaches an open node can rewrite any session's
// last cluster (steering its traffic) and any rate-limit counter.
func (o *Olric) checkAuth() []error {
	switch why := o.Exposure(); {
	case o.InsecureNoAuth && o.AuthSecret != "":
		return []error{errors.New("--olric-insecure-no-auth (OLRIC_INSECURE_NO_AUTH) contradicts --olric-auth-secret-file (OLRIC_AUTH_SECRET_FILE): give one")}
	case why != "" && o.AuthSecret == "" && !o.InsecureNoAuth:
		return []error{fmt.Errorf("olric: other processes can reach this node (%s) but --olric-auth-secret-file (OLRIC_AUTH_SECRET_FILE) is not set: "+
			"give every replica the same secret file, or --olric-insecure-no-auth (OLRIC_INSECURE_NO_AUTH) for development", why)}
	}
	return nil
}
