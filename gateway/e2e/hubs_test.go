package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// twoHubs starts one mock engine behind one pylon with a tunnel to each
// of two hubs, and returns the hubs' processes and a hub whose url is the
// comma list of both (what --hub-url takes), once both list the model,
// and each hub's metrics URL.
// The engine prefills slowly and decodes fast, so a request spends most
// of its life before the response head, where a dead hub costs a retry.
func (e *env) twoHubs() (procs [2]*proc, both hub, hubMetrics [2]string) {
	gwToken, regToken := e.secret("gateway-token"), e.secret("registration-token")
	mock := e.start("mock-engine", bin.mock, 1, func(p []int) []string {
		return []string{"--listen", addr(p[0]), "--model-name", model, "--drain-timeout", "2s",
			"--prefill-tokens-per-s", "200", "--token-delay-ms", "0", "--ttft-ms", "0"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/health" })
	var urls, backends []string
	for i := range procs {
		p, hp := e.startProc(fmt.Sprintf("hub-%d", i), bin.hub, 3, func(p []int) []string {
			return []string{"--listen", addr(p[0]), "--backend-listen", addr(p[1]), "--metrics-listen", addr(p[2]), "--drain-timeout", "2s",
				"--gateway-token-file", gwToken, "--registration-token-file", regToken}
		}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
		procs[i] = p
		hubMetrics[i] = "http://" + addr(hp[2]) + "/metrics"
		urls = append(urls, "http://"+addr(hp[0]))
		backends = append(backends, addr(hp[1]))
	}
	e.start("pylon", bin.pylon, 2, func(p []int) []string {
		return []string{"--stargate-address", strings.Join(backends, ","), "--upstream-http-base-url", "http://" + addr(mock[0]),
			"--model-name", model, "--inference-server-id", "pylon-1", "--cluster-id", "cluster-1",
			"--listen", addr(p[0]), "--metrics-listen", addr(p[1]), "--initial-input-tps", "100000",
			"--min-update-interval-ms", "100", "--drain-timeout", "2s",
			"--auth-token-file", regToken, "--insecure-plaintext"}
	}, func(p []int) string { return "http://" + addr(p[0]) + "/readyz" })
	for _, u := range urls {
		h := hub{url: u, tokenFile: gwToken}
		err := poll(readyTimeout, 20*time.Millisecond, func() error {
			status, b, err := e.hubGet(h, "/v1/models", true)
			if err != nil {
				return err
			}
			if status != http.StatusOK || !strings.Contains(b, model) {
				return fmt.Errorf("GET %s/v1/models: %d %s", u, status, b)
			}
			return nil
		})
		if err != nil {
			e.t.Fatalf("hub %s never listed the model: %v", u, err)
		}
	}
	return procs, hub{url: strings.Join(urls, ","), tokenFile: gwToken, engine: "http://" + addr(mock[0])}, hubMetrics
}

// TestHubKilledUnderLoad: one gateway over two hubs (--hub-url a list),
// eight clients sending requests back to back; one hub is SIGKILLed in
// the middle. Every request sent after the kill succeeds (the dead hub's
// refused dials are retried on the other hub), the dead hub shows as down
// on llm_api_gateway_hub_up, and a request in flight at the kill either
// succeeds (it was retried before its head) or ends as a cut answer
// (its head had come back), never as "hub unreachable". Both hubs served
// before the kill: the gateway spreads.
func TestHubKilledUnderLoad(t *testing.T) {
	e := newEnv(t)
	procs, both, hubMetrics := e.twoHubs()
	gw, metricsURL := e.gateway(both, "--insecure-no-auth")
	dead := strings.Split(both.url, ",")[0]

	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var killedAt atomic.Int64 // unix nanos; 0 before the kill
	type result struct {
		started time.Time
		status  int
		body    string
		err     error
	}
	var (
		mu      sync.Mutex
		results []result
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"worker %d request %d: %s"}]}`,
					model, w, i, strings.Repeat("tell me more ", 8))
				r := result{started: time.Now()}
				req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := cl.Do(req)
				if err == nil {
					b, rerr := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					r.status, r.body, r.err = resp.StatusCode, string(b), rerr
				} else {
					r.err = err
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(results)
	}
	if err := poll(30*time.Second, 10*time.Millisecond, func() error {
		if n := count(); n < 40 {
			return fmt.Errorf("%d requests done", n)
		}
		return nil
	}); err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	served := [2]float64{sumMetric(scrape(t, hubMetrics[0]), "stargate_requests_total"), sumMetric(scrape(t, hubMetrics[1]), "stargate_requests_total")}
	procs[0].kill()
	killedAt.Store(time.Now().UnixNano())
	base := count()
	err := poll(30*time.Second, 10*time.Millisecond, func() error {
		if n := count() - base; n < 80 {
			return fmt.Errorf("%d requests done after the kill", n)
		}
		return nil
	})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	kill := time.Unix(0, killedAt.Load())
	var after, inFlightOK, inFlightCut int
	for _, r := range results {
		ok := r.err == nil && r.status == http.StatusOK && strings.Contains(r.body, `"chat.completion"`)
		switch {
		case r.started.After(kill):
			after++
			if !ok {
				t.Errorf("a request sent after the kill failed: %d %q %v", r.status, r.body, r.err)
			}
		case ok:
			inFlightOK++
		case r.status == http.StatusBadGateway && strings.Contains(r.body, "bad_upstream_response"):
			inFlightCut++
		default:
			t.Errorf("a request in flight at the kill failed other than by a cut answer: %d %q %v", r.status, r.body, r.err)
		}
	}
	m := scrape(t, metricsURL)
	deadLabel := `llm_api_gateway_hub_up{hub="` + strings.TrimPrefix(dead, "http://") + `"} 0`
	if !strings.Contains(m, deadLabel) {
		t.Errorf("metrics lack %s", deadLabel)
	}
	t.Logf("%d requests before the kill spread over the hubs as %v; after it %d all succeeded; %d finished before it or were retried, %d in flight were cut after their head; retries: %s",
		base, served, after, inFlightOK, inFlightCut, metricLines(m, "llm_api_gateway_hub_retries_total"))
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("before the kill only %v served: the gateway did not spread", served)
	}
}

// scrape returns the gateway's /metrics text.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test scrape on loopback
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricLines returns the samples of the family name, joined.
func metricLines(text, name string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "; ")
}

// sumMetric adds up the samples of the family name.
func sumMetric(text, name string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}
