package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// Bounds of TestPoisonedEngineStats: what no statistic of this fleet can
// reach, whatever an engine reports. The engines' KV caches hold 1.6M
// tokens each and prefill at most 133k tokens/s.
const (
	// maxStatCount bounds every count, token and millisecond statistic:
	// about 60 times one engine's KV capacity.
	maxStatCount = 1e8
	// maxStatRate bounds every throughput statistic, in tokens per
	// second: about 75 times the fastest prefill here.
	maxStatRate = 1e7
	// poisonRequests is how many requests each poison phase sends at
	// least, checking the hub's state after every four.
	poisonRequests = 24
)

// TestPoisonedEngineStats: two clusters; b's engine reports poisoned
// statistics to its pylon, one poison at a time (after a phase without
// poison, for comparison): NaN in every number,
// negative counts, the largest uint64 in every count, then stale numbers
// (no stats events, a frozen KV body). Each phase lasts until the pylon
// has polled the poisoned KV body at least twice.
//
// Bounds: every request is served (0 failures); the hub's /debug/state
// always answers valid JSON whose statistics are all non-negative, within
// maxStatCount and maxStatRate, with KV used and free within the
// capacity.
func TestPoisonedEngineStats(t *testing.T) {
	st := startStack(t, stack.Options{Fleet: fleet(2)})
	ep := st.Endpoints()
	hc := httpClient(t)
	cl := newClient(hc, ep.APIKey)
	bad := ep.Engines["b"]
	peak := map[string]float64{}

	// none first: the same load with honest statistics, for comparison.
	for _, poison := range []string{"none", "nan", "negative", "huge", "stale"} {
		t.Run(poison, func(t *testing.T) {
			if err := put(t.Context(), hc, bad+"/test-control/stats", `{"poison":"`+poison+`"}`); err != nil {
				t.Fatal(err)
			}
			reads := readControl(t, hc, bad).KVStatsReads
			var rs []result
			states := 0
			for len(rs) < poisonRequests || readControl(t, hc, bad).KVStatsReads < reads+2 {
				rs = append(rs, runN(4, 4, func(int) result { return cl.chat(t.Context(), ep.Gateway, "", 10) })...)
				checkHubState(t, hc, ep.HubState, peak)
				states++
			}
			t.Logf("%d requests (%s), %d on b; %d hub states checked", len(rs), tally(rs),
				count(rs, func(r result) bool { return r.engine == "b" }), states)
			if n := count(rs, func(r result) bool { return r.outcome != complete }); n != 0 {
				t.Errorf("%d requests failed (bound 0)", n)
			}
		})
	}
	if err := put(t.Context(), hc, bad+"/test-control/stats", `{"poison":"none"}`); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(peak))
	for k := range peak {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%g", k, peak[k])
	}
	t.Logf("largest value of each statistic seen:%s", b.String())
}

// checkHubState reads the hub's /debug/state and fails the test for any
// statistic that is negative or beyond the bounds, or a body that is not
// JSON (a NaN that reached the hub would make its encoder fail). It
// records each statistic's largest value in peak.
func checkHubState(t *testing.T, c *http.Client, url string, peak map[string]float64) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hub /debug/state: %d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("hub /debug/state is not JSON: %v", err)
	}
	walkStats(doc, "", false, func(path, key string, v float64) {
		if strings.Contains(key, "_unix_") {
			return // a timestamp, not a statistic
		}
		peak[key] = max(peak[key], v)
		limit := maxStatCount
		if strings.Contains(key, "tps") {
			limit = maxStatRate
		}
		if math.IsNaN(v) || v < 0 || v > limit {
			t.Errorf("hub state %s = %v (bounds 0 to %g)", path, v, limit)
		}
	})
	walkKV(t, doc, "")
}

// walkStats calls check for every number inside a "stats" or
// "stats_without_reservations" object of doc (the statistics the hub
// routes on), with its path and its own key.
func walkStats(doc any, path string, inStats bool, check func(path, key string, v float64)) {
	switch d := doc.(type) {
	case map[string]any:
		for k, v := range d {
			if n, ok := v.(json.Number); ok {
				if inStats {
					f, err := n.Float64()
					if err != nil {
						f = math.NaN()
					}
					check(path+"."+k, k, f)
				}
				continue
			}
			walkStats(v, path+"."+k, inStats || k == "stats" || k == "stats_without_reservations", check)
		}
	case []any:
		for i, v := range d {
			walkStats(v, fmt.Sprintf("%s[%d]", path, i), inStats, check)
		}
	}
}

// walkKV fails the test for a stats object whose KV used or free exceeds
// its capacity.
func walkKV(t *testing.T, doc any, path string) {
	t.Helper()
	switch d := doc.(type) {
	case map[string]any:
		capacity, okC := number(d["kv_cache_capacity_tokens"])
		for _, k := range []string{"kv_cache_used_tokens", "kv_cache_free_tokens"} {
			if v, ok := number(d[k]); ok && okC && v > capacity {
				t.Errorf("hub state %s.%s = %v above the capacity %v", path, k, v, capacity)
			}
		}
		for k, v := range d {
			walkKV(t, v, path+"."+k)
		}
	case []any:
		for i, v := range d {
			walkKV(t, v, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}
