package hubclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// fakeResolver answers from a map the test changes between resolutions.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	fail  map[string]bool
	calls int
}

func (r *fakeResolver) set(host string, ips ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[host] = ips
}

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail[host] {
		return nil, errors.New("dns down")
	}
	return slices.Clone(r.hosts[host]), nil
}

// stateLog records OnState calls.
type stateLog struct {
	mu  sync.Mutex
	got []string
}

func (l *stateLog) on(hub string, s State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s=%s", hub, [...]string{"up", "down", "gone"}[s]))
}

func (l *stateLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	slices.Sort(out)
	return out
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// nopTransport never carries a request: the tests that use it only pick.
func nopTransport(string) http.RoundTripper { return http.DefaultTransport }

// TestResolveFollowsDNS: a headless Service name is one hub per address;
// an address that appears is added, one that vanishes is dropped (and its
// series gone), a failed lookup keeps what the name had, and IP literals
// and default ports need no lookup.
func TestResolveFollowsDNS(t *testing.T) {
	res := &fakeResolver{hosts: map[string][]string{"hub.ns.svc": {"10.0.0.1", "10.0.0.2"}}, fail: map[string]bool{}}
	var log stateLog
	c := NewPool(Config{
		URLs:     []*url.URL{mustURL(t, "http://hub.ns.svc:8000"), mustURL(t, "http://192.0.2.7")},
		Resolver: res, OnState: log.on, Transport: nopTransport,
	})
	if c.Len() != 0 {
		t.Fatalf("hubs before Resolve: %v", c.Hubs())
	}
	ctx := context.Background()
	c.Resolve(ctx)
	want := []string{"10.0.0.1:8000", "10.0.0.2:8000", "192.0.2.7:80"}
	if got := c.Hubs(); !slices.Equal(got, want) {
		t.Fatalf("hubs %v, want %v", got, want)
	}
	if got := log.take(); !slices.Equal(got, []string{"10.0.0.1:8000=up", "10.0.0.2:8000=up", "192.0.2.7:80=up"}) {
		t.Fatalf("states %v", got)
	}
	if res.calls != 1 {
		t.Fatalf("%d lookups; the IP literal needs none", res.calls)
	}

	res.set("hub.ns.svc", "10.0.0.2", "10.0.0.3")
	c.Resolve(ctx)
	want = []string{"10.0.0.2:8000", "10.0.0.3:8000", "192.0.2.7:80"}
	if got := c.Hubs(); !slices.Equal(got, want) {
		t.Fatalf("after a change: hubs %v, want %v", got, want)
	}
	if got := log.take(); !slices.Equal(got, []string{"10.0.0.1:8000=gone", "10.0.0.3:8000=up"}) {
		t.Fatalf("states %v", got)
	}

	res.fail["hub.ns.svc"] = true
	c.Resolve(ctx)
	if got := c.Hubs(); !slices.Equal(got, want) {
		t.Fatalf("a failed lookup changed the hubs: %v", got)
	}
	res.fail["hub.ns.svc"] = false
	res.set("hub.ns.svc")
	c.Resolve(ctx)
	if got := c.Hubs(); !slices.Equal(got, want) {
		t.Fatalf("an empty answer (a lookup error) changed the hubs: %v", got)
	}
}

// TestRunReresolvesOnTheClock: Run resolves again every ResolveInterval
// of the injected clock, so a hub joining is picked up without a restart.
func TestRunReresolvesOnTheClock(t *testing.T) {
	res := &fakeResolver{hosts: map[string][]string{"hub": {"10.0.0.1"}}, fail: map[string]bool{}}
	clk := clock.NewFake(time.Unix(0, 0))
	c := NewPool(Config{URLs: []*url.URL{mustURL(t, "https://hub")}, Resolver: res, Clock: clk,
		ResolveInterval: 10 * time.Second, Transport: nopTransport})
	ctx, cancel := context.WithCancel(context.Background())
	c.Resolve(ctx)
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	res.set("hub", "10.0.0.1", "10.0.0.2")
	clk.WaitForTimers(1)
	clk.Advance(9 * time.Second)
	if n := c.Len(); n != 1 {
		t.Fatalf("resolved before the interval: %d hubs", n)
	}
	clk.Advance(time.Second)
	clk.WaitForTimers(1) // Run waits again: its resolution is done
	if got := c.Hubs(); !slices.Equal(got, []string{"10.0.0.1:443", "10.0.0.2:443"}) {
		t.Fatalf("hubs %v after the interval", got)
	}
	cancel()
	<-done
}

// TestPickPrefersFewerInFlight: of two hubs the one with fewer exchanges
// in flight always wins, and with three the busiest is never picked while
// the other two share the load.
func TestPickPrefersFewerInFlight(t *testing.T) {
	c := NewPool(Config{URLs: []*url.URL{mustURL(t, "http://10.0.0.1"), mustURL(t, "http://10.0.0.2"), mustURL(t, "http://10.0.0.3")},
		Transport: nopTransport, Rand: rand.New(rand.NewPCG(1, 2))})
	c.Resolve(context.Background())
	hubs := map[string]*Hub{}
	for _, h := range c.hubs {
		hubs[h.addr] = h
	}
	busy := hubs["10.0.0.1:80"]
	busy.inflight.Store(5)
	counts := map[string]int{}
	for range 300 {
		counts[c.Pick(nil).Addr()]++
	}
	if counts["10.0.0.1:80"] != 0 {
		t.Errorf("the busiest hub was picked %d times", counts["10.0.0.1:80"])
	}
	for _, a := range []string{"10.0.0.2:80", "10.0.0.3:80"} {
		if counts[a] < 100 {
			t.Errorf("hub %s picked %d of 300 times; want a fair share: %v", a, counts[a], counts)
		}
	}
	// Two left after one was tried: the idle one wins every time.
	hubs["10.0.0.3:80"].inflight.Store(1)
	for range 50 {
		if got := c.Pick([]*Hub{hubs["10.0.0.2:80"]}).Addr(); got != "10.0.0.3:80" {
			t.Fatalf("picked %s; want the less busy 10.0.0.3:80", got)
		}
	}
	if got := c.Pick([]*Hub{busy, hubs["10.0.0.2:80"], hubs["10.0.0.3:80"]}); got != nil {
		t.Fatalf("picked %s with every hub tried", got.Addr())
	}
}

// TestBackoffSkipsAFailedHub: a hub whose exchange failed is skipped for
// InitialBackoff, then for twice as long after a second failure; when
// every hub is down the one whose backoff ends first is tried; an answer
// ends the backoff.
func TestBackoffSkipsAFailedHub(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var log stateLog
	c := NewPool(Config{URLs: []*url.URL{mustURL(t, "http://10.0.0.1"), mustURL(t, "http://10.0.0.2")},
		Clock: clk, Transport: nopTransport, OnState: log.on})
	c.Resolve(context.Background())
	log.take()
	a, b := c.hubs[0], c.hubs[1]
	boom := errors.New("connection refused")

	c.markDown(a, boom)
	if got := log.take(); !slices.Equal(got, []string{"10.0.0.1:80=down"}) {
		t.Fatalf("states %v", got)
	}
	for range 20 {
		if c.Pick(nil) != b {
			t.Fatal("a hub in backoff was picked while another is up")
		}
	}
	clk.Advance(InitialBackoff)
	a.inflight.Store(0)
	b.inflight.Store(1)
	if c.Pick(nil) != a {
		t.Fatal("the backoff is over: the idle hub must be picked again")
	}
	c.markDown(a, boom) // second failure in a row: twice as long
	clk.Advance(InitialBackoff)
	if c.Pick(nil) != b {
		t.Fatal("a second failure must double the backoff")
	}
	clk.Advance(InitialBackoff / 2)
	c.markDown(b, boom)
	// Both down: a's backoff ends at 3 s (2 s from t=1s), b's at 3.5 s.
	if c.Pick(nil) != a {
		t.Fatal("with every hub down, the one whose backoff ends first must be tried")
	}
	if c.Pick([]*Hub{a}) != b {
		t.Fatal("the other down hub must be tried next")
	}
	c.markUp(a)
	if got := log.take(); !slices.Equal(got, []string{"10.0.0.1:80=up", "10.0.0.2:80=down"}) {
		t.Fatalf("states %v", got)
	}
	if c.Pick(nil) != a {
		t.Fatal("a hub that answered is up at once")
	}
	if a.failures != 0 {
		t.Fatal("an answer resets the failure count")
	}
	for range 10 {
		c.markDown(b, boom)
	}
	if got := b.downUntil.Sub(clk.Now()); got != MaxBackoff {
		t.Fatalf("backoff %v after many failures; want the cap %v", got, MaxBackoff)
	}
}

// TestDoTracksHealthAndInFlight over real connections: a refused dial
// marks the hub down and is a "connect" failure; an answer marks it up;
// an exchange is in flight until its body is closed.
func TestDoTracksHealthAndInFlight(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	res := &fakeResolver{hosts: map[string][]string{"hub.example": {"127.0.0.1"}}, fail: map[string]bool{}}
	c := NewPool(Config{URLs: []*url.URL{mustURL(t, "http://hub.example:"+port), mustURL(t, "http://"+deadAddr)},
		Resolver: res, ConnectTimeout: time.Second})
	c.Resolve(context.Background())
	defer c.CloseIdle()
	var good, bad *Hub
	for _, h := range c.hubs {
		if h.addr == deadAddr {
			bad = h
		} else {
			good = h
		}
	}
	req, _ := c.NewRequest(context.Background(), bad, http.MethodGet, "/x", http.Header{}, nil)
	_, err := c.Do(bad, req)
	if err == nil || FailureReason(err) != "connect" {
		t.Fatalf("refused dial: err %v, reason %q", err, FailureReason(err))
	}
	if bad.up || bad.inflight.Load() != 0 {
		t.Fatalf("refused hub: up %v, in flight %d", bad.up, bad.inflight.Load())
	}
	req, _ = c.NewRequest(context.Background(), good, http.MethodGet, "/x", http.Header{}, nil)
	resp, err := c.Do(good, req)
	if err != nil {
		t.Fatal(err)
	}
	if good.inflight.Load() != 1 {
		t.Fatalf("in flight %d before the body is closed", good.inflight.Load())
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	_ = resp.Body.Close()
	if good.inflight.Load() != 0 {
		t.Fatalf("in flight %d after Close (twice)", good.inflight.Load())
	}
	if string(b) != "hub.example:"+port {
		t.Fatalf("the hub saw Host %q; want the configured name", b)
	}
	if FailureReason(io.ErrUnexpectedEOF) != "exchange" {
		t.Fatal("a broken exchange is not a connect failure")
	}
}

// TestTLSKeepsTheConfiguredServerName: dialing a resolved IP, the TLS
// handshake still verifies the certificate against the configured host
// name (httptest's certificate is for example.com).
func TestTLSKeepsTheConfiguredServerName(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.ServerName)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig
	res := &fakeResolver{hosts: map[string][]string{"example.com": {"127.0.0.1"}, "wrong.example": {"127.0.0.1"}}, fail: map[string]bool{}}
	mk := func(addr string) http.RoundTripper {
		tr := newTransport(addr, time.Second)
		tr.TLSClientConfig = roots.Clone()
		return tr
	}
	for host, ok := range map[string]bool{"example.com": true, "wrong.example": false} {
		c := NewPool(Config{URLs: []*url.URL{mustURL(t, "https://"+host+":"+port)}, Resolver: res, Transport: mk})
		c.Resolve(context.Background())
		h := c.Pick(nil)
		req, _ := c.NewRequest(context.Background(), h, http.MethodGet, "/", http.Header{}, nil)
		resp, err := c.Do(h, req)
		if !ok {
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("%s: the certificate for example.com was accepted: %v", host, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != host {
			t.Fatalf("server name %q; want %q", b, host)
		}
		c.CloseIdle()
	}
}
