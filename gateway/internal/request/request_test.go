package request

import (
	"encoding/json"
	"strings"
	"testing"
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

// FuzzParse: no body panics any endpoint's parser; an accepted body has a
// model, and the payload of a valid body is valid JSON.
func FuzzParse(f *testing.F) {
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"k"}`))
	f.Add(1, []byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"conversation":{"id":"c"}}`))
	f.Add(2, []byte(`{"model":"m","prompt":["a","b"]}`))
	f.Add(3, []byte(`{"model":"m","input":[[1,2],[3]]}`))
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{}],"stop":["a"]}`))
	f.Fuzz(func(t *testing.T, e int, body []byte) {
		ep := Endpoint(((e % 4) + 4) % 4)
		r, oe := Parse(ep, body)
		if oe != nil {
			if oe.Status != 400 {
				t.Fatalf("status %d", oe.Status)
			}
			return
		}
		if r.Model == "" {
			t.Fatal("accepted without a model")
		}
		// fastjson accepts a few invalid number spellings (000) and keeps
		// them raw, so validity is only promised for valid bodies; the
		// engine rejects the others.
		if p := r.Payload(); p != nil && json.Valid(body) && !json.Valid(p) {
			t.Fatalf("payload %q is not JSON", p)
		}
	})
}

// FuzzAppendString: the payload string encoder matches encoding/json byte
// for byte, so payload keys do not depend on which path encoded them.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "hello", "a\"b\\c\n\r\t<>&\x00\x1f", "é", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}
