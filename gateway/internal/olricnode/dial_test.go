package olricnode_test

// Named to sort before node_test.go: see auth_test.go.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/olricnode/olrictest"
)

// stallProxy forwards connections to target, except the first stall
// ones, which it accepts and never answers: a node busy exchanging
// routing tables with members that started with it, as seen from a
// client with a read timeout.
type stallProxy struct {
	ln      net.Listener
	mu      sync.Mutex
	stall   int
	stalled int
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string, stall int) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, stall: stall}
	go p.serve(target)
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		stall := p.stalled < p.stall
		if stall {
			p.stalled++
		}
		p.mu.Unlock()
		if stall {
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

func (p *stallProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *stallProxy) stalledConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// syncWriter lets the client's log lines be read after the dial.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestDialClusterRetriesASilentNode: a node that accepts the cluster
// client's connection but does not answer within the client timeout (as
// right after Started, while members that started together still settle
// their routing tables) is dialled again after JoinRetry instead of
// failing the gateway's startup; the client then works.
func TestDialClusterRetriesASilentNode(t *testing.T) {
	n := olrictest.Start(t, nil)
	proxy := newStallProxy(t, n.DataAddr(), 1)
	cfg := olrictest.Config(nil)
	var logs syncWriter
	ctx := context.Background()
	cl, err := olricnode.DialCluster(ctx, cfg, proxy.ln.Addr().String(), time.Now().Add(cfg.StartupTimeout),
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("dial through a node silent on its first connection: %v", err)
	}
	defer func() { _ = cl.Close(ctx) }()
	if proxy.stalledConns() != 1 || !strings.Contains(logs.String(), "retrying") {
		t.Fatalf("stalled %d connections, log %q: want one stall and a retry", proxy.stalledConns(), logs.String())
	}
	dm, err := cl.NewDMap("t")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := dm.Incr(ctx, "k", 2); err != nil || v != 2 {
		t.Fatalf("incr = %d, %v; want 2", v, err)
	}
}

// TestDialClusterGivesUpAtTheDeadline: a node that never answers fails
// the dial once the startup deadline leaves no room for another attempt.
func TestDialClusterGivesUpAtTheDeadline(t *testing.T) {
	n := olrictest.Start(t, nil)
	proxy := newStallProxy(t, n.DataAddr(), 1<<20)
	cfg := olrictest.Config(nil)
	start := time.Now()
	_, err := olricnode.DialCluster(context.Background(), cfg, proxy.ln.Addr().String(), start.Add(time.Second),
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "attempts within --olric-startup-timeout") {
		t.Fatalf("err = %v, want the attempts named", err)
	}
	if proxy.stalledConns() < 2 {
		t.Fatalf("%d attempts, want at least 2 within the deadline", proxy.stalledConns())
	}
}
