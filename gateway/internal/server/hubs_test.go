package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/hubclient"
	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/pkg/clock"
)

// closingHub accepts connections, reads one request and closes the
// connection without a response head: a hub that dies mid-exchange, or
// closes a connection the gateway reused.
type closingHub struct {
	ln  net.Listener
	mu  sync.Mutex
	ids []string // x-request-id of every request read
	wg  sync.WaitGroup
}

func newClosingHub(t *testing.T) *closingHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &closingHub{ln: ln}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.wg.Go(func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				h.mu.Lock()
				h.ids = append(h.ids, req.Header.Get("X-Request-Id"))
				h.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		h.wg.Wait()
	})
	return h
}

func (h *closingHub) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ids)
}

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// newPool is a pool over the base URLs, resolved, on its own fake clock
// (the clock of the hubs' backoff).
func newPool(t *testing.T, bases ...string) (*hubclient.Client, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	var urls []*url.URL
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	p := hubclient.NewPool(hubclient.Config{URLs: urls, ConnectTimeout: time.Second, Clock: clk})
	p.Resolve(context.Background())
	if p.Len() != len(bases) {
		t.Fatalf("pool has %d hubs, want %d", p.Len(), len(bases))
	}
	return p, clk
}

const sessionChat = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"prompt_cache_key":"sess"}`

// TestRetryOnAnotherHubBeforeTheHead: a hub that refuses connections or
// closes them before its response head costs the client nothing: every
// request succeeds through the other hub, exactly once there, with the
// same request id on both attempts, and the session's last cluster is
// the serving hub's. Each failed attempt is one retry, counted by reason.
func TestRetryOnAnotherHubBeforeTheHead(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
	}{{"refused", "connect"}, {"closed before the head", "exchange"}} {
		t.Run(tc.name, func(t *testing.T) {
			good := newFakeHub(t)
			good.cluster = "cluster-b"
			var bad *closingHub
			badURL := "http://" + refusedAddr(t)
			if tc.reason == "exchange" {
				bad = newClosingHub(t)
				badURL = "http://" + bad.ln.Addr().String()
			}
			pool, pclk := newPool(t, badURL, good.srv.URL)
			h := newHarness(t, opts{pool: pool, store: lastcluster.NewLRU(100, time.Minute)})
			const n = 20
			for i := range n {
				resp, body := h.post("/v1/chat/completions", sessionChat, nil)
				if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				}
				if got := good.count(); got != i+1 {
					t.Fatalf("request %d: the good hub served %d requests, want %d (exactly once each)", i, got, i+1)
				}
				if i > 0 {
					h.tracker.Wait(context.Background())
					if r, _ := good.last(); r.Header.Get("X-Stargate-Last-Cluster-Id") != "cluster-b" {
						t.Fatalf("request %d: last-cluster hint %q, want the serving hub's cluster-b", i, r.Header.Get("X-Stargate-Last-Cluster-Id"))
					}
				}
				// The failed hub's backoff ends, so it is a candidate again.
				pclk.Advance(hubclient.MaxBackoff)
			}
			retries := counter(h.m.HubRetries, tc.reason)
			if retries < 1 {
				t.Fatalf("the failing hub was never tried in %d requests", n)
			}
			if other := counter(h.m.HubRetries, otherReason(tc.reason)); other != 0 {
				t.Fatalf("%v retries counted under the other reason", other)
			}
			if got := counter(h.m.UpstreamRequests, "hub", "success", "200", "none"); got != n {
				t.Fatalf("upstream successes %v, want %d (one per client request)", got, n)
			}
			if bad != nil {
				ids := bad.requests()
				if float64(len(ids)) != retries {
					t.Fatalf("the closing hub read %d requests, retries counted %v", len(ids), retries)
				}
				good.mu.Lock()
				var served []string
				for _, r := range good.reqs {
					served = append(served, r.Header.Get("X-Request-Id"))
				}
				good.mu.Unlock()
				for _, id := range ids {
					if !slices.Contains(served, id) {
						t.Fatalf("request id %q of a failed attempt was not the retried request's", id)
					}
				}
			}
		})
	}
}

func otherReason(r string) string {
	if r == "connect" {
		return "exchange"
	}
	return "connect"
}

// TestNoRetryAfterTheHead: once a hub's response head is back nothing is
// retried. A stream the hub cuts after its head reaches the client cut
// short (the existing behaviour), and a hub's own error status passes
// through; either way every request reached exactly one hub.
func TestNoRetryAfterTheHead(t *testing.T) {
	for _, tc := range []string{"stream cut", "503 answer"} {
		t.Run(tc, func(t *testing.T) {
			good := newFakeHub(t)
			var badURL string
			var badCount func() int
			if tc == "stream cut" {
				cut := newCutHub(t, false, cutAbort)
				inner := cut.srv.Config.Handler
				var mu sync.Mutex
				count := 0
				cut.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					count++
					mu.Unlock()
					inner.ServeHTTP(w, r)
				})
				badURL = cut.srv.URL
				badCount = func() int { mu.Lock(); defer mu.Unlock(); return count }
			} else {
				hub503 := newFakeHub(t)
				hub503.status = http.StatusServiceUnavailable
				badURL = hub503.srv.URL
				badCount = hub503.count
			}
			pool, _ := newPool(t, badURL, good.srv.URL)
			h := newHarness(t, opts{pool: pool})
			for i := 0; i < 40 && badCount() == 0; i++ {
				before := badCount()
				resp, body := h.postRaw("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
				if got := badCount() + good.count(); got != i+1 {
					t.Fatalf("request %d reached %d hub exchanges in all, want %d", i, got, i+1)
				}
				if badCount() == before {
					if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
						t.Fatalf("request %d on the good hub: %d %s", i, resp.StatusCode, body)
					}
					continue
				}
				switch tc {
				case "stream cut":
					if resp.StatusCode != 200 || !strings.Contains(body, "upstream_stream_interrupted") || strings.Contains(body, "[DONE]") {
						t.Fatalf("cut stream: %d %q; want the cut shown to the client", resp.StatusCode, body)
					}
				default:
					if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "upstream says no") {
						t.Fatalf("hub's 503: %d %s; want it passed through", resp.StatusCode, body)
					}
				}
			}
			if badCount() == 0 {
				t.Fatal("the failing hub was never picked in 40 requests")
			}
			for _, r := range metrics.RetryReasons {
				if v := counter(h.m.HubRetries, r); v != 0 {
					t.Fatalf("%v retries (%s) after a response head", v, r)
				}
			}
		})
	}
}

// postRaw posts body and reads the answer even when the connection is
// aborted after a cut stream (the body then ends with an error).
func (h *harness) postRaw(path, body string) (*http.Response, string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		h.t.Logf("reading the body: %v", err)
	}
	return resp, string(b)
}

// TestAllHubsDown: when every hub fails before its head the client gets
// the gateway's 502 upstream_unavailable after one attempt per hub, and
// with no hub resolved at all a 503 hub_unavailable; both in the OpenAI
// error shape.
func TestAllHubsDown(t *testing.T) {
	pool, _ := newPool(t, "http://"+refusedAddr(t), "http://"+refusedAddr(t))
	h := newHarness(t, opts{pool: pool})
	resp, body := h.post("/v1/chat/completions", sessionChat, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"upstream_unavailable"`) || !strings.Contains(body, `"type":"server_error"`) {
		t.Fatalf("all hubs refused: %d %s", resp.StatusCode, body)
	}
	if got := counter(h.m.HubRetries, "connect"); got != 1 {
		t.Fatalf("%v retries; want 1 (two hubs, each tried once)", got)
	}

	empty := hubclient.NewPool(hubclient.Config{URLs: []*url.URL{{Scheme: "http", Host: "hub.invalid:8000"}}, Resolver: noHosts{}})
	empty.Resolve(context.Background())
	h = newHarness(t, opts{pool: empty})
	resp, body = h.post("/v1/chat/completions", sessionChat, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"hub_unavailable"`) {
		t.Fatalf("no hub resolved: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodGet, h.ts.URL+"/v1/models", nil)
	mresp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = mresp.Body.Close()
	if mresp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /v1/models with no hub: %d, want 503", mresp.StatusCode)
	}
}

// noHosts resolves nothing.
type noHosts struct{}

func (noHosts) LookupHost(context.Context, string) ([]string, error) {
	return nil, errors.New("no such host")
}

// TestModelsRetries: GET /v1/models steps over a dead hub too.
func TestModelsRetries(t *testing.T) {
	good := newFakeHub(t)
	pool, pclk := newPool(t, "http://"+refusedAddr(t), good.srv.URL)
	h := newHarness(t, opts{pool: pool})
	for i := range 10 {
		resp, err := h.ts.Client().Get(h.ts.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"m"`) {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		pclk.Advance(hubclient.MaxBackoff)
	}
	if good.count() != 10 {
		t.Fatalf("good hub served %d, want 10", good.count())
	}
}

// TestRetryReasonsMatch: the metric's pre-initialised reasons are the
// pool's.
func TestRetryReasonsMatch(t *testing.T) {
	if !slices.Equal(metrics.RetryReasons, hubclient.FailureReasons) {
		t.Fatalf("metrics.RetryReasons %v, hubclient.FailureReasons %v", metrics.RetryReasons, hubclient.FailureReasons)
	}
}
