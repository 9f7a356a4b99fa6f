package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

func TestRotate(t *testing.T) {
	in := []string{"a", "b", "c"}
	for round, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotate(in, round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	got := rotate(in, 1)
	got[0] = "x"
	if in[1] != "b" {
		t.Error("rotate shares its result with its argument")
	}
	if rotate([]string(nil), 3) != nil {
		t.Error("rotate of nothing")
	}
	// Over as many rounds as paths, every path runs first exactly once.
	first := map[string]int{}
	for r := range len(allPaths) {
		first[rotate(allPaths, r)[0].Name]++
	}
	for _, p := range allPaths {
		if first[p.Name] != 1 {
			t.Errorf("%s ran first %d times in %d rounds", p.Name, first[p.Name], len(allPaths))
		}
	}
}

func TestPathsByName(t *testing.T) {
	ps, err := pathsByName("chain, direct,floor-2")
	if err != nil || !slices.Equal(names(ps), []string{"direct", "floor-2", "chain"}) {
		t.Errorf("pathsByName = %v, %v; want allPaths' order", names(ps), err)
	}
	if ps, _ := pathsByName("all"); len(ps) != len(allPaths) {
		t.Errorf("all = %d paths", len(ps))
	}
	if _, err := pathsByName("direct,floor-9"); err == nil || !strings.Contains(err.Error(), "floor-9") {
		t.Errorf("unknown path: %v", err)
	}
	for _, p := range allPaths {
		if p.Tiers[len(p.Tiers)-1] != "engine" {
			t.Errorf("%s does not end at the engine", p.Name)
		}
	}
}

func TestChatBody(t *testing.T) {
	for _, tc := range []struct {
		size   int
		stream bool
		key    string
	}{{1024, false, ""}, {1024, true, "benchpath-007"}, {256 << 10, true, ""}, {32<<10 + 3, false, "k"}} {
		b := chatBody(tc.size, tc.stream, tc.key, 16)
		if len(b) != tc.size {
			t.Errorf("size %d: %d bytes", tc.size, len(b))
		}
		var v struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
			Stream    bool   `json:"stream"`
			Key       string `json:"prompt_cache_key"`
			Messages  []struct{ Role, Content string }
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		if v.Model != model || v.MaxTokens != 16 || v.Stream != tc.stream || v.Key != tc.key || len(v.Messages) != 2 || v.Messages[1].Role != "user" {
			t.Errorf("size %d: %+v", tc.size, v)
		}
	}
	// Below its fixed part a body is just that part, still valid.
	if b := chatBody(10, false, "", 16); !json.Valid(b) || len(b) <= 10 {
		t.Errorf("tiny body %q", b)
	}
}

func TestRequesterPerPath(t *testing.T) {
	ep := stack.Endpoints{Engines: map[string]string{cluster: "http://e"}, FloorHops: []string{"http://f1", "http://f2"},
		Hub: "http://h", Gateway: "http://g", GatewayToken: "gwt", APIKey: "sk-x"}
	r := row{Size: 2048, Clients: 3, Stream: false}
	get := func(name string) path { p, _ := pathsByName(name); return p[0] }
	ctx := context.Background()

	spine := newRequester(get("spine"), r, ep, 16)
	req1, _ := spine.request(ctx, 0, 0)
	req2, _ := spine.request(ctx, 1, 0)
	if req1.URL.String() != "http://h/v1/chat/completions" || req1.Header.Get("Authorization") != "Bearer gwt" ||
		req1.Header.Get("X-Model") != model || req1.Header.Get("X-Input-Tokens") != "512" {
		t.Errorf("spine request %s %v", req1.URL, req1.Header)
	}
	if id1, id2 := req1.Header.Get("X-Request-Id"), req2.Header.Get("X-Request-Id"); id1 == "" || id1 == id2 {
		t.Errorf("spine request ids %q, %q: want unique", id1, id2)
	}
	// The pylon refuses an unstreamed chat: hub + pylon always streams,
	// and a non-streaming row reads that stream whole.
	if !strings.Contains(string(spine.bodies[0]), `"stream":true`) || spine.sse {
		t.Errorf("spine in a non-streaming row: sse %v, body %.80s", spine.sse, spine.bodies[0])
	}

	key := newRequester(get("chain-key"), r, ep, 16)
	if len(key.bodies) != 3 || string(key.bodies[0]) == string(key.bodies[1]) || key.headers.Get("Authorization") != "Bearer sk-x" {
		t.Errorf("chain-key: %d bodies, auth %q", len(key.bodies), key.headers.Get("Authorization"))
	}
	chain := newRequester(get("chain"), row{Size: 2048, Clients: 3, Stream: true}, ep, 16)
	if len(chain.bodies) != 1 || strings.Contains(string(chain.bodies[0]), "prompt_cache_key") || !chain.sse {
		t.Errorf("chain: %d bodies, sse %v", len(chain.bodies), chain.sse)
	}
	for name, want := range map[string]string{"direct": "http://e", "floor-1": "http://f1", "floor-2": "http://f2"} {
		q := newRequester(get(name), r, ep, 16)
		req, _ := q.request(ctx, 2, 0)
		if req.URL.String() != want+"/v1/chat/completions" || req.Header.Get("Authorization") != "" || req.ContentLength != 2048 {
			t.Errorf("%s: %s auth %q length %d", name, req.URL, req.Header.Get("Authorization"), req.ContentLength)
		}
	}
}

func TestRowNames(t *testing.T) {
	r := row{Size: 256 << 10, Clients: 1, Stream: true}
	if r.String() != "256KiB, 1 client, streaming" || r.file() != "256KiB-c1-sse" {
		t.Errorf("%q %q", r.String(), r.file())
	}
	if s := (row{Size: 1047, Clients: 32}).String(); s != "1047B, 32 clients, non-streaming" {
		t.Errorf("%q", s)
	}
}
