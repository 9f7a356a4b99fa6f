package faults

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// Bounds of TestDeadlineStopsAbandonedWork.
const (
	// clientTimeout is the client's option.WithRequestTimeout, which the
	// Go SDK sends as X-Stainless-Timeout: 2.
	clientTimeout = 2 * time.Second
	// stopBound bounds the time from the client giving up to every tier
	// having stopped the request's work: the gateway's deadline comes one
	// loopback transit after the client's (it counts from the request's
	// arrival), then the cancellation crosses three loopback hops, which
	// takes tens of milliseconds; the rest is room for timers that fire
	// late on a busy machine (up to half a second was seen on this suite's
	// 2-core host). Without the deadline the work goes on for as long as
	// the engine takes (a 20 s answer here) or until the hub's 30 s wait
	// for a head.
	stopBound = 2 * time.Second
	// hubDeadline is the x-stargate-deadline-ms of the request sent to
	// the hub directly.
	hubDeadline = 1500 * time.Millisecond
)

// TestDeadlineStopsAbandonedWork: one cluster. An openai-go client with a
// 2 s timeout reaches the gateway through a relay that keeps the
// connection to the gateway open when the client leaves, as a proxy that
// does not pass client aborts upstream does: the gateway cannot see the
// client go, so only the request's deadline (from X-Stainless-Timeout) can
// end the work.
//
//   - stream: a 20 s answer, abandoned after 2 s mid-stream;
//   - before_head: the engine hangs before its response head (a
//     non-streaming request);
//   - hub_direct: the hub alone, called as the gateway calls it with
//     x-stargate-deadline-ms: 1500 over a connection the caller holds,
//     the engine hanging.
//
// Bounds: the client sees its own timeout (the hub_direct caller a 504
// deadline_exceeded within stopBound of its deadline); within stopBound
// of that, the engine runs nothing and the pylon tracks nothing for the
// request, and each tier's logs or metrics show the request ended.
func TestDeadlineStopsAbandonedWork(t *testing.T) {
	st, logs := startStackLogs(t, stack.Options{Fleet: fleet(1)})
	ep := st.Endpoints()
	hc := httpClient(t)
	engine, pylon := ep.Engines["a"], ep.PylonMetrics["a"]
	relay := newHeldRelay(t, ep.Gateway)
	// sdk is the client of one request; tokens sizes the mock engine's
	// answer (x-output-tokens, which the tiers pass through).
	sdk := func(id string, tokens int) *openai.Client {
		c := openai.NewClient(option.WithBaseURL(relay+"/v1"), option.WithAPIKey(ep.APIKey), option.WithHTTPClient(hc),
			option.WithMaxRetries(0), option.WithRequestTimeout(clientTimeout), option.WithHeader(headers.RequestID, id),
			option.WithHeader(headers.OutputTokens, headers.FormatUint(uint64(tokens))))
		return &c
	}
	metrics := func(url string) map[string]float64 {
		m, err := scrape(t.Context(), hc, url)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// stopped reports that the engine runs no request and the pylon
	// tracks none.
	stopped := func() bool {
		return sum(metrics(engine+"/metrics"), "vllm:num_requests_running") == 0 && sum(metrics(pylon), "pylon_requests_inflight") == 0
	}

	t.Run("stream", func(t *testing.T) {
		id := "deadline-stream"
		engBefore, pylBefore := metrics(engine+"/metrics"), metrics(pylon)
		start := time.Now()
		stream := sdk(id, 2000).Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("deadline suite: a long answer")}})
		chunks := 0
		for stream.Next() {
			chunks++
		}
		err := stream.Err()
		_ = stream.Close()
		gaveUp := time.Since(start)
		if !isTimeout(err) || chunks < 2 {
			t.Fatalf("after %v and %d chunks the client got %v; want its own timeout mid-stream", gaveUp, chunks, err)
		}
		took := eventually(t, stopBound, "the engine and the pylon stop the abandoned stream", stopped)
		t.Logf("the client gave up after %v and %d chunks; the engine and the pylon stopped %v later (bound %v)",
			gaveUp.Round(10*time.Millisecond), chunks, took.Round(10*time.Millisecond), stopBound)
		eng, pyl := metrics(engine+"/metrics"), metrics(pylon)
		if d := delta(eng, engBefore, "vllm:request_success_total", `finished_reason="abort"`); d != 1 {
			t.Errorf("the engine aborted %v requests; want 1", d)
		}
		if d := delta(pyl, pylBefore, "pylon_requests_total", `status="cancelled"`); d != 1 {
			t.Errorf("the pylon counted %v cancelled requests; want 1", d)
		}
		wantLogged(t, logs, "gateway", id, "cutting the client's stream short")
		logHubEnd(t, metrics(ep.HubMetrics))
	})

	t.Run("before_head", func(t *testing.T) {
		id := "deadline-head"
		if err := put(t.Context(), hc, engine+"/test-control/fault", `{"mode":"hang"}`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = put(context.Background(), hc, engine+"/test-control/fault", `{"mode":"none"}`) })
		pylBefore, hubBefore := metrics(pylon), metrics(ep.HubMetrics)
		start := time.Now()
		_, err := sdk(id, 5).Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("deadline suite: a hung engine")}})
		gaveUp := time.Since(start)
		if !isTimeout(err) {
			t.Fatalf("after %v the client got %v; want its own timeout", gaveUp, err)
		}
		took := eventually(t, stopBound, "the pylon stops the abandoned request", stopped)
		t.Logf("the client gave up after %v; the pylon stopped %v later (bound %v)",
			gaveUp.Round(10*time.Millisecond), took.Round(10*time.Millisecond), stopBound)
		pyl, hub := metrics(pylon), metrics(ep.HubMetrics)
		if d := delta(pyl, pylBefore, "pylon_upstream_engine_requests_total", `status="cancelled"`); d != 1 {
			t.Errorf("the pylon cancelled %v engine requests; want 1", d)
		}
		// The gateway's deadline comes first and closes its hub request
		// (499 at the hub, the gateway logs its 504), unless the hub's
		// own, a moment later, fires first on a busy machine: the gateway
		// then relays the hub's 504 deadline_exceeded.
		abandoned := delta(hub, hubBefore, "stargate_requests_total", `status="499"`)
		hubEnded := delta(hub, hubBefore, "stargate_deadline_exceeded_total", `stage="upstream"`)
		if abandoned+hubEnded != 1 {
			t.Errorf("the hub ended %v requests as abandoned and %v past their deadline; want 1 in all", abandoned, hubEnded)
		}
		if hubEnded == 0 {
			wantLogged(t, logs, "gateway", id, "deadline")
		} else {
			t.Logf("the hub's deadline fired first; the gateway relayed its 504")
		}
		logHubEnd(t, hub)
	})

	t.Run("hub_direct", func(t *testing.T) {
		if err := put(t.Context(), hc, engine+"/test-control/fault", `{"mode":"hang"}`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = put(context.Background(), hc, engine+"/test-control/fault", `{"mode":"none"}`) })
		hubBefore := metrics(ep.HubMetrics)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ep.Hub+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"deadline suite: the hub alone"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"Authorization": "Bearer " + ep.GatewayToken, "Content-Type": "application/json",
			headers.RequestID: "deadline-hub", headers.Model: model, headers.InputTokens: "10",
			headers.StargateDeadlineMs: headers.FormatUint(uint64(hubDeadline / time.Millisecond))} {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		outcome, code := typedOrNot(resp.Body)
		_ = resp.Body.Close()
		answered := time.Since(start)
		if resp.StatusCode != http.StatusGatewayTimeout || outcome != typedError || code != headers.ErrorCodeDeadlineExceeded {
			t.Fatalf("the hub answered %d %v %q; want 504 %s", resp.StatusCode, outcome, code, headers.ErrorCodeDeadlineExceeded)
		}
		if answered < hubDeadline || answered > hubDeadline+stopBound {
			t.Errorf("the hub answered after %v; want within %v of its %v deadline", answered, stopBound, hubDeadline)
		}
		took := eventually(t, stopBound, "the pylon stops the request", stopped)
		t.Logf("the hub answered 504 %s after %v (deadline %v); the pylon had stopped %v later",
			code, answered.Round(10*time.Millisecond), hubDeadline, took.Round(10*time.Millisecond))
		if d := delta(metrics(ep.HubMetrics), hubBefore, "stargate_deadline_exceeded_total", `stage="upstream"`); d != 1 {
			t.Errorf("the hub counted %v deadline expiries at the upstream stage; want 1", d)
		}
		wantLogged(t, logs, "hub", "deadline-hub", "request deadline passed")
	})
}

// isTimeout reports whether an SDK error is the client's own timeout.
func isTimeout(err error) bool {
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline exceeded"))
}

// delta is how much the series of name matching want grew from before to
// after.
func delta(after, before map[string]float64, name string, want ...string) float64 {
	return sum(after, name, want...) - sum(before, name, want...)
}

// wantLogged fails t unless child's log has a line naming the request id
// and holding what; it logs the request's lines.
func wantLogged(t *testing.T, logs, child, id, what string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logs, child+".log")) //nolint:gosec // G304: the test's own log folder
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, id) {
			t.Logf("%s: %s", child, line)
			found = found || strings.Contains(line, what)
		}
	}
	if !found {
		t.Errorf("%s's log has no line for %s with %q", child, id, what)
	}
}

// logHubEnd logs how the hub's requests ended so far: abandoned by the
// gateway (499) or ended by the hub's own deadline, by stage.
func logHubEnd(t *testing.T, hub map[string]float64) {
	t.Helper()
	t.Logf("hub: %v requests ended 499, deadline expiries: received %v, routing %v, upstream %v, streaming %v",
		sum(hub, "stargate_requests_total", `status="499"`),
		sum(hub, "stargate_deadline_exceeded_total", `stage="received"`), sum(hub, "stargate_deadline_exceeded_total", `stage="routing"`),
		sum(hub, "stargate_deadline_exceeded_total", `stage="upstream"`), sum(hub, "stargate_deadline_exceeded_total", `stage="streaming"`))
}

// heldRelay is a TCP relay in front of a server that keeps its connection
// to the server open when the client closes its own, as a load balancer
// or proxy that does not pass client aborts upstream does: the server
// cannot see the client leave, and goes on writing to a relay that
// discards what it writes.
type heldRelay struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// newHeldRelay relays to the server at base (http://host:port) until the
// test ends, and returns the relay's base URL.
func newHeldRelay(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &heldRelay{ln: ln, target: u.Host}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return "http://" + ln.Addr().String()
}

func (r *heldRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !r.track(c, up) {
			return
		}
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			// The client's close ends this copy and is not passed on.
			_, _ = io.Copy(up, c)
		}()
		go func() {
			defer r.wg.Done()
			_, _ = io.Copy(c, up)
			// The client is gone: keep reading what the server writes.
			_, _ = io.Copy(io.Discard, up)
		}()
	}
}

// track remembers conns for close; false means the relay is closed and
// has closed them.
func (r *heldRelay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	r.conns = append(r.conns, conns...)
	return true
}

// close stops the relay and closes every connection it holds.
func (r *heldRelay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
