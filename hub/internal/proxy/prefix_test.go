package proxy

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// recordingIndex is a PrefixIndex that answers a fixed holder list and
// records every call.
type recordingIndex struct {
	holders []routing.PrefixHolder
	mu      sync.Mutex
	matches []prefixhash.Summary
	marks   []string // model/cluster
}

func (x *recordingIndex) Match(model string, s prefixhash.Summary, dst []routing.PrefixHolder) []routing.PrefixHolder {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.matches = append(x.matches, s)
	return append(dst, x.holders...)
}

func (x *recordingIndex) Mark(model string, s prefixhash.Summary, clusterID string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.marks = append(x.marks, model+"/"+clusterID)
}

func (x *recordingIndex) calls() (matches, marks int, marked []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.matches), len(x.marks), append([]string(nil), x.marks...)
}

// prefixPicker chooses cluster ca as a cache-tier decision that asks for
// a mark, and keeps the last request's prefix match.
type prefixPicker struct {
	mark bool
	mu   sync.Mutex
	seen routing.PrefixMatch
}

func (p *prefixPicker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	p.mu.Lock()
	p.seen = req.Prefix
	p.mu.Unlock()
	for i := range snap.Clusters {
		if snap.Clusters[i].ClusterID == "ca" && !req.IsExcluded("ca") {
			d := lb.NewDecision(snap, i, 1, req)
			d.PrefixTier, d.PrefixMark = routing.PrefixTierCache, p.mark
			return d, true
		}
	}
	return routing.Decision{}, false
}

func testSummary(blocks int) prefixhash.Summary {
	hashes := make([]uint64, blocks)
	for i := range hashes {
		hashes[i] = 0xabc0 + uint64(i)
	}
	return prefixhash.Summarize(hashes, prefixhash.DefaultBlockTokens)
}

// TestPromptPrefixRoutesAndMarks: a prefix-aware route sees the index's
// answer for the summary, the serving cluster is marked once its 2xx head
// arrives, the summary never reaches the pylon, and a request without a
// session key is placed inside the cluster by its prefix anchor.
func TestPromptPrefixRoutesAndMarks(t *testing.T) {
	t.Parallel()
	sum := testSummary(100)
	for _, tc := range []struct {
		name, key, wantKey string
		status             int
		mark               bool
		wantMarks          int
	}{
		{"session key kept", "mt:v1:session:abc", "mt:v1:session:abc", http.StatusOK, true, 1},
		{"payload key replaced by the anchor", "mt:v1:payload:ff", prefixhash.AnchorKey(sum), http.StatusOK, true, 1},
		{"no key gets the anchor", "", prefixhash.AnchorKey(sum), http.StatusOK, true, 1},
		{"overflow does not mark", "", prefixhash.AnchorKey(sum), http.StatusOK, false, 0},
		{"an error answer does not mark", "mt:v1:session:abc", "mt:v1:session:abc", http.StatusBadRequest, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := &recordingIndex{holders: []routing.PrefixHolder{{ClusterID: "ca", Blocks: 64}, {ClusterID: "gone", Blocks: 8}}}
			pp := &prefixPicker{mark: tc.mark}
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "prefix", Picker: pp, UsesPrefix: true}},
				func(c *Config) { c.Prefix = x })
			for _, id := range []string{"a1", "a2"} {
				h.backends[id].handle(answer(tc.status))
			}
			hdr := validHeaders()
			hdr.Set(headers.StargatePromptPrefix, prefixhash.FormatHeader(sum))
			if tc.key != "" {
				hdr.Set(headers.CacheAffinityKey, tc.key)
			}
			resp, _ := h.do(hdr, chatBody)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			pp.mu.Lock()
			seen := pp.seen
			pp.mu.Unlock()
			if seen.TotalBlocks != 100 || seen.BlockTokens != prefixhash.DefaultBlockTokens || len(seen.Holders) != 2 || seen.HeldBlocks("ca") != 64 {
				t.Fatalf("picker saw %+v", seen)
			}
			matches, marks, marked := x.calls()
			if matches != 1 || marks != tc.wantMarks || (marks == 1 && marked[0] != model+"/ca") {
				t.Fatalf("index: %d matches, marks %v; want 1 match, %d marks on %s/ca", matches, marked, tc.wantMarks, model)
			}
			var got []received
			for _, id := range []string{"a1", "a2"} {
				got = append(got, h.backends[id].requests()...)
			}
			if len(got) != 1 {
				t.Fatalf("%d upstream requests, want 1", len(got))
			}
			if v := got[0].Header.Get(headers.StargatePromptPrefix); v != "" {
				t.Fatalf("the pylon got the summary %q", v)
			}
			if v := got[0].Header.Get(headers.CacheAffinityKey); v != tc.wantKey {
				t.Fatalf("the pylon got affinity key %q, want %q", v, tc.wantKey)
			}
			if n := testutil.ToFloat64(h.m.prefixSummaries.WithLabelValues(rk, model, "ok")); n != 1 {
				t.Fatalf("prefix_summaries_total{ok} = %v", n)
			}
			wantRouted := 1.0
			if tc.status != http.StatusOK {
				wantRouted = 0
			}
			if n := testutil.ToFloat64(h.m.prefixTiers.WithLabelValues(rk, model, "cache")); n != wantRouted {
				t.Fatalf("prefix_routed_total{cache} = %v, want %v", n, wantRouted)
			}
		})
	}
}

// TestPromptPrefixIgnoredWhenUnusable: a malformed or foreign-version
// summary routes as if none had been sent, and a route that does not use
// prefixes never asks the index; either way the header stops at the hub.
func TestPromptPrefixIgnoredWhenUnusable(t *testing.T) {
	t.Parallel()
	good := prefixhash.FormatHeader(testSummary(10))
	for _, tc := range []struct {
		name, value, result string
		uses                bool
	}{
		{"malformed", "1.16.10.!!", "invalid", true},
		{"another version", "9" + good[1:], "unknown_version", true},
		{"route without prefixes", good, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := &recordingIndex{holders: []routing.PrefixHolder{{ClusterID: "ca", Blocks: 10}}}
			pp := &prefixPicker{mark: true}
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "prefix", Picker: pp, UsesPrefix: tc.uses}},
				func(c *Config) { c.Prefix = x })
			hdr := validHeaders()
			hdr.Set(headers.StargatePromptPrefix, tc.value)
			resp, _ := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if matches, marks, _ := x.calls(); matches != 0 || marks != 0 {
				t.Fatalf("index used: %d matches, %d marks", matches, marks)
			}
			pp.mu.Lock()
			known := pp.seen.Known()
			pp.mu.Unlock()
			if known {
				t.Fatal("the picker saw a summary")
			}
			for _, id := range []string{"a1", "a2"} {
				for _, r := range h.backends[id].requests() {
					if r.Header.Get(headers.StargatePromptPrefix) != "" {
						t.Fatal("the pylon got the summary")
					}
				}
			}
			if tc.result != "" {
				if n := testutil.ToFloat64(h.m.prefixSummaries.WithLabelValues(rk, model, tc.result)); n != 1 {
					t.Fatalf("prefix_summaries_total{%s} = %v", tc.result, n)
				}
			}
		})
	}
}
