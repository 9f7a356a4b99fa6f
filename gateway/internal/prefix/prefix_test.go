package prefix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// para is prompt text long enough to fill several blocks.
var para = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 6)

// realistic are request bodies as SDKs, agents and hand-written curl calls
// send them; each must render byte for byte as the mock engine renders it.
var realistic = []struct {
	name string
	ep   request.Endpoint
	body string
}{
	{"chat multi-turn", request.Chat, `{"model":"m","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + para + `"},{"role":"assistant","content":"` + para + `"},{"role":"user","content":"and then?"}]}`},
	{"chat content parts", request.Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + para + `"},{"type":"image_url","image_url":{"url":"https://example.com/a.png?x=1&y=<2>","detail":"low"}},{"type":"input_text","text":" and "},{"type":"text","text":{"not":"a string"}}]}]}`},
	{"chat tools and tool calls", request.Chat, `{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","description":"Weather <now> & later","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"tool_choice":"auto","messages":[{"role":"user","content":"` + para + `"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"{\"temp\":21.5}"}]}`},
	{"chat pretty-printed with tools", request.Chat, "{\n  \"model\": \"m\",\n  \"tools\": [\n    {\n      \"type\": \"function\",\n      \"function\": {\"name\": \"f\", \"parameters\": {}}\n    }\n  ] ,\n  \"messages\": [\n    {\"role\": \"system\", \"content\": \"" + para + "\"},\n    {\"role\": \"user\", \"content\": [ {\"type\": \"text\", \"text\": \"hi\"} ]}\n  ]\n}\n"},
	{"chat null tools", request.Chat, `{"model":"m","tools":null,"messages":[{"role":"user","content":"` + para + `"}]}`},
	{"chat duplicate tools", request.Chat, `{"model":"m","tools":[{"a":1}],"messages":[{"role":"user","content":"` + para + `"}],"tools":[ {"b":2} ]}`},
	{"chat escapes and unicode", request.Chat, `{"model":"m","messages":[{"role":"user","content":"line\none \"quoted\" \\ back\/slash \u00e9t\u00e9 \ud83d\ude00 emoji <b>&amp;</b> ` + "日本語 " + para + `"},{"role":"assistant","content":"raw ` + "\xff\xfe" + ` bytes ` + para + `"}]}`},
	{"chat numbers in parts", request.Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"` + strings.Repeat("QUJD", 40) + `","format":"wav","rate":16000.0,"gain":1.50,"tiny":1e-7,"big":12345678901234567890}}]}]}`},
	{"chat long conversation", request.Chat, longChat(120)},
	{"responses string input", request.Responses, `{"model":"m","instructions":"Be brief.","input":"` + para + `","stream":true}`},
	{"responses empty instructions", request.Responses, `{"model":"m","instructions":"","input":"` + para + `"}`},
	{"responses null instructions", request.Responses, `{"model":"m","instructions":null,"input":"` + para + `"}`},
	{"responses items", request.Responses, `{"model":"m","instructions":"Use tools.","input":[{"role":"user","content":[{"type":"input_text","text":"` + para + `"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]},{"type":"function_call","call_id":"c1","name":"lookup","arguments":"{\"q\":\"x\"}"},{"type":"function_call_output","call_id":"c1","output":"found <3>"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + para + `","annotations":[]}]},"a plain string item",{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"next"}]}`},
	{"responses item with role and another type", request.Responses, `{"model":"m","input":[{"role":"user","content":"` + para + `"},{"role":"assistant","type":"function_call","name":"f","arguments":"{}"}]}`},
	{"responses pretty-printed", request.Responses, "{\n \"model\": \"m\",\n \"instructions\" : \"" + para + "\",\n \"input\": [ {\"role\": \"user\", \"content\": \"hi\"} ]\n}"},
	{"completions string", request.Completions, `{"model":"m","prompt":"` + para + `\n\nAnswer:","max_tokens":16}`},
	{"completions array of one", request.Completions, `{"model":"m","prompt":["` + para + `"]}`},
}

// longChat is a conversation of turns messages, long enough for the
// summary's stride to grow past 1.
func longChat(turns int) string {
	msgs := make([]map[string]any, 0, turns)
	for i := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("turn %d: %s", i, para)})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return string(b)
}

// engineSummary is what the mock engine caches for body: its kvcache
// Sequence's block hashes, summarised.
func engineSummary(t *testing.T, ep request.Endpoint, body []byte) ([]byte, prefixhash.Summary) {
	t.Helper()
	prompt, err := mockengine.RenderPrompt(ep.Path(), body)
	if err != nil {
		t.Fatalf("the engine refuses the body: %v", err)
	}
	c, err := kvcache.New(kvcache.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return prompt, prefixhash.Summarize(c.NewSequence(prompt).BlockHashes(), kvcache.DefaultBlockTokens)
}

// TestSummaryMatchesEngine: for every realistic body, the gateway renders
// the prompt exactly as the mock engine does, and its summary's hashes are
// the checkpoints of the engine's own block hashes.
func TestSummaryMatchesEngine(t *testing.T) {
	t.Parallel()
	for _, tc := range realistic {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			r, oe := request.Parse(tc.ep, body)
			if oe != nil {
				t.Fatalf("gateway refuses the body: %v", oe)
			}
			prompt, want := engineSummary(t, tc.ep, body)
			var rendered bytes.Buffer
			s := getScratch()
			ok := s.render(&rendered, r, body)
			putScratch(s)
			if !ok || !bytes.Equal(rendered.Bytes(), prompt) {
				t.Fatalf("gateway renders (ok=%v)\n%q\nengine renders\n%q", ok, rendered.Bytes(), prompt)
			}
			got, ok := Summarize(r, body)
			if !ok || want.Empty() {
				t.Fatalf("no summary (ok=%v, engine blocks %d)", ok, want.TotalBlocks)
			}
			if got.TotalBlocks != want.TotalBlocks || got.Stride != want.Stride || got.BlockTokens != want.BlockTokens || !slices.Equal(got.Hashes, want.Hashes) {
				t.Fatalf("summary %+v\nengine  %+v", got, want)
			}
			h := Header(r, body)
			if h != prefixhash.FormatHeader(want) {
				t.Fatalf("Header = %q, want %q", h, prefixhash.FormatHeader(want))
			}
			if _, err := prefixhash.ParseHeader(h); err != nil {
				t.Fatalf("the hub would refuse the header: %v", err)
			}
		})
	}
}

// TestLongChatStride: the long conversation of the table really exercises
// a stride above 1 (more than MaxCheckpoints blocks).
func TestLongChatStride(t *testing.T) {
	t.Parallel()
	body := []byte(longChat(120))
	r, _ := request.Parse(request.Chat, body)
	s, ok := Summarize(r, body)
	if !ok || s.Stride < 8 || len(s.Hashes) > prefixhash.MaxCheckpoints {
		t.Fatalf("%d blocks at stride %d, %d hashes", s.TotalBlocks, s.Stride, len(s.Hashes))
	}
}

// TestNoSummary: no header for what has no cacheable prompt, and none for
// bodies the engine refuses, whose prompt the gateway cannot know.
func TestNoSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ep   request.Endpoint
		body string
	}{
		{"embeddings", request.Embeddings, `{"model":"m","input":"` + para + `"}`},
		{"shorter than a block", request.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"part not an object", request.Chat, `{"model":"m","messages":[{"role":"user","content":["` + para + `"]}]}`},
		{"content a number", request.Chat, `{"model":"m","messages":[{"role":"user","content":"` + para + `"},{"role":"user","content":5}]}`},
		{"responses empty array", request.Responses, `{"model":"m","instructions":"` + para + `","input":[]}`},
		{"responses number item", request.Responses, `{"model":"m","input":["` + para + `",5]}`},
		{"responses empty role", request.Responses, `{"model":"m","input":["` + para + `",{"role":"","content":"x"}]}`},
		{"completions two prompts", request.Completions, `{"model":"m","prompt":["` + para + `","b"]}`},
		{"completions token ids", request.Completions, `{"model":"m","prompt":[1,2,3]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tt.body)
			r, oe := request.Parse(tt.ep, body)
			if oe != nil {
				t.Fatalf("gateway refuses the body: %v", oe)
			}
			if h := Header(r, body); h != "" {
				t.Fatalf("Header = %q, want none", h)
			}
			if tt.ep != request.Embeddings && !strings.Contains(tt.name, "shorter") {
				if _, err := mockengine.RenderPrompt(tt.ep.Path(), body); err == nil {
					t.Fatal("the engine accepts this body, so the gateway should summarise it")
				}
			}
		})
	}
}

// TestGrowingConversation: each turn's summary shares the previous turn's
// checkpoints up to the previous turn's length, which is what lets the hub
// find the cluster that served the previous turn.
func TestGrowingConversation(t *testing.T) {
	t.Parallel()
	var prev prefixhash.Summary
	for turns := 2; turns <= 60; turns += 2 {
		body := []byte(longChat(turns))
		r, _ := request.Parse(request.Chat, body)
		s, _ := Summarize(r, body)
		if turns > 2 {
			shared := 0
			for i := range s.Hashes {
				b := s.Blocks(i)
				if b%s.Stride != 0 || b > prev.TotalBlocks {
					continue
				}
				j := slices.IndexFunc(prev.Hashes, func(h uint64) bool { return h == s.Hashes[i] })
				if j < 0 || prev.Blocks(j) != b {
					t.Fatalf("turn %d: checkpoint at %d blocks is not in the previous turn's summary", turns, b)
				}
				shared++
			}
			if shared == 0 {
				t.Fatalf("turn %d shares no checkpoint with turn %d", turns, turns-2)
			}
		}
		prev = s
	}
}
