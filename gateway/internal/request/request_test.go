package request

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseFields(t *testing.T) {
	r, oe := Parse(Chat, []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"prompt_cache_key":"k","max_tokens":7,"messages":[{"role":"user","content":"hello"}],"unknown":1}`))
	if oe != nil {
		t.Fatal(oe)
	}
	if r.Model != "m" || !r.Stream || !r.IncludeUsage || *r.PromptCacheKey != "k" || r.MaxOutput != 7 || len(r.Chat.Messages) != 1 {
		t.Fatalf("%+v", r)
	}
	if got := string(r.Payload()); got != `[{"role":"user","content":"hello"}]` {
		t.Fatalf("payload %s", got)
	}
	r, _ = Parse(Chat, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`))
	if got := string(r.Payload()); got != `[{"role":"user","content":"hello"}]` {
		t.Fatalf("single text part payload %s", got)
	}
	r, oe = Parse(Responses, []byte(`{"model":"m","input":"hi","conversation":{"id":"c1"},"max_output_tokens":5}`))
	if oe != nil || *r.ConversationID != "c1" || r.MaxOutput != 5 || string(r.Payload()) != `[{"role":"user","content":"hi"}]` {
		t.Fatalf("%+v %v", r, oe)
	}
	r, _ = Parse(Responses, []byte(`{"model":"m","input":[{"role":"user","content":"hi"}],"conversation":"c2"}`))
	if *r.ConversationID != "c2" {
		t.Fatal("string conversation")
	}
	for _, bad := range []struct {
		e    Endpoint
		body string
	}{
		{Chat, `{"messages":[{"role":"user","content":"x"}]}`},
		{Chat, `{"model":"m","messages":[]}`},
		{Chat, `{"model":"m","messages":[{"content":"x"}]}`},
		{Chat, `{"model":5}`},
		{Responses, `{"model":"m"}`},
		{Responses, `{"model":"m","input":"x","conversation":5}`},
		{Completions, `{"model":"m"}`},
		{Embeddings, `{"model":"m","input":[]}`},
		{Embeddings, `{"model":"m","input":["a",""]}`},
		{Embeddings, `{"model":"m","input":[` + strings.Repeat(`"a",`, 2048) + `"a"]}`},
		{Chat, `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`},
	} {
		if _, oe := Parse(bad.e, []byte(bad.body)); oe == nil || oe.Status != 400 {
			t.Errorf("%v %s: want 400, got %v", bad.e, bad.body, oe)
		}
	}
	// A model name is forwarded as the x-model header: control bytes are
	// refused with a message naming the field and the byte.
	for _, m := range []string{`fn/m\u0018`, `\u0018`, `fn/m\tx`, `fn/\u007f`} {
		_, oe := Parse(Chat, []byte(`{"model":"`+m+`","messages":[{"role":"user","content":"x"}]}`))
		if oe == nil || oe.Status != 400 || oe.Param != "model" || !strings.Contains(oe.Message, "control characters") {
			t.Errorf("model %s: want 400 naming model and control characters, got %+v", m, oe)
		}
	}
	if _, oe := Parse(Chat, []byte(`{"model":"fn/modèle-ü","messages":[{"role":"user","content":"x"}]}`)); oe != nil {
		t.Errorf("a non-ASCII model name was refused: %v", oe)
	}
	r, _ = Parse(Embeddings, []byte(`{"model":"m","input":[1,2,3]}`))
	if len(r.Inputs) != 1 {
		t.Errorf("token-id input counted as %d inputs", len(r.Inputs))
	}
}

func TestSplitModel(t *testing.T) {
	rk, m, oe := SplitModel("fn/meta/llama")
	if oe != nil || rk != "fn" || m != "meta/llama" {
		t.Fatal(rk, m, oe)
	}
	rk, _, _ = SplitModel("0A1B2C3D-0000-1111-2222-333344445555/m")
	if rk != "0a1b2c3d-0000-1111-2222-333344445555" {
		t.Fatal(rk)
	}
	for _, bad := range []string{"m", "/m", "fn/"} {
		if _, _, oe := SplitModel(bad); oe == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRewriteForceStream(t *testing.T) {
	b, err := Rewrite([]byte(`{"model":"fn/m","stream":false,"stream_options":{"x":1},"keep":[1],"prompt":"p"}`), true, true, "m")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"model":"m","stream":true,"stream_options":{"x":1,"include_usage":true},"keep":[1],"prompt":"p"}` {
		t.Fatal(string(b))
	}
	// Escapes survive byte for byte.
	b, _ = Rewrite([]byte(`{"model":"m","messages":[{"role":"user","content":"a\u00e9\n"}]}`), true, false, "")
	if string(b) != `{"model":"m","messages":[{"role":"user","content":"a\u00e9\n"}],"stream":true}` {
		t.Fatal(string(b))
	}
}

// FuzzParse: no body panics any endpoint's parser, and a valid JSON body
// whose members are not repeated (fastjson keeps a repeated key's first
// value, encoding/json its last, so they cannot be compared there) parses
// to what encoding/json reads from it: the model is a non-empty string
// without control characters (else the body is refused), and model,
// stream, stream_options.include_usage, prompt_cache_key and the output
// maximum (the first non-zero of max_completion_tokens, max_tokens,
// max_output_tokens) are the decoded values. The payload of an accepted
// body is valid JSON.
func FuzzParse(f *testing.F) {
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"k"}`))
	f.Add(1, []byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"conversation":{"id":"c"}}`))
	f.Add(2, []byte(`{"model":"m","prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true},"max_tokens":0,"max_output_tokens":7}`))
	f.Add(3, []byte(`{"model":"m","input":[[1,2],[3]]}`))
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{}],"stop":["a"]}`))
	f.Add(0, []byte(`{"model":"m\u0007","messages":[{"role":"user","content":"x"}]}`))
	f.Add(1, []byte(`{"model":"m","input":"x","max_completion_tokens":5,"max_tokens":9,"prompt_cache_key":"p\u00e9"}`))
	f.Add(0, []byte("{\"model\":\"a\xffb\",\"messages\":[{\"role\":\"u\",\"content\":\"\\ud800\"}]}"))
	f.Fuzz(func(t *testing.T, e int, body []byte) {
		ep := Endpoint(((e % 4) + 4) % 4)
		r, oe := Parse(ep, body)
		if oe != nil && oe.Status != 400 {
			t.Fatalf("status %d", oe.Status)
		}
		if oe == nil && r.Model == "" {
			t.Fatal("accepted without a model")
		}
		// fastjson accepts a few invalid number spellings (000) and keeps
		// them raw, so validity is only promised for valid bodies; the
		// engine rejects the others.
		if oe == nil && json.Valid(body) {
			if p := r.Payload(); p != nil && !json.Valid(p) {
				t.Fatalf("payload %q is not JSON", p)
			}
		}
		// The appending form, which the session hashes in a reused
		// buffer, lays out the same bytes after whatever dst held.
		if oe == nil {
			got, end := r.AppendPayload([]byte("x"))
			if want := "x" + string(r.Payload()); string(got) != want {
				t.Fatalf("AppendPayload %q, want %q", got, want)
			}
			// The anchor ends where a user message ends: the next byte
			// closes the array or starts another item.
			if end >= 0 && (end < 2 || end >= len(got) || got[end-1] != '}' || got[end] != ']' && got[end] != ',') {
				t.Fatalf("anchor end %d in %q", end, got)
			}
			if (end >= 0) != hasUser(r) {
				t.Fatalf("anchor end %d, user message %v", end, hasUser(r))
			}
		}
		want, ok := parseOracle(body)
		if !ok {
			return
		}
		if !want.modelOK {
			if oe == nil {
				t.Fatalf("accepted a body whose model is missing, empty, not a string or has a control character: %s", body)
			}
			return
		}
		if oe != nil {
			return // refused for a field the oracle does not read
		}
		pck := ""
		if r.PromptCacheKey != nil {
			pck = *r.PromptCacheKey
		}
		if ep == Embeddings {
			want.pck = ""
		}
		if r.Model != want.model || r.Stream != want.stream || r.IncludeUsage != want.includeUsage || pck != want.pck ||
			want.maxKnown && r.MaxOutput != want.maxOutput {
			t.Fatalf("%s parsed to model %q stream %v usage %v pck %q max %d; encoding/json reads %+v",
				body, r.Model, r.Stream, r.IncludeUsage, pck, r.MaxOutput, want)
		}
	})
}

// parsed is what encoding/json reads from a body's common fields.
type parsed struct {
	model                string
	modelOK              bool
	stream, includeUsage bool
	pck                  string
	maxOutput            int64
	maxKnown             bool
}

// parseOracle decodes body with encoding/json; ok is false when the body
// is not a JSON object, repeats a member of it or of stream_options, or
// holds text the two decoders treat differently: invalid UTF-8 and
// surrogate escapes (encoding/json turns a lone one into U+FFFD, fastjson
// keeps its six characters).
func parseOracle(body []byte) (p parsed, ok bool) {
	var top map[string]json.RawMessage
	if !json.Valid(body) || !utf8.Valid(body) || surrogateEscape.Match(body) ||
		json.Unmarshal(body, &top) != nil || top == nil || !uniqueMembers(body) {
		return p, false
	}
	if err := json.Unmarshal(top["model"], &p.model); err == nil && top["model"] != nil {
		p.modelOK = p.model != "" && !strings.ContainsFunc(p.model, func(r rune) bool { return r < 0x20 || r == 0x7f })
	}
	var so map[string]json.RawMessage
	if raw := top["stream_options"]; raw != nil && json.Unmarshal(raw, &so) == nil && so != nil {
		if !uniqueMembers(raw) {
			return p, false
		}
		_ = json.Unmarshal(so["include_usage"], &p.includeUsage)
	}
	_ = json.Unmarshal(top["stream"], &p.stream)
	_ = json.Unmarshal(top["prompt_cache_key"], &p.pck)
	p.maxKnown = true
	for _, f := range []string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		var n json.Number
		if raw := top[f]; raw != nil && json.Unmarshal(raw, &n) == nil && n != "" {
			v, err := n.Int64()
			if err != nil {
				p.maxKnown = false
			} else if p.maxOutput == 0 {
				p.maxOutput = v
			}
		}
	}
	return p, true
}

// surrogateEscape matches a \u escape of a UTF-16 surrogate.
var surrogateEscape = regexp.MustCompile(`(?i)\\ud[89a-f]`)

// uniqueMembers reports whether the JSON object b names each member once.
func uniqueMembers(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return false
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return true
}

// FuzzAppendString: the payload string encoder matches encoding/json byte
// for byte, so payload keys do not depend on which path encoded them.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "hello", "a\"b\\c\n\r\t<>&\x00\x1f", "é", "\u2028", "x\u2029y", "a\xffb", "Grüße\xc3", "\xed\xa0\x80<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// hasUser reports whether r's conversation holds a user message: a chat
// message or Responses input item with role user, or a string input.
func hasUser(r *Request) bool {
	var msgs []Message
	switch r.Endpoint {
	case Chat:
		msgs = r.Chat.Messages
	case Responses:
		if r.Resp.InputString != nil {
			return true
		}
		msgs = r.Resp.Items
	}
	for i := range msgs {
		if msgs[i].Role == "user" {
			return true
		}
	}
	return false
}

// TestAnchorEnd: the anchor's bytes end just past the first user
// message, and a Responses input laid out item by item is still the
// client's compact bytes (escapes kept as sent), which the payload key
// must hash unchanged.
func TestAnchorEnd(t *testing.T) {
	for _, c := range []struct {
		e          Endpoint
		body       string
		payload    string
		anchorPart string // payload[:anchorEnd]; "-" for none
	}{
		{Chat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":"v"}]}`,
			`[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":"v"}]`,
			`[{"role":"system","content":"s"},{"role":"user","content":"u"}`},
		{Chat, `{"model":"m","messages":[{"role":"system","content":"s"}]}`, `[{"role":"system","content":"s"}]`, "-"},
		{Responses, `{"model":"m","input":"hi"}`, `[{"role":"user","content":"hi"}]`, `[{"role":"user","content":"hi"}`},
		{Responses, `{"model":"m","input":[ {"type":"reasoning","summary":[]} , {"role":"user","content":"caf\u00e9 \/ <b>"}, {"role":"assistant","content":"x"} ]}`,
			`[{"type":"reasoning","summary":[]},{"role":"user","content":"caf\u00e9 \/ <b>"},{"role":"assistant","content":"x"}]`,
			`[{"type":"reasoning","summary":[]},{"role":"user","content":"caf\u00e9 \/ <b>"}`},
		{Responses, `{"model":"m","input":[{"role":"assistant","content":"x"}]}`, `[{"role":"assistant","content":"x"}]`, "-"},
		{Completions, `{"model":"m","prompt":"p"}`, `"p"`, "-"},
	} {
		r, oe := Parse(c.e, []byte(c.body))
		if oe != nil {
			t.Fatal(oe)
		}
		b, end := r.AppendPayload(nil)
		if string(b) != c.payload || string(r.Payload()) != c.payload {
			t.Errorf("%s: payload %s, want %s", c.body, b, c.payload)
		}
		got := "-"
		if end >= 0 {
			got = string(b[:end])
		}
		if got != c.anchorPart {
			t.Errorf("%s: anchor bytes %s, want %s", c.body, got, c.anchorPart)
		}
	}
}
