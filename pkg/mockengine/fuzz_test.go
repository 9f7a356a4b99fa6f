package mockengine

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/openai"
)

// FuzzDecodeRequest feeds arbitrary bodies to every request decoder (chat,
// completions, responses, embeddings): they must never panic, must refuse
// a body that is not JSON, must either accept with a model and a prompt or
// refuse with a 400 OpenAI error, and what they accept must agree with
// encoding/json's reading of the body (checkAccepted); an accepted prompt
// must tokenise into at least one token.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":null}],"max_completion_tokens":3,"tools":[{"type":"function"}]}`,
		`{"model":"m","prompt":"once"}`,
		`{"model":"m","prompt":["once"],"max_tokens":2}`,
		`{"model":"m","prompt":[1,2]}`,
		`{"model":"m","input":"hi","instructions":"sys","max_output_tokens":4,"stream":true}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},{"type":"function_call_output","call_id":"c","output":"1"},"s"]}`,
		`{"model":"m","input":["a","b"],"encoding_format":"base64"}`,
		`{"model":"m","input":[[1,2],[3]],"encoding_format":"float"}`,
		`{"model":"m","input":[]}`,
		`{"model":5}`,
		`{"messages":{}}`,
		`[]`,
		`{`,
		``,
	} {
		f.Add([]byte(seed))
	}
	kv, err := kvcache.New(kvcache.Config{CapacityTokens: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		valid := json.Valid(body)
		for _, parse := range []func([]byte) (*generation, *openai.Error){parseChat, parseCompletion, parseResponses} {
			g, e := parse(body)
			if (g == nil) == (e == nil) {
				t.Fatalf("decoder returned generation %v and error %v", g, e)
			}
			if e != nil {
				if e.Status != 400 || e.Message == "" || e.Type == "" {
					t.Fatalf("refusal %+v is not a 400 OpenAI error", e)
				}
				continue
			}
			if !valid {
				t.Fatalf("%s decoder accepted a body that is not JSON: %q", g.kind, body)
			}
			checkAccepted(t, body, g)
			if g.maxTokens != nil && *g.maxTokens < 1 {
				t.Fatalf("accepted max_tokens %d", *g.maxTokens)
			}
			seq := kv.NewSequence(g.prompt)
			if seq.Tokens() < 1 {
				t.Fatalf("prompt of %d bytes tokenised to %d tokens", len(g.prompt), seq.Tokens())
			}
			lease := kv.Lookup(seq)
			if lease.CachedTokens() > seq.Tokens() {
				t.Fatalf("cached %d > prompt %d", lease.CachedTokens(), seq.Tokens())
			}
			lease.Commit()
			lease.Release(g.replyBytes("ok"))
		}
		emb, e := parseEmbeddings(body)
		if (emb == nil) == (e == nil) {
			t.Fatalf("embeddings decoder returned %v and error %v", emb, e)
		}
		if e != nil {
			if e.Status != 400 || e.Message == "" || e.Type == "" {
				t.Fatalf("embeddings refusal %+v is not a 400 OpenAI error", e)
			}
			return
		}
		var top struct {
			Model string `json:"model"`
		}
		if !valid || json.Unmarshal(body, &top) != nil || emb.model != top.Model {
			t.Fatalf("embeddings accepted %q with model %q; encoding/json reads model %q", body, emb.model, top.Model)
		}
		if emb.model == "" || len(emb.texts) == 0 || len(emb.texts) != len(emb.ids) {
			t.Fatalf("accepted embeddings request %+v", emb)
		}
		for i, text := range emb.texts {
			if text == nil && emb.ids[i] < 1 {
				t.Fatalf("accepted an empty token-id input %d", i)
			}
		}
	})
}

// checkAccepted compares an accepted generation with encoding/json's
// reading of the body: the same non-blank model and stream flag; for chat,
// every message with string content appears in the prompt, in order, as
// "role:content" on its own line; for a completion, the prompt is the
// prompt string (or the one string of an array).
func checkAccepted(t *testing.T, body []byte, g *generation) {
	t.Helper()
	var top struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
		Prompt any `json:"prompt"`
	}
	if err := json.Unmarshal(body, &top); err != nil && g.kind != "responses" {
		// responses bodies may carry a messages or prompt member of any
		// shape; the other two decoded these very members.
		t.Fatalf("%s accepted %q, which encoding/json cannot read: %v", g.kind, body, err)
	}
	if g.model == "" || g.model != top.Model || g.stream != top.Stream {
		t.Fatalf("%s accepted model %q stream %v; encoding/json reads %q %v", g.kind, g.model, g.stream, top.Model, top.Stream)
	}
	switch g.kind {
	case "chat":
		rest := g.prompt
		for i, m := range top.Messages {
			text, ok := m.Content.(string)
			if !ok {
				continue
			}
			line := []byte(m.Role + ":" + text + "\n")
			at := bytes.Index(rest, line)
			if at < 0 {
				t.Fatalf("message %d %q missing from the prompt %q", i, line, g.prompt)
			}
			rest = rest[at+len(line):]
		}
	case "completion":
		want, ok := top.Prompt.(string)
		if arr, isArr := top.Prompt.([]any); isArr && len(arr) == 1 {
			want, ok = arr[0].(string)
		}
		if !ok || string(g.prompt) != want {
			t.Fatalf("completion prompt %q; encoding/json reads %#v", g.prompt, top.Prompt)
		}
	}
}
