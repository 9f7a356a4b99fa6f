package olricnode_test

// This file's name sorts before node_test.go on purpose: its tests start
// nodes, and TestStartFailsOnPortInUse (which leaves Olric's process-global
// startup checkpoints unusable) must run last.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/olric-data/olric"
	"github.com/olric-data/olric/config"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// resp is a bare RESP connection: what anyone who reaches the data port
// can open, with no Olric client in between.
type resp struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *resp {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// A bound, not a synchronisation: a node that never answers fails
	// the test instead of hanging it.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &resp{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// do sends one command and returns the first line of the reply.
func (c *resp) do(args ...string) string {
	c.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		c.t.Fatal(err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimRight(line, "\r\n")
}

// TestDataPortRequiresTheSecret: on a node with a secret, a raw RESP
// connection can neither write nor read until it sends AUTH with the
// password derived from that secret; a wrong password changes nothing;
// the right one lets it through. Olric clients without the password, or
// with another secret's, cannot even connect.
func TestDataPortRequiresTheSecret(t *testing.T) {
	n := olrictest.Start(t, nil)
	c := dialRESP(t, n.DataAddr())
	for _, cmd := range [][]string{{"DM.PUT", "stargate-last-cluster", "k", "cluster-x"}, {"DM.GET", "rate-limit", "k"}, {"PING"}} {
		if got := c.do(cmd...); !strings.HasPrefix(got, "-NOAUTH") {
			t.Fatalf("%s without AUTH answered %q, want -NOAUTH", cmd[0], got)
		}
	}
	if got := c.do("AUTH", olrictest.Secret); !strings.HasPrefix(got, "-") {
		t.Fatalf("AUTH with the raw secret answered %q, want an error (the password is derived)", got)
	}
	if got := c.do("AUTH", olricnode.Password("another-secret-of-at-least-32-bytes!")); !strings.HasPrefix(got, "-") {
		t.Fatalf("AUTH with a wrong password answered %q, want an error", got)
	}
	if got := c.do("DM.PUT", "stargate-last-cluster", "k", "cluster-x"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("DM.PUT after a failed AUTH answered %q, want -NOAUTH", got)
	}
	if got := c.do("AUTH", olricnode.Password(olrictest.Secret)); got != "+OK" {
		t.Fatalf("AUTH with the derived password answered %q, want +OK", got)
	}
	if got := c.do("DM.PUT", "stargate-last-cluster", "k", "cluster-x"); got != "+OK" {
		t.Fatalf("DM.PUT after AUTH answered %q, want +OK", got)
	}

	for name, opts := range map[string][]olric.ClusterClientOption{
		"no password":    nil,
		"wrong password": {olric.WithPassword(olricnode.Password("another-secret-of-at-least-32-bytes!"))},
	} {
		cc := config.NewClient()
		cc.MaxRetries = -1
		cl, err := olric.NewClusterClient([]string{n.DataAddr()}, append(opts, olric.WithConfig(cc))...)
		if err == nil {
			_ = cl.Close(context.Background())
			t.Errorf("a cluster client with %s connected", name)
		}
	}
}

// TestOutsiderCannotJoin: a node with another secret, or none, that
// names a secured node as its peer cannot join (memberlist drops its
// unsealed or wrongly sealed gossip): it ends up alone after its join
// attempts, and nothing written on either side is seen on the other.
func TestOutsiderCannotJoin(t *testing.T) {
	ctx := context.Background()
	member := olrictest.Start(t, nil)
	for name, secret := range map[string]string{"wrong secret": "another-secret-of-at-least-32-bytes!", "no secret": ""} {
		t.Run(name, func(t *testing.T) {
			cfg := olrictest.Config([]string{member.Gossip})
			cfg.AuthSecret = secret
			outsider := olrictest.StartWith(t, cfg)
			for who, n := range map[string]*olrictest.Node{"member": member, "outsider": outsider} {
				if m, err := n.Members(ctx); err != nil || m != 1 {
					t.Fatalf("%s sees %d members (%v), want 1", who, m, err)
				}
			}
			in, _ := member.Embedded().NewDMap("stargate-last-cluster")
			out, _ := outsider.Embedded().NewDMap("stargate-last-cluster")
			if err := out.Put(ctx, "session", "cluster-evil", olric.EX(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Get(ctx, "session"); !errors.Is(err, olric.ErrKeyNotFound) {
				t.Fatalf("the member sees the outsider's write: %v", err)
			}
			if err := in.Put(ctx, "secret-session", "cluster-a", olric.EX(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if _, err := out.Get(ctx, "secret-session"); !errors.Is(err, olric.ErrKeyNotFound) {
				t.Fatalf("the outsider reads the member's entry: %v", err)
			}
			if err := outsider.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPasswordIsStable: the derived password is a fixed function of the
// secret, the one docs/gateway.md#olric-authentication reproduces with openssl;
// a change would split a rolling update into two clusters.
func TestPasswordIsStable(t *testing.T) {
	const want = "15b0bdfbcb0d6f40bb594d0f604b1fb2ed0589d8d052401a8e55a831488f0720"
	if got := olricnode.Password("loopback-test-shared-secret-0123456789abcdef"); got != want {
		t.Fatalf("Password = %s, want %s", got, want)
	}
}
