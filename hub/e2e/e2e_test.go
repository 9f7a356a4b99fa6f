package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestE2E runs the acceptance checks. Staleness spends 31 s waiting for a
// stale sweep, so it runs in parallel with the suite; the suite's scenarios
// run one after another so that their timing checks do not share the two
// cores with each other.
func TestE2E(t *testing.T) {
	t.Run("Staleness", func(t *testing.T) {
		t.Parallel()
		testStaleness(t)
	})
	t.Run("Suite", func(t *testing.T) {
		t.Parallel()
		for _, sc := range []struct {
			name string
			run  func(*testing.T)
		}{
			{"BadRequests", testBadRequests},
			{"ModelUnavailable", testModelUnavailable},
			{"Registration", testRegistration},
			{"LiveLoad", testLiveLoad},
			{"StreamMode", testStreamMode},
			{"Fallback", testFallback},
			{"QueueMismatch", testQueueMismatch},
			{"KV", testKV},
			{"HubRestart", testHubRestart},
			{"PylonKilled", testPylonKilled},
			{"ClientCancel", testClientCancel},
			{"TLSAndToken", testTLSAndToken},
			{"LBConfigRejected", testLBConfigRejected},
			{"LastClusterAffinity", testLastClusterAffinity},
			{"PrefixAffinity", testPrefixAffinity},
		} {
			t.Run(sc.name, sc.run)
		}
	})
}

// testBadRequests: a request without the gateway token is a 401 (and
// /v1/models too; the probes are open), /debug/state is not on the API
// listener, a request without x-input-tokens is a 400 and a model nobody
// serves is a 404 with x-stargate-error-code: no_eligible_candidates
// (docs/design/hub-request.md#status-codes).
func testBadRequests(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--ttft-ms", "1", "--token-delay-ms", "1")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)
	ctx := t.Context()

	// The same request with every header is served, so the 400 below is
	// about the missing header alone.
	if r := h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2}); !r.ok(2) {
		t.Fatalf("well-formed request: %v", r)
	}
	r := h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2, InputTokens: -1})
	if r.Status != http.StatusBadRequest {
		t.Errorf("request without x-input-tokens: want 400, got %v", r)
	}
	r = h.stream(ctx, e.cl, chat{Model: "no-such-model", Content: promptOf(16), OutputTokens: 2})
	if r.Status != http.StatusNotFound {
		t.Errorf("unknown model: want 404, got %v", r)
	}
	if got := r.Header.Get("x-stargate-error-code"); got != "no_eligible_candidates" {
		t.Errorf("unknown model: x-stargate-error-code = %q, want no_eligible_candidates", got)
	}

	r = h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2, Anonymous: true})
	if r.Status != http.StatusUnauthorized || !strings.Contains(r.Body, `"type":"authentication_error"`) {
		t.Errorf("request without the gateway token: want an OpenAI-shaped 401, got %v", r)
	}
	r = h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2, Header: http.Header{"Authorization": {"Bearer guess"}}})
	if r.Status != http.StatusUnauthorized {
		t.Errorf("request with a wrong token: want 401, got %v", r)
	}
	for _, c := range []struct {
		url  string
		want int
	}{
		{h.url + "/v1/models", http.StatusUnauthorized},
		{h.url + "/healthz", http.StatusOK},
		{h.url + "/readyz", http.StatusOK},
		{h.url + "/debug/state", http.StatusNotFound},
		{h.adminURL + "/debug/state", http.StatusOK},
	} {
		if got, err := e.status(c.url); err != nil || got != c.want {
			t.Errorf("GET %s without a token: status %d (%v), want %d", c.url, got, err, c.want)
		}
	}
	if got := mustScrape(t, e.cl, h.metricsURL).value("stargate_unauthorized_requests_total"); got != 3 {
		t.Errorf("stargate_unauthorized_requests_total = %v, want 3", got)
	}
}

// testModelUnavailable: while a model's only pylon is away (killed and
// started again), a request for it waits instead of getting the 404 of an
// unknown model, and is served by the pylon once it is back; a request
// whose wait runs out first gets 503 model_temporarily_unavailable with
// Retry-After; an unknown model is still a 404.
func testModelUnavailable(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--ttft-ms", "1", "--token-delay-ms", "1")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)
	ctx := t.Context()
	if r := h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2}); !r.ok(2) {
		t.Fatalf("before the restart: %v", r)
	}
	gone := func() {
		t.Helper()
		waitFor(t, 5*time.Second, "the hub to drop pylon-a", func() (bool, string) {
			ids, err := h.models(e.cl)
			if err != nil {
				return false, err.Error()
			}
			return !slices.Contains(ids, model), fmt.Sprintf("models=%v", ids)
		})
	}

	p.kill()
	gone()
	waiting := make(chan streamResult, 1)
	go func() { waiting <- h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2}) }()
	if r := h.stream(ctx, e.cl, chat{Model: "no-such-model", Content: promptOf(16), OutputTokens: 2}); r.Status != http.StatusNotFound {
		t.Errorf("unknown model while pylon-a is away: want 404, got %v", r)
	}
	waitFor(t, 10*time.Second, "the request to wait at the hub", func() (bool, string) {
		hm, err := scrape(e.cl, h.metricsURL)
		if err != nil {
			return false, err.Error()
		}
		n := hm.value("stargate_model_unavailable_waiting", "model", model)
		return n == 1, fmt.Sprintf("waiting=%v", n)
	})
	restarted := time.Now()
	back := e.pylon(h, m, "pylon-a")
	r := <-waiting
	if !r.ok(2) || r.Header.Get("x-inference-server-id") != "pylon-a" {
		t.Fatalf("the request that waited for pylon-a: %v, want a complete stream from pylon-a", r)
	}
	t.Logf("the request waited %v in all; served %v after the pylon was started again", r.End.Sub(r.Start), r.End.Sub(restarted))

	hm := mustScrape(t, e.cl, h.metricsURL)
	if got := hm.value("stargate_model_unavailable_waits_total", "model", model, "outcome", "appeared"); got != 1 {
		t.Errorf("stargate_model_unavailable_waits_total{outcome=appeared} = %v, want 1", got)
	}

	// Away again, and the request's own wait (1 s) runs out first.
	back.kill()
	gone()
	r = h.stream(ctx, e.cl, chat{Content: promptOf(16), OutputTokens: 2, Header: http.Header{"x-max-wait-ms": {"1000"}}})
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		r.Header.Get("x-stargate-error-code") != "model_temporarily_unavailable" {
		t.Errorf("a known model without a backend past the wait: want 503 model_temporarily_unavailable with Retry-After, got %v (Retry-After %q)",
			r, r.Header.Get("Retry-After"))
	}
}

// testRegistration is acceptance check 1: a pylon's model is listed with a
// measured RTT within two heartbeats, and a killed pylon's model leaves
// /v1/models at once.
func testRegistration(t *testing.T) {
	e := newEnv(t)
	m := e.mock()
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	// The pylon dials the hub right after it turns ready.
	bound := 2*heartbeat + 2*time.Second // two heartbeats plus slack for two shared cores
	took := waitFor(t, bound, "the model to be listed with an RTT", func() (bool, string) {
		ids, err := h.models(e.cl)
		if err != nil {
			return false, err.Error()
		}
		c, why := h.clusterView(e.cl, "pylon-a")
		if why != "" {
			return false, why
		}
		return slices.Contains(ids, model) && c.RTTNanos > 0, fmt.Sprintf("models=%v rtt_ns=%d", ids, c.RTTNanos)
	})
	t.Logf("listed with an RTT %v after the pylon was ready", took)

	st, err := h.state(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].ID != "pylon-a" || st.Sessions[0].ClusterID != "pylon-a" ||
		!st.Sessions[0].RTTKnown || st.Sessions[0].LastRTT <= 0 {
		t.Errorf("sessions = %+v, want one session pylon-a with a known RTT", st.Sessions)
	}
	c, _ := st.cluster(model, "pylon-a")
	if c.ActiveBackends != 1 {
		t.Errorf("cluster active_backends = %d, want 1", c.ActiveBackends)
	}

	p.kill()
	gone := waitFor(t, 2*time.Second, "the model to leave /v1/models after SIGKILL", func() (bool, string) {
		ids, err := h.models(e.cl)
		if err != nil {
			return false, err.Error()
		}
		return !slices.Contains(ids, model), fmt.Sprintf("models=%v", ids)
	})
	t.Logf("model removed %v after the pylon was killed", gone)
	st, err = h.state(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.cluster(model, "pylon-a"); ok || len(st.Sessions) != 0 {
		t.Errorf("after the kill /debug/state still shows the pylon: sessions=%+v", st.Sessions)
	}
}

// testLiveLoad is acceptance check 2: eight concurrent long streams show as
// num_running_queries=8; while all are in prefill queue_size=8 and
// queued_input_size is the sum of their x-input-tokens; once all decode,
// queue_size and queued_input_size are 0.
func testLiveLoad(t *testing.T) {
	e := newEnv(t)
	// 8 prompts of 400..624 tokens share 2000 tokens/s of prefill: about
	// 1.6 s before the first leaves prefill, then 200 tokens at 20 ms.
	m := e.mock("--prefill-tokens-per-s", "2000", "--ttft-ms", "20", "--token-delay-ms", "20")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a", "--pylon-queue-mismatch-retry-enabled=false")
	e.waitRegistered(h, p)

	const n, out = 8, 200
	ctx := t.Context()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	results := make([]streamResult, n)
	sum := uint64(0)
	for i := range n {
		tokens := 400 + 32*i
		sum += uint64(tokens)
		c := chat{Content: promptOf(tokens), OutputTokens: out}
		wg.Go(func() { results[i] = h.stream(ctx, e.cl, c) })
	}

	var pending modelStats
	waitFor(t, 10*time.Second, "a heartbeat with all 8 requests pending", func() (bool, string) {
		c, why := h.clusterView(e.cl, "pylon-a")
		pending = c.Base
		return why == "" && c.Base.QueueSize == n, why + c.Base.String()
	})
	t.Logf("all pending: %v", pending)
	if pending.NumRunningQueries != n || pending.QueuedInputSize != sum || pending.TotalQueryInputSize != sum {
		t.Errorf("while all %d requests are pending: running=%d queued_input_size=%d total_query_input_size=%d, want %d, %d, %d",
			n, pending.NumRunningQueries, pending.QueuedInputSize, pending.TotalQueryInputSize, n, sum, sum)
	}

	var decoding modelStats
	waitFor(t, 15*time.Second, "a heartbeat with all 8 requests decoding", func() (bool, string) {
		c, why := h.clusterView(e.cl, "pylon-a")
		decoding = c.Base
		return why == "" && c.Base.NumRunningQueries == n && c.Base.QueueSize == 0, why + c.Base.String()
	})
	t.Logf("all decoding: %v", decoding)
	if decoding.QueuedInputSize != 0 || decoding.OutputGenerationQueries != n || decoding.TotalQueryInputSize != sum {
		t.Errorf("while all %d requests decode: queued_input_size=%d output_generation_queries=%d total_query_input_size=%d, want 0, %d, %d",
			n, decoding.QueuedInputSize, decoding.OutputGenerationQueries, decoding.TotalQueryInputSize, n, sum)
	}

	wg.Wait()
	for i, r := range results {
		if !r.ok(out) {
			t.Errorf("stream %d: %v", i, r)
		}
	}
	waitFor(t, 5*time.Second, "the load to drain", func() (bool, string) {
		c, why := h.clusterView(e.cl, "pylon-a")
		return why == "" && c.Base.NumRunningQueries == 0 && c.Base.QueueSize == 0, why + c.Base.String()
	})
}

// testStreamMode is acceptance check 3: with the engine stats stream and
// no --initial-input-tps, the input TPS is learned from the engine's
// tokens_processed: about the mock's 2000 tokens/s prefill once 5 requests
// completed, with the engine_stats_stream source.
func testStreamMode(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--prefill-tokens-per-s", "2000", "--ttft-ms", "0", "--token-delay-ms", "5")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)

	const reqs, tokens, want = 6, 512, 2000.0
	for i := range reqs { // one at a time: concurrent prefills share the rate
		if r := h.stream(t.Context(), e.cl, chat{Content: promptOf(tokens), OutputTokens: 4}); !r.ok(4) {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	// The prompts were distinct and sized in the mock's own tokens.
	mm := mustScrape(t, e.cl, m.url+"/metrics")
	if got := mm.value("vllm:prompt_tokens_total"); got != reqs*tokens {
		t.Errorf("mock vllm:prompt_tokens_total = %v, want %d", got, reqs*tokens)
	}
	if got := mm.value("vllm:prefix_cache_hits_total"); got != 0 {
		t.Errorf("mock vllm:prefix_cache_hits_total = %v, want 0 (distinct prompts)", got)
	}

	var tps float64
	waitFor(t, 5*time.Second, "pylon to publish last_mean_input_tps", func() (bool, string) {
		pm, err := scrape(e.cl, p.metricsURL)
		if err != nil {
			return false, err.Error()
		}
		tps = pm.value("pylon_model_last_mean_input_tps", "model", model)
		return tps > 0, fmt.Sprint(tps)
	})
	t.Logf("pylon_model_last_mean_input_tps = %.1f (want %.0f ±15%%)", tps, want)
	if !within(tps, want, 0.15) {
		t.Errorf("pylon_model_last_mean_input_tps = %.1f, want %.0f ±15%%", tps, want)
	}
	var c debugCluster
	waitFor(t, 3*time.Second, "the hub to see the learned input TPS", func() (bool, string) {
		var why string
		c, why = h.clusterView(e.cl, "pylon-a")
		return why == "" && c.Base.LastMeanInputTPS > 0, why + c.Base.String()
	})
	if !within(c.Base.LastMeanInputTPS, want, 0.15) {
		t.Errorf("hub last_mean_input_tps = %.1f, want %.0f ±15%%", c.Base.LastMeanInputTPS, want)
	}
	if !hasLabel(c.Base.StatsSources, "engine_stats_stream") {
		t.Errorf("hub stats_sources = %v, want engine_stats_stream", c.Base.StatsSources)
	}
}

// testFallback is acceptance check 4: against an engine without a stats
// stream (pylon in auto mode, which falls back on the 404) and with the
// stream off, output_tps is measured from the SSE text: about
// 1000/token_delay_ms, with no chunk_usage label.
func testFallback(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			const delayMs, out = 20, 40
			m := e.mock("--disable-stats-stream", "--token-delay-ms", fmt.Sprint(delayMs), "--ttft-ms", "20")
			h := e.hub()
			p := e.pylon(h, m, "pylon-a", "--engine-stats-stream", mode)
			e.waitRegistered(h, p)

			var wg sync.WaitGroup
			results := make([]streamResult, 8)
			for round := range 2 {
				for i := range 4 {
					wg.Go(func() {
						results[round*4+i] = h.stream(t.Context(), e.cl, chat{Content: promptOf(64), OutputTokens: out})
					})
				}
				wg.Wait()
			}
			for i, r := range results {
				if !r.ok(out) {
					t.Fatalf("request %d: %v", i, r)
				}
			}
			var c debugCluster
			waitFor(t, 5*time.Second, "output_tps at the hub after the streams", func() (bool, string) {
				var why string
				c, why = h.clusterView(e.cl, "pylon-a")
				return why == "" && c.Base.OutputTPS > 0 && c.Base.NumRunningQueries == 0, why + c.Base.String()
			})
			want := 1000.0 / delayMs
			t.Logf("mode %s: hub stats %v (want output_tps %.0f ±25%%)", mode, c.Base, want)
			if !within(c.Base.OutputTPS, want, 0.25) {
				t.Errorf("output_tps = %.1f, want %.0f ±25%%", c.Base.OutputTPS, want)
			}
			for _, label := range []string{"chunk_usage", "engine_stats_stream"} {
				if hasLabel(c.Base.StatsSources, label) {
					t.Errorf("stats_sources = %v, must not contain %s", c.Base.StatsSources, label)
				}
			}
			if hasLabel(c.Base.StatsCapabilities, "request.output.chunk_usage") {
				t.Errorf("stats_capabilities = %v, must not contain request.output.chunk_usage", c.Base.StatsCapabilities)
			}
			pm := mustScrape(t, e.cl, p.metricsURL)
			if got := pm.value("pylon_model_stats_source", "model", model, "source", "chunk_usage"); got != 0 {
				t.Errorf("pylon_model_stats_source{source=chunk_usage} = %v, want 0", got)
			}
			if mode == "auto" {
				if got := pm.value("pylon_engine_stats_source_transitions_total", "to", "openai_fallback"); got < 1 {
					t.Errorf("pylon_engine_stats_source_transitions_total{to=openai_fallback} = %v, want >= 1 (auto fell back)", got)
				}
			}
		})
	}
}

// testQueueMismatch is acceptance check 5: in a cluster of two pylons, A
// holds a long pending request at a pinned 1 token/s, so whenever the hub's
// cluster estimate comes from B's (empty) priority map A's local queue
// exceeds it: A answers 429 queue_estimate_mismatch and the hub retries on
// B. The client only ever sees 200s.
func testQueueMismatch(t *testing.T) {
	e := newEnv(t)
	ma := e.mock("--prefill-tokens-per-s", "50", "--ttft-ms", "5", "--token-delay-ms", "5")
	mb := e.mock("--ttft-ms", "5", "--token-delay-ms", "5")
	h := e.hub()
	pa := e.pylon(h, ma, "pylon-a", "--cluster-id", "shared", "--initial-input-tps", "1", "--benchmark-pin-input-tps")
	pb := e.pylon(h, mb, "pylon-b", "--cluster-id", "shared", "--initial-input-tps", "100000", "--benchmark-pin-input-tps")
	e.waitRegistered(h, pa, pb)

	// The holder: 2000 tokens take mock A 40 s to prefill. Backends of a
	// cluster take turns, so it lands on A within a few tries (on B it
	// completes at once).
	const holderTokens = 2000
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for attempt := 1; ; attempt++ {
		if attempt > 4 {
			t.Fatal("the holder request never landed on pylon-a")
		}
		done := make(chan streamResult, 1)
		wg.Go(func() {
			done <- h.stream(ctx, e.cl, chat{Content: promptOf(holderTokens), OutputTokens: 1, Timeout: time.Minute})
		})
		onA := false
		waitFor(t, 10*time.Second, "the holder to be pending on pylon-a or done on pylon-b", func() (bool, string) {
			select {
			case r := <-done:
				t.Logf("holder attempt %d served elsewhere: %v", attempt, r)
				return true, ""
			default:
			}
			pm, err := scrape(e.cl, pa.metricsURL)
			if err != nil {
				return false, err.Error()
			}
			onA = pm.value("pylon_model_queued_input_tokens", "model", model) == holderTokens
			return onA, "pylon-a queued_input_tokens != holder"
		})
		if onA {
			break
		}
	}
	waitFor(t, 3*time.Second, "the hub to see the holder on pylon-a", func() (bool, string) {
		c, why := h.clusterView(e.cl, "shared")
		a, _ := c.member("pylon-a")
		return why == "" && a.Stats.QueuedInputSize == holderTokens, why + a.Stats.String()
	})

	retries := func() float64 {
		return mustScrape(t, e.cl, h.metricsURL).value("stargate_proxy_retries_total", "reason", "queue_estimate_mismatch")
	}
	served := map[string]int{}
	sent := 0
	for ; sent < 80; sent++ {
		// Send when the cluster's latest-wins figures, the priority map
		// among them, come from pylon-b's heartbeat: an attempt on A then
		// carries B's empty-queue estimate and A must refuse it.
		waitFor(t, 5*time.Second, "the cluster's statistics to come from pylon-b", func() (bool, string) {
			c, why := h.clusterView(e.cl, "shared")
			return why == "" && c.StatsSource == "pylon-b", why + " source=" + c.StatsSource
		})
		r := h.stream(ctx, e.cl, chat{Content: promptOf(8), OutputTokens: 2})
		if !r.ok(2) {
			t.Fatalf("request %d: the client must only see complete 200s, got %v", sent, r)
		}
		served[r.Header.Get("x-inference-server-id")]++
		if sent >= 20 && retries() > 0 {
			break
		}
	}
	hm := mustScrape(t, e.cl, h.metricsURL)
	am := mustScrape(t, e.cl, pa.metricsURL)
	bm := mustScrape(t, e.cl, pb.metricsURL)
	t.Logf("%d requests, served by %v; hub retries{queue_estimate_mismatch}=%v; pylon-a admission accepted=%v rejected=%v",
		sent+1, served, hm.value("stargate_proxy_retries_total", "reason", "queue_estimate_mismatch"),
		am.value("pylon_queue_admission_decisions_total", "result", "accepted"),
		am.value("pylon_queue_admission_decisions_total", "result", "rejected"))
	if got := hm.value("stargate_proxy_retries_total", "reason", "queue_estimate_mismatch"); got <= 0 {
		t.Errorf("hub stargate_proxy_retries_total{reason=queue_estimate_mismatch} = %v, want > 0", got)
	}
	if got := hm.value("stargate_proxy_attempts_total", "inference_server_id", "pylon-a", "result", "upstream_429"); got <= 0 {
		t.Errorf("hub stargate_proxy_attempts_total{pylon-a, upstream_429} = %v, want > 0", got)
	}
	if got := hm.value("stargate_requests_total", "status", "429"); got != 0 {
		t.Errorf("hub stargate_requests_total{status=429} = %v, want 0: a 429 reached a client", got)
	}
	if got := am.value("pylon_queue_admission_decisions_total", "result", "rejected"); got <= 0 {
		t.Errorf("pylon-a pylon_queue_admission_decisions_total{result=rejected} = %v, want > 0", got)
	}
	if got := am.value("pylon_retryable_responses_total", "reason", "queue_estimate_mismatch", "status", "429"); got <= 0 {
		t.Errorf("pylon-a pylon_retryable_responses_total{queue_estimate_mismatch,429} = %v, want > 0", got)
	}
	if got := bm.value("pylon_queue_admission_decisions_total", "result", "rejected"); got != 0 {
		t.Errorf("pylon-b rejected %v requests, want 0 (it has no queue)", got)
	}
}

// testKV is acceptance check 6: repeating a prompt hits the mock's prefix
// cache from the second request on (x-kv-cache-hit: true, lower TTFT), and
// the KV poll makes kv_cache_used_tokens rise at the hub.
func testKV(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--prefill-tokens-per-s", "4000", "--cached-prefill-tokens-per-s", "0", "--ttft-ms", "10", "--token-delay-ms", "5")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a", "--kv-cache-stats-path", "/kv-cache/stats")
	e.waitRegistered(h, p)

	var c debugCluster
	waitFor(t, 5*time.Second, "the first KV poll at the hub", func() (bool, string) {
		var why string
		c, why = h.clusterView(e.cl, "pylon-a")
		return why == "" && c.Base.KVCacheCapacityTokens > 0, why + c.Base.String()
	})
	if c.Base.KVCacheUsedTokens != 0 {
		t.Fatalf("kv_cache_used_tokens = %d before any request, want 0", c.Base.KVCacheUsedTokens)
	}

	const tokens = 2048 // 0.5 s of cold prefill, whole blocks only
	content := promptOf(tokens)
	hdr := http.Header{"X-Cache-Affinity-Key": {"conversation-1"}}
	var rs []streamResult
	for i := range 3 {
		r := h.stream(t.Context(), e.cl, chat{Content: content, OutputTokens: 4, IncludeUsage: true, Header: hdr})
		if !r.ok(4) || r.Usage == nil {
			t.Fatalf("request %d: %v (usage %+v)", i, r, r.Usage)
		}
		if r.Usage.PromptTokens != tokens {
			t.Errorf("request %d: prompt_tokens = %d, want %d", i, r.Usage.PromptTokens, tokens)
		}
		rs = append(rs, r)
	}
	t.Logf("TTFTs %v, %v, %v", rs[0].TTFT, rs[1].TTFT, rs[2].TTFT)
	if got := rs[0].Header.Get("x-kv-cache-hit"); got != "false" || rs[0].Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first request: x-kv-cache-hit=%q cached_tokens=%d, want false and 0", got, rs[0].Usage.PromptTokensDetails.CachedTokens)
	}
	for i, r := range rs[1:] {
		if got := r.Header.Get("x-kv-cache-hit"); got != "true" {
			t.Errorf("request %d: x-kv-cache-hit = %q, want true", i+1, got)
		}
		if got := r.Usage.PromptTokensDetails.CachedTokens; got < tokens-blockTokens {
			t.Errorf("request %d: cached_tokens = %d, want at least %d", i+1, got, tokens-blockTokens)
		}
		if r.TTFT >= rs[0].TTFT {
			t.Errorf("request %d: TTFT %v is not below the cold TTFT %v", i+1, r.TTFT, rs[0].TTFT)
		}
	}
	waitFor(t, 5*time.Second, "kv_cache_used_tokens to rise at the hub", func() (bool, string) {
		var why string
		c, why = h.clusterView(e.cl, "pylon-a")
		return why == "" && c.Base.KVCacheUsedTokens >= tokens, why + c.Base.String()
	})
	if !hasLabel(c.Base.StatsSources, "kv_cache_stats") {
		t.Errorf("stats_sources = %v, want kv_cache_stats", c.Base.StatsSources)
	}
}

// testStaleness is acceptance check 7: 30 s after the last stats event the
// pylon clears output_tps (the hub sees 0), while last_mean_input_tps and
// max_output_tps keep their values.
func testStaleness(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--ttft-ms", "10", "--token-delay-ms", "10")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)
	for i := range 6 {
		if r := h.stream(t.Context(), e.cl, chat{Content: promptOf(256), OutputTokens: 20}); !r.ok(20) {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	lastTraffic := time.Now()
	var c debugCluster
	waitFor(t, 5*time.Second, "throughput at the hub", func() (bool, string) {
		var why string
		c, why = h.clusterView(e.cl, "pylon-a")
		s := c.Base
		return why == "" && s.LastMeanInputTPS > 0 && s.OutputTPS > 0 && s.MaxOutputTPS > 0 && s.NumRunningQueries == 0, why + s.String()
	})
	t.Logf("after traffic: %v", c.Base)

	var prev, cleared modelStats
	var clearedAt time.Time
	waitEvery(t, 250*time.Millisecond, 45*time.Second, "output_tps to be cleared as stale", func() (bool, string) {
		c, why := h.clusterView(e.cl, "pylon-a")
		if why != "" {
			return false, why
		}
		if c.Base.OutputTPS == 0 {
			cleared, clearedAt = c.Base, time.Now()
			return true, ""
		}
		prev = c.Base
		return false, c.Base.String()
	})
	age := clearedAt.Sub(lastTraffic)
	t.Logf("output_tps cleared %v after the last request: %v (before: %v)", age, cleared, prev)
	// The model TTL is 30 s and the sweep runs every second: never sooner,
	// and by 31 s plus slack (the wait above is bounded at 45 s).
	if age < 25*time.Second {
		t.Errorf("output_tps cleared %v after the last request, before the 30 s model TTL", age)
	}
	if age > 40*time.Second {
		t.Errorf("output_tps cleared %v after the last request, want about 31 s", age)
	}
	if prev.OutputTPS <= 0 {
		t.Errorf("output_tps was not positive before it was cleared: %v", prev)
	}
	if cleared.LastMeanInputTPS != prev.LastMeanInputTPS || cleared.LastMeanInputTPS <= 0 {
		t.Errorf("last_mean_input_tps %v -> %v: staleness must keep it", prev.LastMeanInputTPS, cleared.LastMeanInputTPS)
	}
	if cleared.MaxOutputTPS != prev.MaxOutputTPS || cleared.MaxOutputTPS <= 0 {
		t.Errorf("max_output_tps %v -> %v: staleness must keep it", prev.MaxOutputTPS, cleared.MaxOutputTPS)
	}
	pm := mustScrape(t, e.cl, p.metricsURL)
	if got := pm.value("pylon_model_output_tps", "model", model); got != 0 {
		t.Errorf("pylon_model_output_tps = %v after staleness, want 0", got)
	}
}

// testHubRestart: a hub stopped with SIGTERM and started again on the same
// ports gets the pylon back (its reconnect backoff starts at 1 s), and a
// request succeeds within 2 s of the new hub being ready. The hubs keep
// their startup grace, so a request that arrives before the pylon is back
// waits for it instead of getting a 404.
func testHubRestart(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--ttft-ms", "5", "--token-delay-ms", "5")
	h := e.hub("--proxy-startup-grace-ms", "15000")
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)
	if r := h.stream(t.Context(), e.cl, chat{Content: promptOf(32), OutputTokens: 2}); !r.ok(2) {
		t.Fatalf("before the restart: %v", r)
	}

	termAt := time.Now()
	h.stop()
	exited := time.Now()
	h2 := e.hubAt(h)
	t.Logf("old hub exited %v after SIGTERM; new hub ready %v after that", exited.Sub(termAt), h2.readyAt.Sub(exited))
	if gap := h2.readyAt.Sub(exited); gap > 2*time.Second {
		t.Errorf("the new hub took %v to become ready", gap)
	}

	var last streamResult
	took := waitEvery(t, 50*time.Millisecond, 10*time.Second, "a request to succeed through the new hub", func() (bool, string) {
		last = h2.stream(t.Context(), e.cl, chat{Content: promptOf(32), OutputTokens: 2, Timeout: 5 * time.Second})
		return last.ok(2), last.String()
	})
	since := time.Since(h2.readyAt)
	t.Logf("first success %v after the new hub was ready (polling took %v)", since, took)
	// 2 s from the acceptance check, plus slack for two shared cores.
	if since > 3500*time.Millisecond {
		t.Errorf("first request succeeded %v after the new hub was ready, want within about 2 s", since)
	}
	if got := last.Header.Get("x-inference-server-id"); got != "pylon-a" {
		t.Errorf("served by %q, want pylon-a", got)
	}
}

// testPylonKilled: with two clusters under load, SIGKILL one pylon while it
// has a long pending request and streams in flight. Requests that had not
// started streaming are retried on the other cluster and succeed; streams
// in flight on the killed pylon end (truncated) instead of hanging; every
// later request succeeds on the survivor.
func testPylonKilled(t *testing.T) {
	e := newEnv(t)
	flags := []string{"--prefill-tokens-per-s", "4000", "--ttft-ms", "10", "--token-delay-ms", "20"}
	ma, mb := e.mock(flags...), e.mock(flags...)
	h := e.hub()
	// A valid input TPS from the start on both: a pylon still at 0 TPS
	// scores as infinite and would get no traffic once the other learned
	// its rate, so it would never learn its own. Admission is not under
	// test here.
	pflags := []string{"--initial-input-tps", "4000", "--pylon-queue-mismatch-retry-enabled=false"}
	pa := e.pylon(h, ma, "pylon-a", pflags...)
	pb := e.pylon(h, mb, "pylon-b", pflags...)
	e.waitRegistered(h, pa, pb)

	// Load: workers stream 1.2 s answers to short prompts. A slow request
	// (4000 prompt tokens, over 1 s of prefill, more than all workers'
	// prompts together) is sent now and then until one is pending on
	// pylon-a: it is the request that must be retried.
	const workers, out, short, slow = 6, 60, 512, 4000
	ctx := t.Context()
	stop := make(chan struct{})
	type result struct {
		streamResult
		want int // content tokens of a complete answer
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})
	run := func(tokens, out int) {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(tokens), OutputTokens: out, Timeout: 20 * time.Second})
		mu.Lock()
		results = append(results, result{r, out})
		mu.Unlock()
	}
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				run(short, out)
			}
		})
	}
	var lastSlow time.Time
	slowSent := 0
	waitFor(t, 15*time.Second, "pylon-a to hold a slow pending request and two streams", func() (bool, string) {
		pm, err := scrape(e.cl, pa.metricsURL)
		if err != nil {
			return false, err.Error()
		}
		pendingTokens := pm.value("pylon_requests_state_input_tokens", "model", model, "state", "upstream_connecting")
		streaming := pm.value("pylon_requests_state", "model", model, "state", "output_generation")
		if pendingTokens >= slow && streaming >= 2 {
			return true, ""
		}
		if pendingTokens < slow && slowSent < 8 && time.Since(lastSlow) > 400*time.Millisecond {
			slowSent++
			lastSlow = time.Now()
			wg.Go(func() { run(slow, 4) })
		}
		return false, fmt.Sprintf("pending input tokens=%v streaming=%v slow sent=%d", pendingTokens, streaming, slowSent)
	})
	pa.kill()
	killedAt := time.Now()
	// New requests keep arriving while the hub notices: the load runs on
	// until pylon-a is gone from the hub's state and every worker has
	// finished a request it started after the kill.
	waitFor(t, 15*time.Second, "the hub to drop pylon-a and the workers to go on", func() (bool, string) {
		st, err := h.state(e.cl)
		if err != nil {
			return false, err.Error()
		}
		if _, ok := st.cluster(model, "pylon-a"); ok {
			return false, "pylon-a still in /debug/state"
		}
		mu.Lock()
		defer mu.Unlock()
		after := 0
		for _, r := range results {
			if r.Start.After(killedAt) {
				after++
			}
		}
		return after >= workers, fmt.Sprintf("%d requests started after the kill have ended", after)
	})
	close(stop)
	wg.Wait()

	truncated := 0
	for i, r := range results {
		switch {
		case r.Status != http.StatusOK && r.Err == nil:
			t.Errorf("request %d got %v: a request that had not started streaming must be retried", i, r)
		case r.ok(r.want):
		case r.Header.Get("x-inference-server-id") == "pylon-a" && r.Start.Before(killedAt):
			truncated++ // in flight on the killed pylon: truncated or broken, never hung
		default:
			t.Errorf("request %d failed: %v", i, r)
		}
		if r.End.After(killedAt.Add(15 * time.Second)) {
			t.Errorf("request %d ended %v after the kill", i, r.End.Sub(killedAt))
		}
	}
	hm := mustScrape(t, e.cl, h.metricsURL)
	failover := hm.value("stargate_proxy_retries_total", "reason", "connect_failover")
	t.Logf("%d requests (%d slow), %d streams cut by the kill, %v connect_failover retries", len(results), slowSent, truncated, failover)
	if truncated == 0 {
		t.Errorf("no stream in flight on pylon-a was cut by the kill")
	}
	if failover < 1 {
		t.Errorf("stargate_proxy_retries_total{reason=connect_failover} = %v, want >= 1 (the pending request retried)", failover)
	}

	for i := range 5 {
		r := h.stream(ctx, e.cl, chat{Content: promptOf(64), OutputTokens: 4})
		if !r.ok(4) || r.Header.Get("x-inference-server-id") != "pylon-b" {
			t.Errorf("request %d after the kill: %v, want a complete stream from pylon-b", i, r)
		}
	}
	st, err := h.state(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.cluster(model, "pylon-a"); ok {
		t.Errorf("/debug/state still routes to the killed pylon-a")
	}
}

// testClientCancel: a client that leaves mid-stream cancels the request all
// the way to the engine (hub -> tunnel -> pylon -> engine): the mock stops
// running it and counts an abort.
func testClientCancel(t *testing.T) {
	e := newEnv(t)
	m := e.mock("--ttft-ms", "10", "--token-delay-ms", "20")
	h := e.hub()
	p := e.pylon(h, m, "pylon-a")
	e.waitRegistered(h, p)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := h.send(ctx, e.cl, chat{Content: promptOf(64), OutputTokens: 500}) // 10 s of decode
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sr := newSSEReader(resp.Body)
	for {
		data, err := sr.next()
		if err != nil {
			t.Fatalf("reading the first event: %v", err)
		}
		if strings.Contains(data, `"content":"`) && !strings.Contains(data, `"content":""`) {
			break
		}
	}
	before := mustScrape(t, e.cl, m.url+"/metrics")
	if got := before.value("vllm:num_requests_running"); got != 1 {
		t.Fatalf("vllm:num_requests_running = %v while streaming, want 1", got)
	}
	aborts := before.value("vllm:request_success_total", "finished_reason", "abort")

	cancel()
	_ = resp.Body.Close()
	took := waitFor(t, 3*time.Second, "the engine to drop the cancelled request", func() (bool, string) {
		mm, err := scrape(e.cl, m.url+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		running := mm.value("vllm:num_requests_running")
		ab := mm.value("vllm:request_success_total", "finished_reason", "abort")
		return running == 0 && ab == aborts+1, fmt.Sprintf("running=%v aborts=%v", running, ab)
	})
	t.Logf("engine dropped the request %v after the client left", took)
	waitFor(t, 3*time.Second, "the pylon to count the request cancelled", func() (bool, string) {
		pm, err := scrape(e.cl, p.metricsURL)
		if err != nil {
			return false, err.Error()
		}
		n := pm.value("pylon_requests_total", "model", model, "status", "cancelled")
		return n == 1, fmt.Sprint(n)
	})
}
