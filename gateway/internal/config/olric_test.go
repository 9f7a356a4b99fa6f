package config

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/olric-data/olric"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// TestOlricDefaultsStart: OLRIC_ENABLED=true with every other Olric
// setting at its default (only the ports moved to free ones, since Olric
// has no ephemeral ports) starts a node whose embedded and cluster clients
// both work. Every other test sets 127.0.0.1 itself, so only this one
// sees what an operator gets from the defaults.
func TestOlricDefaultsStart(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true", "OLRIC_ENABLED": "true",
		"OLRIC_BIND_PORT":            strconv.Itoa(olrictest.FreePort(t)),
		"OLRIC_MEMBERLIST_BIND_PORT": strconv.Itoa(olrictest.FreePort(t)),
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := olricnode.Start(ctx, c.Olric.Config, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("the default Olric configuration does not start: %v", err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	rl, err := n.Cluster().NewDMap(c.Olric.RateLimitDMap)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rl.Incr(ctx, "k", 3); err != nil || v != 3 {
		t.Fatalf("cluster client Incr = %d, %v; want 3", v, err)
	}
	lc, err := n.Embedded().NewDMap(c.Olric.LastClusterDMap)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Put(ctx, "s", "cluster-a", olric.EX(time.Minute)); err != nil {
		t.Fatalf("embedded Put: %v", err)
	}
}

// TestOlricExposureNeedsTheSecret: an enabled node that is more than one
// process on loopback (peers, discovery, an address off loopback) starts
// only with the shared secret or the explicit insecure flag; addresses
// Olric cannot use are refused with the flag at fault; the secret is read
// from its file, trimmed, and never echoed.
func TestOlricExposureNeedsTheSecret(t *testing.T) {
	dir := t.TempDir()
	const secret = "0123456789abcdef0123456789abcdef-shared"
	good := filepath.Join(dir, "secret")
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(good, []byte(secret+"\n"), 0o600)
	_ = os.WriteFile(short, []byte("short-secret-value\n"), 0o600)
	on := func(kv ...string) map[string]string {
		m := map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true", "OLRIC_ENABLED": "true"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" = accepted
	}{
		{"defaults: loopback alone", on(), ""},
		{"loopback peers without secret", on("OLRIC_PEERS", "127.0.0.1:7946"), "OLRIC_AUTH_SECRET_FILE"},
		{"loopback peers with secret", on("OLRIC_PEERS", "127.0.0.1:7946", "OLRIC_AUTH_SECRET_FILE", good), ""},
		{"loopback peers, insecure", on("OLRIC_PEERS", "127.0.0.1:7946", "OLRIC_INSECURE_NO_AUTH", "true"), ""},
		{"pod IP without secret", on("OLRIC_BIND_ADDR", "10.1.2.3", "OLRIC_MEMBERLIST_BIND_ADDR", "10.1.2.3"), "the data listener is 10.1.2.3"},
		{"pod IP, discovery, secret", on("OLRIC_BIND_ADDR", "10.1.2.3", "OLRIC_MEMBERLIST_BIND_ADDR", "10.1.2.3",
			"OLRIC_K8S_SERVICE", "gw-olric.ns.svc.cluster.local", "OLRIC_AUTH_SECRET_FILE", good), ""},
		{"advertised off loopback without secret", on("OLRIC_MEMBERLIST_ADVERTISE_ADDR", "203.0.113.7"), "the advertised address is 203.0.113.7"},
		{"wildcard data address", on("OLRIC_BIND_ADDR", "0.0.0.0", "OLRIC_AUTH_SECRET_FILE", good), "--olric-bind-addr (OLRIC_BIND_ADDR) \"0.0.0.0\""},
		{"wildcard gossip address", on("OLRIC_MEMBERLIST_BIND_ADDR", "::", "OLRIC_AUTH_SECRET_FILE", good), "--olric-memberlist-bind-addr (OLRIC_MEMBERLIST_BIND_ADDR) \"::\""},
		{"host name", on("OLRIC_BIND_ADDR", "gateway-0", "OLRIC_AUTH_SECRET_FILE", good), "neither a wildcard nor a host name"},
		{"discovery on loopback", on("OLRIC_K8S_SERVICE", "gw-olric", "OLRIC_AUTH_SECRET_FILE", good), "cannot be reached from --olric-k8s-service gw-olric"},
		{"remote peer on loopback", on("OLRIC_PEERS", "10.0.0.9:3322", "OLRIC_AUTH_SECRET_FILE", good), "cannot be reached from peer 10.0.0.9:3322"},
		{"peer without port", on("OLRIC_PEERS", "10.0.0.9", "OLRIC_AUTH_SECRET_FILE", good), "--olric-peers (OLRIC_PEERS) \"10.0.0.9\""},
		{"short secret", on("OLRIC_AUTH_SECRET_FILE", short), "has 18 bytes, want at least 32"},
		{"missing secret file", on("OLRIC_AUTH_SECRET_FILE", filepath.Join(dir, "nope")), "--olric-auth-secret-file (OLRIC_AUTH_SECRET_FILE)"},
		{"secret and insecure", on("OLRIC_AUTH_SECRET_FILE", good, "OLRIC_INSECURE_NO_AUTH", "true"), "contradicts"},
		{"disabled: no address checks", map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true", "OLRIC_BIND_ADDR": "0.0.0.0", "OLRIC_PEERS": "a:1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(nil, env(tc.env), io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			case err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short-secret-value")):
				t.Fatalf("the error echoes the secret: %v", err)
			case err == nil && tc.env["OLRIC_AUTH_SECRET_FILE"] == good && c.Olric.AuthSecret != secret:
				t.Fatalf("secret %q, want the file's content trimmed", c.Olric.AuthSecret)
			}
		})
	}
}

// TestOlricReplicationSettings: the defaults replicate every partition
// once (two copies) with quorums of 1 in sync mode, and each replication
// setting is refused with its flag named when it is out of range.
func TestOlricReplicationSettings(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Olric; o.ReplicaCount != 2 || o.ReadQuorum != 1 || o.WriteQuorum != 1 || o.ReplicationMode != "sync" || o.ReadRepair {
		t.Fatalf("defaults: replicas %d, read quorum %d, write quorum %d, mode %q, read repair %v; want 2, 1, 1, sync, false",
			o.ReplicaCount, o.ReadQuorum, o.WriteQuorum, o.ReplicationMode, o.ReadRepair)
	}
	if ttl := c.Olric.DMapTTL[c.Olric.RateLimitDMap]; ttl != 2*time.Minute {
		t.Fatalf("rate-limit DMap TTL %v, want two windows", ttl)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" = accepted
	}{
		{"three copies, quorum 2", map[string]string{"OLRIC_REPLICA_COUNT": "3", "OLRIC_READ_QUORUM": "2", "OLRIC_WRITE_QUORUM": "2"}, ""},
		{"async with read repair", map[string]string{"OLRIC_REPLICATION_MODE": "async", "OLRIC_READ_REPAIR": "true"}, ""},
		{"no backup", map[string]string{"OLRIC_REPLICA_COUNT": "1"}, ""},
		{"read quorum above replicas", map[string]string{"OLRIC_REPLICA_COUNT": "1", "OLRIC_READ_QUORUM": "2"},
			"--olric-read-quorum (OLRIC_READ_QUORUM) 2: must be 1..--olric-replica-count (OLRIC_REPLICA_COUNT) 1"},
		{"write quorum above replicas", map[string]string{"OLRIC_WRITE_QUORUM": "3"}, "--olric-write-quorum (OLRIC_WRITE_QUORUM) 3"},
		{"read quorum 0", map[string]string{"OLRIC_READ_QUORUM": "0"}, "--olric-read-quorum (OLRIC_READ_QUORUM) 0"},
		{"write quorum 0", map[string]string{"OLRIC_WRITE_QUORUM": "0"}, "--olric-write-quorum (OLRIC_WRITE_QUORUM) 0"},
		{"replica count 0", map[string]string{"OLRIC_REPLICA_COUNT": "0"}, "--olric-replica-count (OLRIC_REPLICA_COUNT) must be >= 1"},
		{"unknown mode", map[string]string{"OLRIC_REPLICATION_MODE": "eventual"}, `--olric-replication-mode (OLRIC_REPLICATION_MODE) "eventual"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["GATEWAY_INSECURE_NO_AUTH"] = "true"
			_, err := Load(nil, env(tc.env), io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
