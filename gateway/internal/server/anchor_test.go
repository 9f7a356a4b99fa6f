package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/gateway/internal/session"
)

// chatTurn is the body of a keyless chat turn: the system prompt, the
// first user message, then one assistant answer and one user message per
// later turn, as a client re-sends its whole history.
func chatTurn(system, first string, later ...string) string {
	msgs := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": first}}
	for _, u := range later {
		msgs = append(msgs, map[string]string{"role": "assistant", "content": "answer to " + u}, map[string]string{"role": "user", "content": u})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return string(b)
}

// respTurn is chatTurn's history as a Responses input array.
func respTurn(first string, later ...string) string {
	items := []map[string]string{{"role": "developer", "content": "be brief"}, {"role": "user", "content": first}}
	for _, u := range later {
		items = append(items, map[string]string{"type": "message", "role": "assistant", "content": "answer to " + u}, map[string]string{"role": "user", "content": u})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "input": items})
	return string(b)
}

func prepareAnchor(t *testing.T, e request.Endpoint, body string, anchor bool) session.Session {
	t.Helper()
	p, oe := Prepare(e, []byte(body), http.Header{}, "r", Options{DefaultMaxOutputTokens: 1, Anchor: anchor})
	if oe != nil {
		t.Fatal(oe)
	}
	return p.Session
}

// TestConversationAnchor: the anchor is one key across the turns of a
// keyless conversation, whose payload key changes every turn; two
// conversations sharing a system prompt but not their first user message
// get two; a first turn is marked as such so its lookup is skipped; keyed
// sessions, completions and anchors off get none.
func TestConversationAnchor(t *testing.T) {
	for _, c := range []struct {
		name  string
		e     request.Endpoint
		turns []string
		other string
	}{
		{"chat", request.Chat, []string{chatTurn("sys", "a"), chatTurn("sys", "a", "b"), chatTurn("sys", "a", "b", "c")}, chatTurn("sys", "z", "b")},
		{"responses", request.Responses, []string{respTurn("a"), respTurn("a", "b"), respTurn("a", "b", "c")}, respTurn("z", "b")},
	} {
		t.Run(c.name, func(t *testing.T) {
			var first session.Session
			payloads := map[string]bool{}
			for i, body := range c.turns {
				s := prepareAnchor(t, c.e, body, true)
				if s.Source != session.SourcePayload || s.Anchor.Key == "" || s.Anchor.Later != (i > 0) {
					t.Fatalf("turn %d: %+v", i+1, s)
				}
				if i == 0 {
					first = s
				}
				if s.Anchor.Key != first.Anchor.Key {
					t.Errorf("turn %d anchor %s, turn 1's %s", i+1, s.Anchor.Key, first.Anchor.Key)
				}
				payloads[s.AffinityKey] = true
			}
			if len(payloads) != len(c.turns) {
				t.Errorf("payload keys %v: want one per turn", payloads)
			}
			if o := prepareAnchor(t, c.e, c.other, true); o.Anchor.Key == first.Anchor.Key || !o.Anchor.Later {
				t.Errorf("another conversation's anchor %+v, first's %s", o.Anchor, first.Anchor.Key)
			}
			// The anchor changes nothing the hub sees: the payload key is
			// the same with it off.
			if off := prepareAnchor(t, c.e, c.turns[1], false); off.Anchor != (session.Anchor{}) || off.AffinityKey != prepareAnchor(t, c.e, c.turns[1], true).AffinityKey {
				t.Errorf("anchor off: %+v", off)
			}
		})
	}
	// The vector of docs/design/sessions.md: the sha256 of
	// [{"role":"system","content":"sys"},{"role":"user","content":"a"}
	// (no closing bracket).
	if got, want := prepareAnchor(t, request.Chat, chatTurn("sys", "a", "b"), true).Anchor.Key,
		"ca:v1:ceebde42e0b5491da8b7b22957b42bb261848851e5cb3f5477d059381af9b79a"; got != want {
		t.Errorf("anchor %s, want %s", got, want)
	}
	// A Responses string input is always a first turn; an empty or null
	// previous_response_id continues nothing.
	for _, body := range []string{`{"model":"m","input":"hi"}`, `{"model":"m","previous_response_id":"","input":"hi"}`, `{"model":"m","previous_response_id":null,"input":"hi"}`} {
		if s := prepareAnchor(t, request.Responses, body, true); s.Anchor.Key == "" || s.Anchor.Later {
			t.Errorf("%s: %+v", body, s.Anchor)
		}
	}
	for _, c := range []struct {
		name string
		e    request.Endpoint
		body string
	}{
		{"keyed", request.Chat, `{"model":"m","prompt_cache_key":"k","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`},
		{"no user message", request.Chat, `{"model":"m","messages":[{"role":"system","content":"a"}]}`},
		{"completions", request.Completions, `{"model":"m","prompt":"a long prompt"}`},
		{"responses without a user item", request.Responses, `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`},
		{"responses continuation, string input", request.Responses, `{"model":"m","previous_response_id":"resp_1","input":"and then?"}`},
		{"responses continuation, array input", request.Responses, `{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"and then?"}]}`},
	} {
		if s := prepareAnchor(t, c.e, c.body, true); s.Anchor != (session.Anchor{}) {
			t.Errorf("%s: anchor %+v, want none", c.name, s.Anchor)
		}
	}
}

// TestConversationAnchorHint: through the handler, a keyless
// conversation's later turn carries the cluster that served its previous
// turn as x-stargate-last-cluster-id, while the hub still gets the turn's
// own payload key; the first turn skips its lookup and only records.
// Without the anchor the later turn carries no hint.
func TestConversationAnchorHint(t *testing.T) {
	for _, on := range []bool{true, false} {
		store := lastcluster.NewLRU(100, time.Minute)
		h := newHarness(t, opts{store: store, anchor: on})
		turn := func(body, wantHint string) {
			t.Helper()
			h.post("/v1/chat/completions", body, nil)
			h.tracker.Wait(context.Background())
			req, _ := h.hub.last()
			if got := req.Header.Get("x-stargate-last-cluster-id"); got != wantHint {
				t.Errorf("anchor %v: hint %q, want %q", on, got, wantHint)
			}
			if got, want := req.Header.Get("x-cache-affinity-key"), prepareAnchor(t, request.Chat, body, on).AffinityKey; got != want {
				t.Errorf("anchor %v: affinity key %q, want the payload key %q", on, got, want)
			}
		}
		turn(chatTurn("sys", "a"), "")
		if on {
			turn(chatTurn("sys", "a", "b"), "cluster-a")
			h.hub.set(func(f *fakeHub) { f.cluster = "cluster-b" })
			turn(chatTurn("sys", "a", "b", "c"), "cluster-a")
			turn(chatTurn("sys", "a", "b", "c", "d"), "cluster-b")
			// Another conversation with the same system prompt finds
			// nothing.
			turn(chatTurn("sys", "z", "b"), "")
			if got := counter(h.m.LastClusterLookup, "skipped"); got != 1 {
				t.Errorf("skipped lookups %v, want 1 (the first turn)", got)
			}
			if got := counter(h.m.LastClusterLookup, "hit") + counter(h.m.LastClusterLookup, "miss"); got != 4 {
				t.Errorf("lookups %v, want 4", got)
			}
			if store.Len() != 2 {
				t.Errorf("store holds %d entries, want one per conversation", store.Len())
			}
			continue
		}
		turn(chatTurn("sys", "a", "b"), "")
		if store.Len() != 0 {
			t.Errorf("anchor off: store holds %d entries", store.Len())
		}
	}
}
