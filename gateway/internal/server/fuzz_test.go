package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stargate-router/stargate/gateway/internal/config"
	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// FuzzPrepare: whatever the body, the x-multi-turn-session-id and
// x-request-id headers and the routing-key mode, the gateway's
// preparation never panics, refuses only with 400, and the hub request it
// builds holds only well-formed header values. For a body encoding/json
// reads unambiguously it also agrees with an independent reading of the
// contract (docs/gateway.md#sessions-and-hub-facing-headers): the request
// id the middleware accepted, x-model and x-routing-key from the body's
// model, the session precedence behind x-cache-affinity-key, and a hub
// body that equals the client's except for the members the gateway must
// set (stream, stream_options.include_usage, the routed model).
func FuzzPrepare(f *testing.F) {
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), "sess", "rid", true)
	f.Add(1, []byte(`{"model":"fn/m","input":"x","conversation":{"id":"c"},"stream":false}`), "mt:v1:x:"+strings.Repeat("0", 64), "", false)
	f.Add(2, []byte(`{"model":"m","prompt":"p","max_tokens":3}`), " \t", "\x00", true)
	f.Add(3, []byte(`{"model":"m","input":["a"]}`), "", "", false)
	f.Add(0, []byte(`{"model":"rk/lim","stream":true,"stream_options":{"x":1},"messages":[{"role":"user","content":"a\u00e9"}],"prompt_cache_key":"k"}`), " h ", "req-7", true)
	f.Add(1, []byte(`{"model":"lim","input":[{"role":"user","content":"x"}],"conversation":"conv-1","stream_options":5}`), "", "r", false)
	f.Add(2, []byte(`{"model":"0A1B2C3D-0000-1111-2222-333344445555/m","prompt":"x"}`), "", "", true)
	f.Add(3, []byte(`{"model":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxX/m","input":"x"}`), "", "", true)
	models := config.Models{"*": {RequestSLOMs: 10}, "lim": {TokensPerMinute: 100}}
	f.Fuzz(func(t *testing.T, e int, body []byte, sess, rid string, prefix bool) {
		ep := request.Endpoint(((e % 4) + 4) % 4)
		h := http.Header{}
		if sess != "" {
			h.Set(headers.MultiTurnSessionID, sess)
		}
		// The request id reaches Prepare through the observe middleware:
		// the client's when valid, a generated one otherwise.
		id, err := headers.ParseRequestID(rid)
		if err != nil {
			id = "generated-id"
		}
		p, oe := Prepare(ep, body, h, id, Options{RoutingKeyPrefix: prefix, Models: models, DefaultMaxOutputTokens: 1, Limiting: true, PromptPrefix: true, Anchor: true})
		if oe != nil {
			if oe.Status != 400 {
				t.Fatalf("status %d", oe.Status)
			}
			return
		}
		out := p.Out.Header()
		for k, vs := range out {
			for _, v := range vs {
				if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
					t.Fatalf("header %s has a control byte in %q", k, v)
				}
			}
		}
		if _, err := headers.ParseUint64(headers.InputTokens, out.Get(headers.InputTokens)); err != nil {
			t.Fatalf("x-input-tokens: %v", err)
		}
		if got := out.Get(headers.RequestID); got != id {
			t.Fatalf("x-request-id %q, want %q", got, id)
		}
		if v := out.Get(headers.StargatePromptPrefix); v != "" {
			if _, err := prefixhash.ParseHeader(v); err != nil {
				t.Fatalf("x-stargate-prompt-prefix %q: %v", v, err)
			}
		}
		want, ok := prepareOracle(ep, body, sess, prefix, models)
		if !ok {
			return
		}
		if out.Get(headers.Model) != want.model || out.Get(headers.RoutingKey) != want.routingKey {
			t.Fatalf("x-model %q x-routing-key %q, want %q %q", out.Get(headers.Model), out.Get(headers.RoutingKey), want.model, want.routingKey)
		}
		if ak := out.Get(headers.CacheAffinityKey); want.affinity != "" && ak != want.affinity ||
			want.payloadKey && !strings.HasPrefix(ak, "mt:v1:payload:") || ep == request.Embeddings && ak != "" {
			t.Fatalf("x-cache-affinity-key %q, want %q (payload key %v)", ak, want.affinity, want.payloadKey)
		}
		if accept := out.Get("Accept"); (accept == "text/event-stream") != want.stream {
			t.Fatalf("Accept %q, want a stream: %v", accept, want.stream)
		}
		if p.DropUsageChunk != want.dropUsage {
			t.Fatalf("DropUsageChunk %v, want %v", p.DropUsageChunk, want.dropUsage)
		}
		var sent map[string]any
		if err := json.Unmarshal(p.Body, &sent); err != nil || !reflect.DeepEqual(sent, want.body) {
			t.Fatalf("hub body %s (%v)\nwant the client's body with the gateway's members: %v", p.Body, err, want.body)
		}
	})
}

// prepared is what the gateway must build for a body.
type prepared struct {
	model, routingKey string
	// affinity is the expected x-cache-affinity-key; payloadKey says a
	// payload key (a hash this oracle does not recompute) is expected.
	affinity   string
	payloadKey bool
	// stream: the hub is asked for a stream; dropUsage: the usage chunk
	// the gateway asked for on the client's behalf is dropped.
	stream, dropUsage bool
	// body is the hub body, decoded.
	body map[string]any
}

// prepareOracle reads an accepted body with encoding/json and states what
// the gateway sends for it; ok is false when the body is not one the two
// decoders read alike (see parsedAlike).
func prepareOracle(ep request.Endpoint, body []byte, sess string, prefix bool, models config.Models) (w prepared, ok bool) {
	var top map[string]any
	if !parsedAlike(body) || json.Unmarshal(body, &top) != nil {
		return w, false
	}
	model, _ := top["model"].(string)
	w.model = model
	if prefix {
		w.routingKey, w.model, _ = strings.Cut(model, "/")
		if uuidForm.MatchString(w.routingKey) {
			w.routingKey = strings.ToLower(w.routingKey) // a UUID routing key is lower-cased
		}
	}
	if ep != request.Embeddings {
		w.affinity, w.payloadKey = affinityOracle(ep, top, sess)
	}
	stream, _ := top["stream"].(bool)
	so, soIsObject := top["stream_options"].(map[string]any)
	includeUsage, _ := so["include_usage"].(bool)
	forceStream := !stream && (ep == request.Chat || ep == request.Responses)
	addUsage := ep == request.Chat && (forceStream || stream && !includeUsage && models.For(w.model).TokensPerMinute > 0)
	w.stream, w.dropUsage = stream || forceStream, stream && addUsage
	w.body = top
	if forceStream {
		w.body["stream"] = true
	}
	if addUsage {
		if !soIsObject {
			so = map[string]any{}
		}
		so["include_usage"] = true
		w.body["stream_options"] = so
	}
	if prefix {
		w.body["model"] = w.model
	}
	return w, true
}

// affinityOracle is the session precedence: prompt_cache_key, then (on
// Responses) the conversation id, then the header (trimmed; sent verbatim
// when it already is an affinity key), then a payload key.
func affinityOracle(ep request.Endpoint, top map[string]any, sess string) (key string, payload bool) {
	hashed := func(id string) string {
		sum := sha256.Sum256([]byte(id))
		return "mt:v1:session:" + hex.EncodeToString(sum[:])
	}
	if pck, _ := top["prompt_cache_key"].(string); pck != "" {
		return hashed(pck), false
	}
	if ep == request.Responses {
		conv, _ := top["conversation"].(string)
		if obj, ok := top["conversation"].(map[string]any); ok {
			conv, _ = obj["id"].(string)
		}
		if conv != "" {
			return hashed(conv), false
		}
	}
	if sess != "" {
		h := strings.TrimSpace(sess)
		if affinityKey.MatchString(h) {
			return h, false
		}
		return hashed(h), false
	}
	return "", true
}

var (
	// affinityKey is an affinity key's shape: mt:v1:<kind>:<64 hex>.
	affinityKey = regexp.MustCompile(`^mt:v1:[^:]*:[0-9a-fA-F]{64}$`)
	// uuidForm is a UUID in its 8-4-4-4-12 hex form.
	uuidForm = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	// surrogateEscape matches a \u escape of a UTF-16 surrogate.
	surrogateEscape = regexp.MustCompile(`(?i)\\ud[89a-f]`)
)

// parsedAlike reports whether fastjson (the gateway) and encoding/json
// (the oracle) read body the same way: valid JSON and UTF-8, no surrogate
// escapes (encoding/json turns a lone one into U+FFFD, fastjson keeps its
// text), and no object anywhere that repeats a member (fastjson keeps the
// first value, encoding/json the last).
func parsedAlike(body []byte) bool {
	if !json.Valid(body) || !utf8.Valid(body) || surrogateEscape.Match(body) {
		return false
	}
	return membersOnce(json.NewDecoder(bytes.NewReader(body)))
}

// membersOnce reads one JSON value from dec and reports whether none of
// its objects repeats a member.
func membersOnce(dec *json.Decoder) bool {
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return false
			}
			k, _ := name.(string)
			if seen[k] || !membersOnce(dec) {
				return false
			}
			seen[k] = true
		}
	case json.Delim('['):
		for dec.More() {
			if !membersOnce(dec) {
				return false
			}
		}
	default:
		return true
	}
	_, err = dec.Token() // the closing delimiter
	return err == nil
}

// TestPrepareAcceptFollowsStream: the hub is asked for a stream exactly
// when the client asked for one or the gateway forces one (chat and
// Responses); a rewrite for the routed model alone changes nothing else.
// The forced stream, and only it, is marked aggregated
// (x-stargate-aggregated: true), whatever the client's headers say.
func TestPrepareAcceptFollowsStream(t *testing.T) {
	for _, tc := range []struct {
		ep         request.Endpoint
		body       string
		want       string
		aggregated string
	}{
		{request.Embeddings, `{"model":"rk/m","input":"x"}`, "application/json", ""},
		{request.Completions, `{"model":"rk/m","prompt":"x"}`, "application/json", ""},
		{request.Completions, `{"model":"rk/m","prompt":"x","stream":true}`, "text/event-stream", ""},
		{request.Chat, `{"model":"rk/m","messages":[{"role":"user","content":"x"}]}`, "text/event-stream", "true"},
		{request.Chat, `{"model":"rk/m","messages":[{"role":"user","content":"x"}],"stream":false}`, "text/event-stream", "true"},
		{request.Chat, `{"model":"rk/m","messages":[{"role":"user","content":"x"}],"stream":true}`, "text/event-stream", ""},
		{request.Responses, `{"model":"rk/m","input":"x"}`, "text/event-stream", "true"},
		{request.Responses, `{"model":"rk/m","input":"x","stream":true}`, "text/event-stream", ""},
	} {
		in := http.Header{}
		in.Set(headers.StargateAggregated, "true") // a client's copy never counts
		p, oe := Prepare(tc.ep, []byte(tc.body), in, "r", Options{RoutingKeyPrefix: true, DefaultMaxOutputTokens: 1, PromptPrefix: true})
		if oe != nil {
			t.Fatal(oe)
		}
		out := p.Out.Header()
		if got := out.Get("Accept"); got != tc.want {
			t.Errorf("%v %s: Accept %q, want %q", tc.ep, tc.body, got, tc.want)
		}
		if got := out.Values(headers.StargateAggregated); strings.Join(got, ",") != tc.aggregated {
			t.Errorf("%v %s: %s %q, want %q", tc.ep, tc.body, headers.StargateAggregated, got, tc.aggregated)
		}
	}
}
