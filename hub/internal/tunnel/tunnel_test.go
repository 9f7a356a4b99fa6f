package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Authority", r.Host)
	_, _ = fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
}

func TestAcceptedHandshakeAndProxiedRoundTrip(t *testing.T) {
	h := startHub(t, Config{Token: "s3cret", Clock: clock.NewFake(epoch)})
	hs := handshake("p1")
	hs.AuthToken = "s3cret"
	hs.ClusterID = "c1"
	p := dialPylon(t, h.addr, hs, nil, map[string]http.HandlerFunc{"/echo": echo})
	if !p.ack.Accepted || p.ack.Code != protocol.CodeOK || p.ack.HubID != "hub-test" || p.ack.V != protocol.Version {
		t.Fatalf("ack = %+v; want accepted by hub-test", p.ack)
	}
	eventually(t, "the session to be listed", func() bool { return len(h.srv.Sessions()) == 1 })

	resp, err := h.roundTrip(t, "p1", newRequest(context.Background(), t, http.MethodPost, "/echo", "hello"))
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "POST /echo hello" || resp.ProtoMajor != 2 {
		t.Fatalf("got %s %s %q; want 200 over HTTP/2 with the echoed request", resp.Proto, resp.Status, body)
	}
	if got := resp.Header.Get("X-Authority"); got != "pylon" {
		t.Fatalf("pylon saw Host %q; want the request URL's host", got)
	}

	info := h.srv.Sessions()[0]
	if info.ID != "p1" || info.ClusterID != "c1" || info.URL != "http://engine-p1:8000" || info.RemoteAddr == "" || !info.ConnectedSince.Equal(epoch) {
		t.Fatalf("SessionInfo = %+v", info)
	}
	if _, ok := h.srv.RoundTripper("nobody"); ok {
		t.Fatal("RoundTripper of an unknown id reported a session")
	}
}

func TestTLSHandshakeAndRoundTrip(t *testing.T) {
	serverTLS, clientTLS := selfSigned(t)
	h := startHub(t, Config{TLS: serverTLS})
	p := dialPylon(t, h.addr, handshake("p1"), clientTLS, map[string]http.HandlerFunc{"/echo": echo})
	if !p.ack.Accepted {
		t.Fatalf("ack over TLS = %+v", p.ack)
	}
	eventually(t, "the session", func() bool { _, ok := h.srv.RoundTripper("p1"); return ok })
	resp, err := h.roundTrip(t, "p1", newRequest(context.Background(), t, http.MethodGet, "/echo", ""))
	if err != nil {
		t.Fatalf("RoundTrip over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
}

func TestRefusedHandshakes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		drain    bool
		hs       func() protocol.Handshake
		wantCode string
		wantLog  string
	}{
		{
			name: "bad token", cfg: Config{Token: "right-token"},
			hs:       func() protocol.Handshake { hs := handshake("p1"); hs.AuthToken = "wrong-token"; return hs },
			wantCode: protocol.CodeUnauthorized, wantLog: "invalid auth token",
		},
		{
			name: "missing token", cfg: Config{Token: "right-token"},
			hs:       func() protocol.Handshake { return handshake("p1") },
			wantCode: protocol.CodeUnauthorized, wantLog: "invalid auth token",
		},
		{
			name: "token source error", cfg: Config{TokenSource: func() (string, error) { return "", errors.New("no such file") }},
			hs:       func() protocol.Handshake { hs := handshake("p1"); hs.AuthToken = "wrong-token"; return hs },
			wantCode: protocol.CodeUnauthorized, wantLog: "reading the hub's registration token failed",
		},
		{
			name:     "wrong version",
			hs:       func() protocol.Handshake { hs := handshake("p1"); hs.V = protocol.Version + 1; return hs },
			wantCode: protocol.CodeVersion, wantLog: "invalid handshake",
		},
		{
			name:     "no id",
			hs:       func() protocol.Handshake { return handshake("") },
			wantCode: protocol.CodeInvalid, wantLog: "invalid handshake",
		},
		{
			name: "draining", drain: true,
			hs:       func() protocol.Handshake { return handshake("p1") },
			wantCode: protocol.CodeDraining, wantLog: "draining",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, tc.cfg)
			if tc.drain {
				h.srv.Drain()
			}
			p := dialPylon(t, h.addr, tc.hs(), nil, nil)
			if p.ack.Accepted || p.ack.Code != tc.wantCode || p.ack.Reason == "" {
				t.Fatalf("ack = %+v; want refused with %q and a reason", p.ack, tc.wantCode)
			}
			if n := len(h.srv.Sessions()); n != 0 {
				t.Fatalf("%d sessions after a refused handshake", n)
			}
			if err := h.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(h.rec.registered) != 0 || len(h.rec.disconnected) != 0 {
				t.Fatal("the Handler heard about a refused pylon")
			}
			logs := h.logs.String()
			if !strings.Contains(logs, tc.wantLog) || !strings.Contains(logs, "code="+tc.wantCode) {
				t.Fatalf("logs lack %q with code %q:\n%s", tc.wantLog, tc.wantCode, logs)
			}
			if id := tc.hs().InferenceServerID; id != "" && !strings.Contains(logs, "inference_server_id="+id) {
				t.Fatalf("refusal log does not name the inference server:\n%s", logs)
			}
			if !strings.Contains(logs, "remote_addr=127.0.0.1:") {
				t.Fatalf("refusal log does not name the remote address:\n%s", logs)
			}
			if strings.Contains(logs, "token=") || strings.Contains(logs, "wrong-token") || strings.Contains(logs, "right-token") {
				t.Fatalf("a token leaked into the logs:\n%s", logs)
			}
		})
	}
}

func TestTokenSourceIsReadOnEveryHandshake(t *testing.T) {
	token := make(chan string, 2)
	token <- "old"
	token <- "new"
	h := startHub(t, Config{TokenSource: func() (string, error) { return <-token, nil }})
	hs := handshake("p1")
	hs.AuthToken = "new"
	if p := dialPylon(t, h.addr, hs, nil, nil); p.ack.Code != protocol.CodeUnauthorized {
		t.Fatalf("first handshake ack = %+v; want unauthorized against the old token", p.ack)
	}
	if p := dialPylon(t, h.addr, hs, nil, nil); !p.ack.Accepted {
		t.Fatalf("second handshake ack = %+v; want accepted against the rotated token", p.ack)
	}
}

func TestDuplicateIDRejectedWhileFirstStaysUsable(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	first := dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{"/echo": echo})
	if !first.ack.Accepted {
		t.Fatalf("first ack = %+v", first.ack)
	}
	second := dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{"/echo": echo})
	if second.ack.Accepted || second.ack.Code != protocol.CodeDuplicate {
		t.Fatalf("second ack = %+v; want %q", second.ack, protocol.CodeDuplicate)
	}
	eventually(t, "the first session", func() bool { _, ok := h.srv.RoundTripper("p1"); return ok })
	resp, err := h.roundTrip(t, "p1", newRequest(context.Background(), t, http.MethodGet, "/echo", ""))
	if err != nil {
		t.Fatalf("first session after the duplicate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	if h.rec.disconnects("p1") != 0 {
		t.Fatal("the duplicate disconnected the first session")
	}
}

func TestRegistrationReachesHandlerWithMeasuredRTT(t *testing.T) {
	h := startHub(t, Config{})
	hs := handshake("p1")
	hs.ClusterID = "c1"
	p := dialPylon(t, h.addr, hs, nil, nil)
	reg := registration("p1", 1)
	reg.ClusterID = "c1"
	p.regs <- reg
	call := recv(t, h.rec.registered, "the first Registered call")
	if !call.rttKnown || call.rtt <= 0 {
		t.Fatalf("first Registered: rtt=%v known=%v; want a measured RTT", call.rtt, call.rttKnown)
	}
	want := Backend{ID: "p1", ClusterID: "c1", URL: "http://engine-p1:8000"}
	if call.b != want || call.reg.Seq != 1 || call.reg.Models["m"].Status != protocol.StatusActive {
		t.Fatalf("Registered(%+v, %+v); want %+v with seq 1", call.b, call.reg, want)
	}
	if len(p.health) == 0 {
		t.Fatal("RTT known without a /health request over the tunnel")
	}
	p.regs <- registration("p1", 2)
	if call := recv(t, h.rec.registered, "the second Registered call"); call.reg.Seq != 2 || !call.rttKnown {
		t.Fatalf("second Registered: %+v", call)
	}
	if info := h.srv.Sessions()[0]; !info.RTTKnown || info.LastRTT <= 0 {
		t.Fatalf("SessionInfo RTT = %v known=%v", info.LastRTT, info.RTTKnown)
	}
}

func TestHealthProbeRunsEveryIntervalOnTheClock(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := startHub(t, Config{Clock: clk, HealthInterval: 3 * time.Second, MinIdleTimeout: -1})
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	recv(t, p.health, "the inline probe")
	for i := range 3 {
		h.waitProberAsleep(t, clk, "p1")
		clk.Advance(3*time.Second - time.Millisecond)
		if len(p.health) != 0 {
			t.Fatal("probe before the interval elapsed")
		}
		clk.Advance(time.Millisecond)
		recv(t, p.health, fmt.Sprintf("periodic probe %d", i+1))
	}
}

func TestFailedProbeMakesRTTUnknown(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := startHub(t, Config{Clock: clk, MinIdleTimeout: -1})
	healthy := make(chan bool, 10)
	p := dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{
		"/health": func(w http.ResponseWriter, r *http.Request) {
			if !<-healthy {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		},
	})
	healthy <- false
	p.regs <- registration("p1", 1)
	if call := recv(t, h.rec.registered, "Registered"); call.rttKnown {
		t.Fatal("RTT known although /health answered 503")
	}
	healthy <- true
	h.waitProberAsleep(t, clk, "p1")
	clk.Advance(time.Second)
	eventually(t, "the periodic probe to record an RTT", func() bool { return h.srv.Sessions()[0].RTTKnown })
	p.regs <- registration("p1", 2)
	if call := recv(t, h.rec.registered, "Registered"); !call.rttKnown || call.rtt <= 0 {
		t.Fatalf("after a good probe: rtt=%v known=%v", call.rtt, call.rttKnown)
	}
}

func TestSSEArrivesEventByEvent(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	release := make(chan struct{})
	dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{
		"/sse": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			_, _ = io.WriteString(w, "data: one\n\n")
			_ = rc.Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "data: two\n\n")
			_ = rc.Flush()
		},
	})
	eventually(t, "the session", func() bool { _, ok := h.srv.RoundTripper("p1"); return ok })
	resp, err := h.roundTrip(t, "p1", newRequest(context.Background(), t, http.MethodGet, "/sse", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var ev strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading event: %v (so far %q)", err, ev.String())
			}
			if line == "\n" {
				return ev.String()
			}
			ev.WriteString(line)
		}
	}
	// The handler is blocked on release, so the first event can only be
	// here because it was flushed through the tunnel on its own.
	if ev := readEvent(); ev != "data: one\n" {
		t.Fatalf("first event %q", ev)
	}
	close(release)
	if ev := readEvent(); ev != "data: two\n" {
		t.Fatalf("second event %q", ev)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v; want EOF", err)
	}
}

func TestCancellingHubRequestCancelsPylonHandler(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	started, cancelled := make(chan struct{}), make(chan error, 1)
	dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{
		"/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			_ = http.NewResponseController(w).Flush()
			close(started)
			<-r.Context().Done()
			cancelled <- r.Context().Err()
		},
	})
	eventually(t, "the session", func() bool { _, ok := h.srv.RoundTripper("p1"); return ok })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := h.roundTrip(t, "p1", newRequest(ctx, t, http.MethodGet, "/stream", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	recv(t, started, "the handler to start streaming")
	cancel()
	if err := recv(t, cancelled, "the pylon handler's context to end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context error %v; want context.Canceled", err)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("hub body read after cancel: %v; want context.Canceled", err)
	}
	// Only the registration stream stays open.
	eventually(t, "the stream to be released", func() bool { return h.srv.Sessions()[0].StreamsActive == 1 })
}

func TestIdleRegistrationStreamClosesSession(t *testing.T) {
	clk := clock.NewFake(epoch)
	// An hour between probes keeps the prober's sleep the only other timer.
	h := startHub(t, Config{Clock: clk, HealthInterval: time.Hour})
	hs := handshake("p1")
	hs.HeartbeatMs = 10_000 // idle timeout 30 s, raised to the 60 s minimum
	p := dialPylon(t, h.addr, hs, nil, nil)
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	// Keep the stream alive past the first deadline with one more line.
	clk.WaitForTimers(2) // prober and idle watcher
	clk.Advance(50 * time.Second)
	p.regs <- registration("p1", 2)
	recv(t, h.rec.registered, "the second Registered")
	clk.Advance(10 * time.Second) // the first deadline, 60 s after connect
	// The watcher wakes, sees a line 10 s old and sleeps again; a watcher
	// that closed instead would not re-arm, and this wait would time out.
	clk.WaitForTimers(2)
	if h.rec.disconnects("p1") != 0 {
		t.Fatal("Disconnected although a line arrived 10 s ago")
	}
	clk.Advance(50 * time.Second) // 60 s after the last line
	if b := recv(t, h.rec.disconnected, "Disconnected after the idle timeout"); b.ID != "p1" {
		t.Fatalf("Disconnected(%+v)", b)
	}
	recv(t, p.regClosed, "the pylon's registration stream to be cancelled")
	recv(t, p.done, "the connection to close")
	if _, ok := h.srv.RoundTripper("p1"); ok {
		t.Fatal("session still routable after the idle timeout")
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if n := h.rec.disconnects("p1"); n != 1 {
		t.Fatalf("Disconnected called %d times; want 1", n)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "registration stream idle timeout; closing registration") {
		t.Fatalf("no idle-timeout warning in:\n%s", logs)
	}
}

func TestKilledPylonFiresDisconnectedPromptly(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	p.kill()
	// No clock moves: only the dead connection can end the session.
	if b := recv(t, h.rec.disconnected, "Disconnected after the pylon died"); b.ID != "p1" {
		t.Fatalf("Disconnected(%+v)", b)
	}
	eventually(t, "the session to go", func() bool { return len(h.srv.Sessions()) == 0 })
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if n := h.rec.disconnects("p1"); n != 1 {
		t.Fatalf("Disconnected called %d times; want 1", n)
	}
	// The id is free again once the old session is gone.
}

func TestReconnectAfterDisconnectIsAccepted(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.kill()
	recv(t, h.rec.disconnected, "Disconnected")
	eventually(t, "the old session to go", func() bool { return len(h.srv.Sessions()) == 0 })
	if again := dialPylon(t, h.addr, handshake("p1"), nil, nil); !again.ack.Accepted {
		t.Fatalf("reconnect ack = %+v", again.ack)
	}
}

func TestRegistrationForAnotherIDClosesSession(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.regs <- registration("someone-else", 1)
	recv(t, h.rec.disconnected, "Disconnected after a foreign registration")
	if len(h.rec.registered) != 0 {
		t.Fatal("a registration for another id reached the Handler")
	}
	eventually(t, "the close reason in the log", func() bool { return strings.Contains(h.logs.String(), "protocol violation") })
}

// Statistics JSON cannot hold for their type (a negative count, a rate
// beyond float64) make the line undecodable: the session ends as a
// protocol violation and nothing of the line reaches the Handler, so no
// wrapped or infinite value can enter the routing state through a tunnel.
func TestOutOfRangeStatisticsCloseSession(t *testing.T) {
	for name, stats := range map[string]string{
		"negative count":    `{"queue_size":-1}`,
		"count beyond u64":  `{"queued_input_size":18446744073709551616}`,
		"fractional count":  `{"num_running_queries":1.5}`,
		"rate beyond f64":   `{"last_mean_input_tps":1e400}`,
		"priority over u32": `{"queue_time_estimate_ms_by_priority":{"4294967296":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := startHub(t, Config{Clock: clock.NewFake(epoch)})
			p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
			p.rawRegs <- `{"v":1,"seq":1,"inference_server_id":"p1","models":{"m":{"status":"active","stats":` + stats + `}}}`
			recv(t, h.rec.disconnected, "Disconnected after an undecodable registration")
			if len(h.rec.registered) != 0 {
				t.Fatal("an undecodable registration reached the Handler")
			}
			eventually(t, "the close reason in the log", func() bool { return strings.Contains(h.logs.String(), "protocol violation") })
		})
	}
}

func TestRegistrationEndLetsInFlightRequestsFinish(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	started, release := make(chan struct{}), make(chan struct{})
	p := dialPylon(t, h.addr, handshake("p1"), nil, map[string]http.HandlerFunc{
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			_, _ = io.WriteString(w, "done")
		},
	})
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	req := newRequest(context.Background(), t, http.MethodGet, "/slow", "")
	rt, _ := h.srv.RoundTripper("p1")
	go func() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	recv(t, started, "the slow request")
	close(p.regEnd) // a draining pylon finishes its registration stream
	recv(t, h.rec.disconnected, "Disconnected")
	if _, ok := h.srv.RoundTripper("p1"); ok {
		t.Fatal("still routable after the registration stream ended")
	}
	close(release)
	if r := recv(t, res, "the in-flight response"); r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request after the registration ended: %q, %v", r.body, r.err)
	}
	recv(t, p.done, "the connection to close once idle")
	if _, err := rt.RoundTrip(newRequest(context.Background(), t, http.MethodGet, "/slow", "")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("RoundTrip on an ended session: %v; want ErrSessionClosed", err)
	}
}

func TestRunStopClosesSessions(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := h.rec.disconnects("p1"); n != 1 {
		t.Fatalf("Disconnected called %d times on shutdown; want 1", n)
	}
	recv(t, p.done, "the pylon's connection to close")
}

func TestIdleTimeoutClamp(t *testing.T) {
	lo, hi := 60*time.Second, 300*time.Second
	for _, tc := range []struct {
		hb   uint64
		lo   time.Duration
		want time.Duration
	}{
		{hb: 0, lo: lo, want: hi},
		{hb: 100, lo: lo, want: lo},
		{hb: 1000, lo: lo, want: lo},
		{hb: 30_000, lo: lo, want: 90 * time.Second},
		{hb: 200_000, lo: lo, want: hi},
		{hb: ^uint64(0), lo: lo, want: hi},
		{hb: 1000, lo: -1, want: 0},
	} {
		if got := idleTimeout(tc.hb, tc.lo, hi); got != tc.want {
			t.Errorf("idleTimeout(%d ms, %v, %v) = %v; want %v", tc.hb, tc.lo, hi, got, tc.want)
		}
	}
}

func TestListenerFailureEndsRunAndSessions(t *testing.T) {
	h := startHub(t, Config{Clock: clock.NewFake(epoch)})
	h.runMayFail = true
	p := dialPylon(t, h.addr, handshake("p1"), nil, nil)
	p.regs <- registration("p1", 1)
	recv(t, h.rec.registered, "Registered")
	_ = h.srv.cfg.Listener.Close()
	recv(t, h.rec.disconnected, "Disconnected after the listener failed")
	if err := h.stop(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Run = %v; want an error wrapping net.ErrClosed", err)
	}
	recv(t, p.done, "the pylon's connection to close")
}
