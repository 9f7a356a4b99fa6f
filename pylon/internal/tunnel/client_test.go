package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// expectWait checks that the worker's next attempt comes exactly d after
// the previous one ended, on the fake clock, and returns that attempt. It
// relies on the only armed timers being the resolve loop's and the
// worker's backoff.
func expectWait(t *testing.T, clk *clock.Fake, hub *testHub, d time.Duration) *hubConn {
	t.Helper()
	clk.WaitForTimers(2)
	clk.Advance(d - time.Millisecond)
	if n := clk.Timers(); n != 2 {
		t.Fatalf("backoff timer fired before %v", d)
	}
	select {
	case <-hub.conns:
		t.Fatalf("reconnected before the %v backoff", d)
	default:
	}
	clk.Advance(time.Millisecond)
	return recv(t, hub.conns, fmt.Sprintf("the attempt after a %v backoff", d))
}

func TestReconnectBackoffDoublesToCap(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(int, protocol.Handshake) protocol.HandshakeAck {
		return refuse(protocol.CodeDraining)
	})
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour, Handler: http.NotFoundHandler()}, hub)
	recv(t, hub.conns, "the first attempt")
	for _, d := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		expectWait(t, clk, hub, d*time.Second)
	}
	if got := rc.c.Connected(); len(got) != 1 || got[hub.addr] {
		t.Fatalf("Connected() = %v; want the address listed as down", got)
	}
	if logs := rc.logs.String(); !contains(logs, "level=WARN", "hub refused the handshake", "code="+protocol.CodeDraining, "reason=\"test says no\"") {
		t.Fatalf("refusal not logged clearly:\n%s", logs)
	}
}

func TestReconnectBackoffResetsAfterLongConnection(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(n int, hs protocol.Handshake) protocol.HandshakeAck {
		switch n {
		case 4, 5:
			return accept(hs)
		}
		return refuse(protocol.CodeDuplicate)
	})
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour, Handler: http.NotFoundHandler()}, hub)
	recv(t, hub.conns, "attempt 1")
	expectWait(t, clk, hub, 1*time.Second)
	expectWait(t, clk, hub, 2*time.Second)
	hc := expectWait(t, clk, hub, 4*time.Second) // attempt 4: accepted
	if ev := recv(t, rc.states, "connected"); ev != (stateEvent{hub.addr, true}) {
		t.Fatalf("OnState %+v", ev)
	}
	if !rc.c.Connected()[hub.addr] {
		t.Fatal("Connected() does not report the live tunnel")
	}
	// 30 s is not long enough to count as stable: the backoff goes on.
	clk.Advance(30 * time.Second)
	_ = hc.cc.Close()
	if ev := recv(t, rc.states, "disconnected"); ev != (stateEvent{hub.addr, false}) {
		t.Fatalf("OnState %+v", ev)
	}
	hc = expectWait(t, clk, hub, 8*time.Second) // attempt 5: accepted
	recv(t, rc.states, "connected again")
	// More than 60 s up: the next wait starts again from 1 s.
	clk.Advance(61 * time.Second)
	_ = hc.cc.Close()
	recv(t, rc.states, "disconnected again")
	expectWait(t, clk, hub, 1*time.Second) // attempt 6: refused
	expectWait(t, clk, hub, 2*time.Second)
}

func TestTokenIsReadOnEveryDial(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(n int, hs protocol.Handshake) protocol.HandshakeAck {
		if hs.AuthToken != "token-2" {
			return refuse(protocol.CodeUnauthorized)
		}
		return accept(hs)
	})
	var mu sync.Mutex
	reads := 0
	token := func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads == 2 {
			return "", errors.New("token file is being rewritten")
		}
		return "token-" + strconv.Itoa(min(reads, 2)), nil
	}
	hs := protocol.Handshake{InferenceServerID: "p1", AuthToken: "ignored", HeartbeatMs: 100}
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour,
		Handler: http.NotFoundHandler(), Token: token, Handshake: hs}, hub)
	if hc := recv(t, hub.conns, "attempt 1"); hc.hs.AuthToken != "token-1" || hc.ack.Accepted {
		t.Fatalf("attempt 1 sent token %q (accepted %v); want token-1, refused", hc.hs.AuthToken, hc.ack.Accepted)
	}
	// Read 2 fails: no dial, just the next backoff.
	clk.WaitForTimers(2)
	clk.Advance(time.Second)
	hc := expectWait(t, clk, hub, 2*time.Second)
	if hc.hs.AuthToken != "token-2" || !hc.ack.Accepted {
		t.Fatalf("attempt 2 sent token %q (accepted %v); want the re-read token-2", hc.hs.AuthToken, hc.ack.Accepted)
	}
	if hc.hs.V != protocol.Version || hc.hs.InferenceServerID != "p1" || hc.hs.HeartbeatMs != 100 {
		t.Fatalf("handshake %+v", hc.hs)
	}
	logs := rc.logs.String()
	if !contains(logs, "level=ERROR", "hub refused the handshake", "code="+protocol.CodeUnauthorized) {
		t.Fatalf("an unauthorized refusal must be logged at error:\n%s", logs)
	}
	if !contains(logs, "token file is being rewritten") {
		t.Fatalf("token read failure not logged:\n%s", logs)
	}
	if contains(logs, "token-1") || contains(logs, "token-2") {
		t.Fatalf("a token leaked into the logs:\n%s", logs)
	}
}

func TestOneConnectionPerResolvedAddress(t *testing.T) {
	clk := clock.NewFake(epoch)
	ln1 := listen(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(ln1.Addr().String())
	ln2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2:%s: %v", port, err)
	}
	hub1 := startTestHub(t, ln1, func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	hub2 := startTestHub(t, ln2, func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	res := &staticResolver{}
	res.set("127.0.0.1", "127.0.0.2")
	snap := newSnapshot("p1")
	rc := startClient(t, Config{
		Addresses: []string{net.JoinHostPort("hubs.test", port)}, Resolver: res, Clock: clk,
		Handler: pylonHandler(snap, clk, nil),
	}, hub1, hub2)
	c1 := recv(t, hub1.conns, "a connection to hub 1")
	c2 := recv(t, hub2.conns, "a connection to hub 2")
	addr1, addr2 := hub1.addr, hub2.addr
	eventually(t, "both tunnels up", func() bool {
		c := rc.c.Connected()
		return len(c) == 2 && c[addr1] && c[addr2]
	})
	for _, hc := range []*hubConn{c1, c2} {
		resp, err := hc.get(t, "/echo")
		if err != nil {
			t.Fatalf("request over the tunnel: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "echo /echo" {
			t.Fatalf("got %q", b)
		}
	}
	// Hub 2 reads the registration stream: the first line comes at once.
	resp, err := c2.get(t, protocol.RegistrationPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("registration Content-Type %q", ct)
	}
	dec := json.NewDecoder(resp.Body)
	var first protocol.Registration
	if err := dec.Decode(&first); err != nil {
		t.Fatal(err)
	}
	if first.Seq != 1 || first.V != protocol.Version || first.InferenceServerID != "p1" {
		t.Fatalf("first registration %+v", first)
	}

	// The name now resolves to hub 1 only: hub 2's worker drains and stops.
	res.set("127.0.0.1")
	clk.WaitForTimers(2) // the resolve loop and hub 2's registration heartbeat
	clk.Advance(DefaultResolveInterval)
	var next protocol.Registration
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		t.Fatalf("hub 2's registration stream after the drain: %v (%+v); want a clean end", err, next)
	}
	eventually(t, "hub 2's connection to close", func() bool { return c2.cc.State().Closed })
	eventually(t, "Connected() to drop hub 2", func() bool {
		c := rc.c.Connected()
		return len(c) == 1 && c[addr1]
	})
	sawDown := false
	for len(rc.states) > 0 {
		if ev := <-rc.states; ev == (stateEvent{addr2, false}) {
			sawDown = true
		}
	}
	if !sawDown {
		t.Fatal("OnState never reported hub 2 down")
	}
	// Hub 1 is untouched: same connection, no new attempt.
	if resp, err := c1.get(t, "/echo"); err != nil {
		t.Fatalf("hub 1 after the re-resolve: %v", err)
	} else {
		resp.Body.Close()
	}
	if len(hub1.conns) != 0 {
		t.Fatal("hub 1 got a second connection")
	}
}

func TestResolveFailureKeepsConnections(t *testing.T) {
	clk := clock.NewFake(epoch)
	ln := listen(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hub := startTestHub(t, ln, func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	res := &failingResolver{}
	rc := startClient(t, Config{Addresses: []string{net.JoinHostPort("hub.test", port)}, Resolver: res, Clock: clk, Handler: http.NotFoundHandler()}, hub)
	recv(t, hub.conns, "the connection")
	recv(t, rc.states, "connected")
	res.fail.Store(true)
	clk.WaitForTimers(1)
	clk.Advance(DefaultResolveInterval)
	eventually(t, "the failed lookup to be logged", func() bool { return contains(rc.logs.String(), "keeping current connections") })
	if c := rc.c.Connected(); !c[hub.addr] {
		t.Fatalf("Connected() = %v after a failed lookup; the live tunnel must stay", c)
	}
}

type failingResolver struct{ fail atomic.Bool }

func (r *failingResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	if r.fail.Load() {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	return []string{"127.0.0.1"}, nil
}

func TestShutdownDrainsInFlightStreams(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	started, release := make(chan struct{}), make(chan struct{})
	snap := newSnapshot("p1")
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, Handler: pylonHandler(snap, clk, map[string]http.HandlerFunc{
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			_, _ = io.WriteString(w, "done")
		},
	})})
	hc := recv(t, hub.conns, "the connection")
	reg, err := hc.get(t, protocol.RegistrationPath)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Body.Close()
	lines := lineReader{json.NewDecoder(reg.Body)}
	lines.next(t)
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := hc.get(t, "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	recv(t, started, "the slow request")

	rc.cancel()
	if err := lines.dec.Decode(new(protocol.Registration)); !errors.Is(err, io.EOF) {
		t.Fatalf("registration stream on shutdown: %v; want a clean end", err)
	}
	eventually(t, "GOAWAY to reach the hub", func() bool { return !hc.cc.CanTakeNewRequest() })
	select {
	case <-rc.done:
		t.Fatal("Run returned with a stream still in flight")
	default:
	}
	close(release)
	if r := recv(t, res, "the in-flight response"); r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request during the drain: %q, %v", r.body, r.err)
	}
	err = recv(t, rc.done, "Run to return after the drain")
	rc.done <- err // for the cleanup
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	recv(t, rc.states, "connected")
	if ev := recv(t, rc.states, "disconnected"); ev.connected {
		t.Fatalf("last OnState %+v", ev)
	}
}

func TestShutdownDrainTimeoutCutsStuckStreams(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	started := make(chan struct{})
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, Handler: pylonHandler(newSnapshot("p1"), clk, map[string]http.HandlerFunc{
		"/stuck": func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		},
	})})
	hc := recv(t, hub.conns, "the connection")
	res := make(chan error, 1)
	go func() {
		resp, err := hc.get(t, "/stuck")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		res <- err
	}()
	recv(t, started, "the stuck request")
	rc.cancel()
	// Advance until the drain timer fires; the stream cannot end any other
	// way, so its failure proves the timeout cut it.
	var err error
	eventually(t, "the drain timeout to close the connection", func() bool {
		clk.Advance(DefaultDrainTimeout)
		select {
		case err = <-res:
			return true
		default:
			return false
		}
	})
	if err == nil {
		t.Fatal("the stuck request succeeded")
	}
	if !contains(rc.logs.String(), "drain timeout") {
		t.Fatal("drain timeout not logged")
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no handler":   {Addresses: []string{"127.0.0.1:1"}},
		"no addresses": {Handler: http.NotFoundHandler()},
		"no port":      {Addresses: []string{"hub"}, Handler: http.NotFoundHandler()},
	} {
		if err := New(cfg).Run(context.Background()); err == nil {
			t.Errorf("%s: Run succeeded", name)
		}
	}
}
