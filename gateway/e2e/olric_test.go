package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOlricGateways: three gateway processes form one Olric cluster. A
// session's first turn through gateway 1 makes its second turn through
// gateway 2 a last-cluster hit; after gateway 3 is killed (SIGKILL, no
// graceful leave), every request through gateways 1 and 2 still succeeds.
func TestOlricGateways(t *testing.T) {
	e := newEnv(t)
	hubURL := e.backend()
	flags := []string{"--insecure-no-auth", "--last-cluster-enabled"}
	_, gw1, m1, seed := e.olricGateway(hubURL, nil, flags...)
	_, gw2, m2, _ := e.olricGateway(hubURL, []string{seed}, flags...)
	p3, gw3, _, _ := e.olricGateway(hubURL, []string{seed}, flags...)
	waitMetric(t, e, m1, "llm_api_gateway_olric_cluster_members", 3)
	if got := metric(t, e, m1, "olric_partitions_primary_owned"); got < 0 {
		t.Error("olric_* collector series missing")
	}

	chat := func(gw, sess string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"prompt_cache_key":%q}`, model, sess)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", gw, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", gw, resp.StatusCode, b)
		}
	}
	chat(gw1, "olric-session")
	// The write is asynchronous; the next turn may only race it by the
	// few microseconds of a local Put, so wait for gateway 1 to count it.
	waitMetric(t, e, m1, `llm_api_gateway_last_cluster_writes_total{result="success"}`, 1)
	chat(gw2, "olric-session")
	if got := metric(t, e, m2, `llm_api_gateway_last_cluster_lookups_total{result="hit"}`); got != 1 {
		t.Fatalf("gateway 2 hits = %v, want 1", got)
	}
	chat(gw3, "olric-other")

	p3.kill()
	for i := range 30 {
		gw := gw1
		if i%2 == 1 {
			gw = gw2
		}
		chat(gw, "after-kill-"+strconv.Itoa(i%6))
	}
}

var sampleLine = regexp.MustCompile(`(?m)^(\S+) (\S+)$`)

func metric(t *testing.T, e *env, url, series string) float64 {
	t.Helper()
	resp, err := e.cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, m := range sampleLine.FindAllStringSubmatch(string(b), -1) {
		if m[1] == series {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v
		}
	}
	return -1
}

func waitMetric(t *testing.T, e *env, url, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for metric(t, e, url, series) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v (now %v)", series, want, metric(t, e, url, series))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOlricRateLimit: three gateway processes share one request limit
// through Olric. 45 concurrent requests (15 per gateway) against 20 per
// minute admit exactly 20; the rest get 429 with Retry-After.
func TestOlricRateLimit(t *testing.T) {
	e := newEnv(t)
	hubURL := e.backend()
	flags := []string{"--insecure-no-auth", "--model-config-json", `{"*":{"requests_per_minute":20}}`}
	_, gw1, _, seed := e.olricGateway(hubURL, nil, flags...)
	_, gw2, _, _ := e.olricGateway(hubURL, []string{seed}, flags...)
	_, gw3, m3, _ := e.olricGateway(hubURL, []string{seed}, flags...)
	waitMetric(t, e, m3, "llm_api_gateway_olric_cluster_members", 3)
	// The cluster clients learn the final partition owners at their next
	// routing refresh (200 ms here); before that an add may run on a
	// former owner (docs/design/sessions.md#bound-across-replicas).
	time.Sleep(500 * time.Millisecond)

	type result struct {
		status     int
		retryAfter string
	}
	results := make(chan result, 45)
	before := time.Now().Unix() / 60
	var wg sync.WaitGroup
	for i := range 45 {
		gw := []string{gw1, gw2, gw3}[i%3]
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
			req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
			resp, err := e.cl.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header.Get("Retry-After")}
		})
	}
	wg.Wait()
	close(results)
	after := time.Now().Unix() / 60
	counts := map[int]int{}
	for r := range results {
		counts[r.status]++
		if r.status == 429 && r.retryAfter == "" {
			t.Error("429 without Retry-After")
		}
	}
	if before != after {
		t.Skipf("the run crossed a minute boundary (two windows); counts %v", counts)
	}
	if counts[200] != 20 || counts[429] != 25 {
		t.Fatalf("statuses %v, want 20 x 200 and 25 x 429", counts)
	}
}
