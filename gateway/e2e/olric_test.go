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
	h, secret := e.backend(), e.secret("olric-secret")
	flags := []string{"--insecure-no-auth", "--last-cluster-enabled"}
	_, gw1, m1, seed := e.olricGateway(h, secret, nil, flags...)
	_, gw2, m2, _ := e.olricGateway(h, secret, []string{seed}, flags...)
	p3, gw3, _, _ := e.olricGateway(h, secret, []string{seed}, flags...)
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

// metric returns the value of series on the metrics page at url, -1 when
// the page does not list it.
func metric(t *testing.T, e *env, url, series string) float64 {
	t.Helper()
	v, err := metricValue(e, url, series)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func metricValue(e *env, url, series string) (float64, error) {
	resp, err := e.cl.Get(url)
	if err != nil {
		return 0, err
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, m := range sampleLine.FindAllStringSubmatch(string(b), -1) {
		if m[1] == series {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v, nil
		}
	}
	return -1, nil
}

// waitMetric polls the metrics page at url until series reads want.
func waitMetric(t *testing.T, e *env, url, series string, want float64) {
	t.Helper()
	waitMetricWithin(t, e, url, series, want, 15*time.Second)
}

// waitMetricWithin is waitMetric with its own bound.
func waitMetricWithin(t *testing.T, e *env, url, series string, want float64, within time.Duration) {
	t.Helper()
	err := poll(within, 50*time.Millisecond, func() error {
		v, err := metricValue(e, url, series)
		if err == nil && v != want {
			err = fmt.Errorf("%s = %v, want %v", series, v, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitPartitionsSettled polls the members' olric_partitions_primary_owned
// until they add up to every partition and have not changed over more
// than two --olric-routing-refresh periods. The cluster clients learn
// the partition owners only at their next refresh, and until then an add
// may run on a former owner, non-atomically
// (docs/design/sessions.md#bound-across-replicas): owners that stayed put
// for two periods are owners every client has fetched.
func waitPartitionsSettled(t *testing.T, e *env, metrics ...string) {
	t.Helper()
	waitOwnersStable(t, e, 15*time.Second, false, metrics...)
}

// waitOwnersStable polls olric_partitions_primary_owned on metrics until
// the counts add up to every partition (at least, with several owners per
// partition allowed) and have not changed over more than two
// --olric-routing-refresh periods, failing the test after within.
func waitOwnersStable(t *testing.T, e *env, within time.Duration, severalOwners bool, metrics ...string) {
	t.Helper()
	const partitions = 23 // --olric-partition-count's default
	var last string
	var since time.Time
	err := poll(within, olricRoutingRefresh/4, func() error {
		var owned []string
		total := 0.0
		for _, url := range metrics {
			v, err := metricValue(e, url, "olric_partitions_primary_owned")
			if err != nil {
				return err
			}
			owned = append(owned, strconv.FormatFloat(v, 'f', -1, 64))
			total += v
		}
		now := strings.Join(owned, ",")
		if total < partitions || (!severalOwners && total != partitions) {
			last = ""
			return fmt.Errorf("members own %s partitions, want %d in all", now, partitions)
		}
		if now != last {
			last, since = now, time.Now()
		}
		if held := time.Since(since); held <= 2*olricRoutingRefresh {
			return fmt.Errorf("owners %s unchanged for only %v", now, held)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// windowOf is the one-minute rate-limit window a gateway admitted or
// refused a request in, from its x-ratelimit-reset-requests (the time
// from the gateway's clock reading to the window's end, in whole
// milliseconds) and the request's send and receive times on this host's
// clock, which the gateways share: the window's end lies in
// [sent+reset, received+reset] and is a multiple of a minute, and a
// request shorter than a minute leaves only one such multiple.
func windowOf(sent, received time.Time, reset string) (int64, error) {
	d, err := time.ParseDuration(reset)
	if err != nil {
		return 0, fmt.Errorf("x-ratelimit-reset-requests %q: %w", reset, err)
	}
	const minute = int64(time.Minute / time.Millisecond)
	lo, hi := sent.UnixMilli()+d.Milliseconds(), received.UnixMilli()+d.Milliseconds()
	end := (lo + minute - 1) / minute * minute
	if end > hi {
		return 0, fmt.Errorf("no window ends in [%d, %d] ms", lo, hi)
	}
	return end/minute - 1, nil
}

// TestOlricRateLimit: three gateway processes in the exact rate-limit
// mode share one request limit through Olric. 45 concurrent requests (15 per gateway) against 20 per
// minute admit exactly 20 in each window they fall in, whatever the
// wall clock: each answer's x-ratelimit-reset-requests places it in its
// window, so a run that straddles a minute boundary is checked window by
// window instead of skipped. Refusals are 429 with Retry-After.
func TestOlricRateLimit(t *testing.T) {
	e := newEnv(t)
	h, secret := e.backend(), e.secret("olric-secret")
	const limit = 20
	// The exact mode, named because the default (local) may pass a limit
	// by a bounded excess across replicas. The store's bounds are far above
	// a loopback round trip even on a loaded machine, and a store failure
	// is a 503 rather than a silent fail-open admission: the counts are
	// exact or the test says why not.
	flags := []string{"--insecure-no-auth", "--model-config-json", fmt.Sprintf(`{"*":{"requests_per_minute":%d}}`, limit),
		"--rate-limit-mode", "exact",
		"--rate-limit-store-timeout", "10s", "--olric-client-timeout", "10s", "--rate-limit-fail-open=false"}
	_, gw1, m1, seed := e.olricGateway(h, secret, nil, flags...)
	_, gw2, m2, _ := e.olricGateway(h, secret, []string{seed}, flags...)
	_, gw3, m3, _ := e.olricGateway(h, secret, []string{seed}, flags...)
	for _, m := range []string{m1, m2, m3} {
		waitMetric(t, e, m, "llm_api_gateway_olric_cluster_members", 3)
	}
	waitPartitionsSettled(t, e, m1, m2, m3)

	type result struct {
		status     int
		retryAfter string
		window     int64
		err        error
	}
	results := make(chan result, 45)
	var wg sync.WaitGroup
	for i := range 45 {
		gw := []string{gw1, gw2, gw3}[i%3]
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
			req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
			sent := time.Now()
			resp, err := e.cl.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			received := time.Now()
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			w, err := windowOf(sent, received, resp.Header.Get("x-ratelimit-reset-requests"))
			if err != nil {
				err = fmt.Errorf("%s: %d %s: %w", gw, resp.StatusCode, b, err)
			}
			results <- result{resp.StatusCode, resp.Header.Get("Retry-After"), w, err}
		})
	}
	wg.Wait()
	close(results)
	type counts struct{ ok, limited, other int }
	byWindow := map[int64]*counts{}
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		c := byWindow[r.window]
		if c == nil {
			c = &counts{}
			byWindow[r.window] = c
		}
		switch r.status {
		case http.StatusOK:
			c.ok++
		case http.StatusTooManyRequests:
			c.limited++
			if r.retryAfter == "" {
				t.Error("429 without Retry-After")
			}
		default:
			c.other++
		}
	}
	for w, c := range byWindow {
		n := c.ok + c.limited + c.other
		if want := min(n, limit); c.ok != want || c.limited != n-want || c.other != 0 {
			t.Errorf("window %d: %d x 200, %d x 429, %d other of %d requests; want %d x 200 and %d x 429",
				w, c.ok, c.limited, c.other, n, want, n-want)
		}
	}
}

// TestWindowOf: requests admitted just before and just after a minute
// boundary, whose round trips both straddle it, land in the windows their
// gateway counted them in; a reset that names no window end is an error.
func TestWindowOf(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	const m = int64(60_000)
	for _, tc := range []struct {
		sent, received, admitted int64 // ms
		want                     int64
	}{
		{100*m - 5, 100*m + 5, 100*m - 1, 99}, // admitted 1 ms before the boundary
		{100*m - 5, 100*m + 5, 100 * m, 100},  // admitted on it
		{100*m - 5, 100*m + 5, 100*m + 4, 100},
		{100 * m, 100*m + 30_000, 100*m + 29_999, 100},
	} {
		end := (tc.admitted/m + 1) * m
		reset := (time.Duration(end-tc.admitted) * time.Millisecond).String()
		got, err := windowOf(at(tc.sent), at(tc.received), reset)
		if err != nil || got != tc.want {
			t.Errorf("sent %d, received %d, admitted %d (reset %s): window %d, %v; want %d", tc.sent, tc.received, tc.admitted, reset, got, err, tc.want)
		}
	}
	if _, err := windowOf(at(100*m+10), at(100*m+20), "1s"); err == nil {
		t.Error("a reset that ends no window was accepted")
	}
}
