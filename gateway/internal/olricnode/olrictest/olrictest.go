// Package olrictest starts small embedded Olric clusters on loopback for
// tests of the packages that use olricnode. Olric has no ephemeral ports,
// so it picks free ports itself and retries a node that lost one.
package olrictest

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
)

// Secret is the shared secret of the test nodes: they authenticate as a
// deployed gateway does, so every test that uses them covers it.
const Secret = "olrictest-shared-secret-0123456789abcdef"

// Config returns test settings for one node: loopback, the test Secret,
// the gateway's replication defaults (two copies, quorums of 1, sync),
// small tables, quick join attempts, WARN logs discarded.
func Config(peers []string) olricnode.Config {
	return olricnode.Config{
		Env: "local", BindAddr: "127.0.0.1", MemberlistBindAddr: "127.0.0.1",
		Peers: peers, ReplicaCount: 2, ReadQuorum: 1, WriteQuorum: 1, ReplicationMode: "sync",
		PartitionCount: 23, TableSize: 1 << 14,
		StartupTimeout: 20 * time.Second, ShutdownTimeout: 5 * time.Second,
		MaxJoinAttempts: 3, JoinRetry: 200 * time.Millisecond, RoutingRefresh: 200 * time.Millisecond,
		ClientOpTimeout: 500 * time.Millisecond, LogLevel: "ERROR", AuthSecret: Secret,
	}
}

// FreePort returns a loopback TCP port that was free a moment ago and
// whose UDP twin was free too (memberlist uses both).
func FreePort(t testing.TB) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = ln.Close()
		if err == nil {
			_ = pc.Close()
			return port
		}
	}
}

// Node is a started test node and its memberlist address.
type Node struct {
	*olricnode.Node
	Gossip string
}

// Cluster starts n nodes one after another (Olric's Started callback uses
// process-global counters), each joining the first. Nodes are shut down
// when the test ends unless the test already did.
func Cluster(t testing.TB, n int) []*Node {
	t.Helper()
	var out []*Node
	var seed []string
	for range n {
		nd := Start(t, seed)
		if seed == nil {
			seed = []string{nd.Gossip}
		}
		out = append(out, nd)
	}
	WaitMembers(t, out, n)
	return out
}

// WaitMembers polls until every node sees want members: membership
// gossip reaches earlier nodes a little after a later node's start.
func WaitMembers(t testing.TB, nodes []*Node, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, nd := range nodes {
		for {
			m, err := nd.Members(context.Background())
			if err == nil && m == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s sees %d members (%v), want %d", nd.Gossip, m, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, nd := range nodes {
		if err := nd.RefreshRouting(context.Background()); err != nil {
			t.Fatalf("refreshing routing: %v", err)
		}
	}
}

// Start starts one node joining peers.
func Start(t testing.TB, peers []string) *Node {
	t.Helper()
	return StartWith(t, Config(peers))
}

// StartWith starts one node with cfg on free ports.
func StartWith(t testing.TB, base olricnode.Config) *Node {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	for attempt := 1; ; attempt++ {
		cfg := base
		cfg.BindPort, cfg.MemberlistBindPort = FreePort(t), FreePort(t)
		nd, err := olricnode.Start(context.Background(), cfg, log)
		if err != nil {
			if attempt < 5 && strings.Contains(err.Error(), "in use") {
				continue
			}
			t.Fatalf("starting olric node: %v", err)
		}
		node := &Node{Node: nd, Gossip: net.JoinHostPort(cfg.MemberlistBindAddr, strconv.Itoa(cfg.MemberlistBindPort))}
		t.Cleanup(func() { _ = nd.Shutdown(context.Background()) })
		return node
	}
}
