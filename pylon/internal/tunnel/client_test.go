package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
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

// schedule restates the reconnect rule independently of backoff: each
// wait is uniform between InitialBackoff and three times the previous one
// (InitialBackoff before the first), capped at MaxBackoff. Built on a
// generator seeded like the client's, it predicts the client's waits.
type schedule struct {
	rng  *rand.Rand
	prev time.Duration
}

func newSchedule(seed uint64) (*schedule, *rand.Rand) {
	return &schedule{rng: rand.New(rand.NewPCG(seed, seed))}, rand.New(rand.NewPCG(seed, seed))
}

func (s *schedule) next(t *testing.T) time.Duration {
	t.Helper()
	hi := 3 * InitialBackoff
	if s.prev > 0 {
		hi = 3 * s.prev
	}
	d := InitialBackoff + time.Duration(s.rng.Float64()*float64(hi-InitialBackoff))
	d = min(d, MaxBackoff)
	if d < InitialBackoff || d > MaxBackoff || (s.prev > 0 && d > 3*s.prev) {
		t.Fatalf("wait %v after %v breaks the rule", d, s.prev)
	}
	s.prev = d
	return d
}

func (s *schedule) reset() { s.prev = 0 }

func TestReconnectBackoffIsJitteredAndCapped(t *testing.T) {
	clk := clock.NewFake(epoch)
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(int, protocol.Handshake) protocol.HandshakeAck {
		return refuse(protocol.CodeDraining)
	})
	sched, rng := newSchedule(7)
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour, Handler: http.NotFoundHandler(), Rand: rng}, hub)
	recv(t, hub.conns, "the first attempt")
	var waits []time.Duration
	for range 12 {
		d := sched.next(t)
		waits = append(waits, d)
		expectWait(t, clk, hub, d)
	}
	// The schedule grows from about a second to the cap and stays there,
	// and the waits are not a fixed sequence.
	if waits[0] >= 3*InitialBackoff || slices.Max(waits) != MaxBackoff || waits[len(waits)-1] < InitialBackoff {
		t.Fatalf("waits %v", waits)
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
	sched, rng := newSchedule(11)
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour, Handler: http.NotFoundHandler(), Rand: rng}, hub)
	recv(t, hub.conns, "attempt 1")
	expectWait(t, clk, hub, sched.next(t))
	expectWait(t, clk, hub, sched.next(t))
	hc := expectWait(t, clk, hub, sched.next(t)) // attempt 4: accepted
	if ev := recv(t, rc.states, "connected"); ev != (stateEvent{hub.addr, true}) {
		t.Fatalf("OnState %+v", ev)
	}
	if !rc.c.Connected()[hub.addr] {
		t.Fatal("Connected() does not report the live tunnel")
	}
	// 30 s is not long enough to count as stable: the schedule goes on.
	clk.Advance(30 * time.Second)
	_ = hc.cc.Close()
	if ev := recv(t, rc.states, "disconnected"); ev != (stateEvent{hub.addr, false}) {
		t.Fatalf("OnState %+v", ev)
	}
	hc = expectWait(t, clk, hub, sched.next(t)) // attempt 5: accepted
	recv(t, rc.states, "connected again")
	// More than 60 s up: the next wait starts over from the first range.
	clk.Advance(61 * time.Second)
	_ = hc.cc.Close()
	recv(t, rc.states, "disconnected again")
	sched.reset()
	first := sched.next(t)
	if first >= 3*InitialBackoff {
		t.Fatalf("first wait after a stable connection %v", first)
	}
	expectWait(t, clk, hub, first) // attempt 6: refused
	expectWait(t, clk, hub, sched.next(t))
}

// TestReconnectAfterHubRestartIsSpread: 20 pylons (20 clients, each with
// its own random source, as 20 processes have) lose their tunnels in the
// same instant when the hub restarts; the hub refuses every attempt for
// 40 s, then accepts. Their attempts must not come in lockstep, none may
// come sooner than InitialBackoff, and every pylon must be back within
// MaxBackoff of the hub's return. The fake clock moves in 10 ms steps and
// each step settles (every pylon either connected or waiting on its
// backoff timer) before the next, so each attempt is stamped with the
// step it belongs to.
func TestReconnectAfterHubRestartIsSpread(t *testing.T) {
	const (
		pylons  = 20
		downFor = 40 * time.Second
		step    = 10 * time.Millisecond
		bucket  = 100 * time.Millisecond
	)
	clk := clock.NewFake(epoch)
	var (
		mu        sync.Mutex
		up        = true
		restartAt time.Time
		attempts  []time.Duration // since the restart
	)
	drained := make(chan struct{})
	t.Cleanup(func() { close(drained) })
	hub := startTestHub(t, listen(t, "127.0.0.1:0"), func(_ int, hs protocol.Handshake) protocol.HandshakeAck {
		mu.Lock()
		defer mu.Unlock()
		if !restartAt.IsZero() {
			attempts = append(attempts, clk.Now().Sub(restartAt))
		}
		if up {
			return accept(hs)
		}
		return refuse(protocol.CodeDraining)
	})
	go func() { // nobody reads the attempts one by one here
		for {
			select {
			case <-hub.conns:
			case <-drained:
				return
			}
		}
	}()
	var connected atomic.Int32
	stateChanged := make(chan struct{}, 1)
	for i := range pylons {
		startClient(t, Config{
			Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour, Handler: http.NotFoundHandler(),
			Handshake: protocol.Handshake{InferenceServerID: fmt.Sprintf("p%d", i), HeartbeatMs: 1000},
			Rand:      rand.New(rand.NewPCG(uint64(i), 2026)),
			OnState: func(_ string, up bool) {
				if up {
					connected.Add(1)
				} else {
					connected.Add(-1)
				}
				select {
				case stateChanged <- struct{}{}:
				default:
				}
			},
		}, hub)
	}
	// Settled: each pylon has its resolve timer and is either connected or
	// has its backoff timer armed; a pylon between the two is mid-attempt.
	// want, when set, must also hold (the drop is seen asynchronously).
	settle := func(want func() bool) {
		t.Helper()
		deadline := time.After(waitTimeout)
		for {
			timers := clk.Changed()
			if clk.Timers()+int(connected.Load()) == 2*pylons && (want == nil || want()) {
				return
			}
			select {
			case <-timers:
			case <-stateChanged:
			case <-hub.listed:
			case <-deadline:
				t.Fatalf("pylons never settled: %d timers, %d connected", clk.Timers(), connected.Load())
			}
		}
	}
	// The hub lists a connection just after the pylon sees its ack; only
	// a listed one is dropped by the restart.
	settle(func() bool { return connected.Load() == pylons && hub.openConns() == pylons })
	if n := connected.Load(); n != pylons {
		t.Fatalf("%d of %d pylons connected before the restart", n, pylons)
	}

	mu.Lock()
	up, restartAt = false, clk.Now()
	mu.Unlock()
	hub.dropAll()
	settle(func() bool { return connected.Load() == 0 })
	var backAfter []time.Duration // since the hub's return, per pylon
	var returned time.Time
	for elapsed := time.Duration(0); connected.Load() < pylons; elapsed += step {
		if elapsed == downFor {
			mu.Lock()
			up, returned = true, clk.Now()
			mu.Unlock()
		}
		if elapsed > downFor+time.Minute { // a hang guard; the bound is checked below
			t.Fatalf("%d of %d pylons back %v after the hub returned", connected.Load(), pylons, elapsed-downFor)
		}
		before := connected.Load()
		clk.Advance(step)
		settle(nil)
		for range connected.Load() - before {
			backAfter = append(backAfter, clk.Now().Sub(returned))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	perBucket := map[time.Duration]int{}
	worst := 0
	for _, a := range attempts {
		if a < InitialBackoff {
			t.Errorf("an attempt %v after the restart; none may come before %v", a, InitialBackoff)
		}
		perBucket[a/bucket]++
		worst = max(worst, perBucket[a/bucket])
	}
	last := slices.Max(backAfter)
	t.Logf("%d pylons, hub down %v: %d attempts, at most %d in one %v; all back %v after the hub returned (median %v)",
		pylons, downFor, len(attempts), worst, bucket, last, backAfter[len(backAfter)/2])
	if worst > pylons/4 {
		t.Errorf("%d attempts in one %v: the pylons retry in lockstep", worst, bucket)
	}
	if last > MaxBackoff+step {
		t.Errorf("the last pylon came back %v after the hub returned; the bound is %v", last, MaxBackoff)
	}
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
	sched, rng := newSchedule(3)
	hs := protocol.Handshake{InferenceServerID: "p1", AuthToken: "ignored", HeartbeatMs: 100}
	rc := startClient(t, Config{Addresses: []string{hub.addr}, Clock: clk, ResolveInterval: 24 * time.Hour,
		Handler: http.NotFoundHandler(), Token: token, AllowPlaintextToken: true, Handshake: hs, Rand: rng}, hub)
	if hc := recv(t, hub.conns, "attempt 1"); hc.hs.AuthToken != "token-1" || hc.ack.Accepted {
		t.Fatalf("attempt 1 sent token %q (accepted %v); want token-1, refused", hc.hs.AuthToken, hc.ack.Accepted)
	}
	// Read 2 fails: no dial, just the next backoff.
	clk.WaitForTimers(2)
	clk.Advance(sched.next(t))
	hc := expectWait(t, clk, hub, sched.next(t))
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

// TestTokenNeedsTLSOrPermission: the pylon writes its handshake first, so
// a token on a plaintext connection goes to whoever answers at the hub
// address. Without TLS and without AllowPlaintextToken the client refuses
// to start, and no connection is made.
func TestTokenNeedsTLSOrPermission(t *testing.T) {
	ln := listen(t, "127.0.0.1:0")
	defer ln.Close()
	dialed := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			dialed <- struct{}{}
			_ = c.Close()
		}
	}()
	c := New(Config{Addresses: []string{ln.Addr().String()}, Handler: http.NotFoundHandler(),
		Token: func() (string, error) { return "s3cret", nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !contains(err.Error(), "plaintext", "AllowPlaintextToken") {
			t.Fatalf("Run: %v; want a refusal to send the token in plaintext", err)
		}
	case <-dialed:
		t.Fatal("the client dialed a plaintext hub with a token")
	case <-time.After(waitTimeout):
		cancel()
		<-done
		t.Fatal("Run started with a token and no TLS")
	}
}

func TestOneConnectionPerResolvedAddress(t *testing.T) {
	clk := clock.NewFake(epoch)
	ln1, ln2, ip2 := twoLoopbackListeners(t)
	_, port, _ := net.SplitHostPort(ln1.Addr().String())
	hub1 := startTestHub(t, ln1, func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	hub2 := startTestHub(t, ln2, func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	res := &staticResolver{}
	res.set("127.0.0.1", ip2)
	snap := newSnapshot("p1")
	rc := startClient(t, Config{
		Addresses: []string{net.JoinHostPort("hubs.test", port)}, Resolver: res, Clock: clk,
		Handler: pylonHandler(snap, clk, nil),
	}, hub1, hub2)
	c1 := recv(t, hub1.conns, "a connection to hub 1")
	c2 := recv(t, hub2.conns, "a connection to hub 2")
	addr1, addr2 := hub1.addr, hub2.addr
	up := map[stateEvent]bool{recv(t, rc.states, "a tunnel up"): true, recv(t, rc.states, "the other tunnel up"): true}
	if !up[stateEvent{addr1, true}] || !up[stateEvent{addr2, true}] {
		t.Fatalf("OnState %v; want both addresses up", up)
	}
	if c := rc.c.Connected(); len(c) != 2 || !c[addr1] || !c[addr2] {
		t.Fatalf("Connected() = %v with both tunnels up", c)
	}
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
	if ev := recv(t, rc.states, "hub 2 reported down"); ev != (stateEvent{addr2, false}) {
		t.Fatalf("OnState %+v; want hub 2 down", ev)
	}
	// The address is dropped before OnState reports it, so Connected()
	// already agrees.
	if c := rc.c.Connected(); len(c) != 1 || !c[addr1] {
		t.Fatalf("Connected() = %v after hub 2 went away", c)
	}
	recv(t, c2.conn.closed, "the pylon to close hub 2's connection")
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
	rc.logs.wait(t, "the failed lookup to be logged", "keeping current connections")
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
	recv(t, hc.conn.goaway, "GOAWAY to reach the hub")
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
	// The drain is logged once its timer is armed. The stream cannot end
	// any other way, so its failure right after the timeout proves the
	// timeout cut it.
	rc.logs.wait(t, "the drain to start", "draining the connection to hub")
	clk.Advance(DefaultDrainTimeout - time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("the stuck request ended before the drain timeout: %v", err)
	default:
	}
	clk.Advance(time.Millisecond)
	err := recv(t, res, "the drain timeout to close the connection")
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
		"plaintext token": {Addresses: []string{"127.0.0.1:1"}, Handler: http.NotFoundHandler(),
			Token: func() (string, error) { return "t", nil }},
	} {
		// Cancelled: a configuration Run accepts returns nil at once
		// instead of dialing forever.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := New(cfg).Run(ctx); err == nil {
			t.Errorf("%s: Run accepted the configuration", name)
		}
	}
}

// twoLoopbackListeners listens on 127.0.0.1 and on a second loopback
// address with the same port, as two hub pods behind one name would be.
// Linux routes all of 127.0.0.0/8 to the loopback interface; elsewhere
// (macOS) only 127.0.0.1 works unless aliased, so ::1 is tried next. A
// host with neither fails the test with what to do: a skip would hide
// that the test never ran.
func twoLoopbackListeners(t *testing.T) (ln1, ln2 net.Listener, ip2 string) {
	t.Helper()
	var errs []error
	for range 5 { // another process may hold the port on the second address
		ln1 = listen(t, "127.0.0.1:0")
		_, port, _ := net.SplitHostPort(ln1.Addr().String())
		for _, ip := range []string{"127.0.0.2", "::1"} {
			ln2, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err == nil {
				return ln1, ln2, ip
			}
			errs = append(errs, err)
		}
		_ = ln1.Close()
	}
	t.Fatalf("no second loopback address to listen on (%v); on macOS run: sudo ifconfig lo0 alias 127.0.0.2", errors.Join(errs...))
	return nil, nil, ""
}
