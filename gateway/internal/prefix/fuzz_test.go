package prefix

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// FuzzMember checks the raw member scan against encoding/json, whose
// json.RawMessage the engine keeps a chat's tools in.
func FuzzMember(f *testing.F) {
	for _, tc := range realistic {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"tool\u0073":[1],"a":"\"}","tools" : {"x":[{}]} }`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := member(body, "tools")
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return
		}
		want, ok := m["tools"]
		if ok != (got != nil) || !bytes.Equal(bytes.TrimSpace(want), got) {
			t.Fatalf("member = %q, encoding/json = %q (%v)", got, want, ok)
		}
	})
}

// surrogateEscape finds \uD800-\uDFFF escapes: encoding/json turns an
// unpaired one into U+FFFD, the gateway's parser keeps it as written.
var surrogateEscape = regexp.MustCompile(`(?i)\\u[d][89a-f]`)

// engineFields are the struct fields the engine decodes with
// encoding/json, which also matches their names in another letter case.
var engineFields = []string{"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "tools", "role", "content", "prompt", "input", "instructions", "max_output_tokens", "include_usage"}

// outsideContract reports the bodies whose prompt the gateway does not
// promise to render as the engine does (docs/design/prefix-summary.md#limits):
// unpaired surrogate escapes, duplicate keys and keys the engine matches
// case-insensitively.
func outsideContract(body []byte) bool {
	if surrogateEscape.Match(body) {
		return true
	}
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return true
	}
	return oddKeys(v)
}

func oddKeys(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		seen := map[string]bool{}
		odd := false
		o.Visit(func(k []byte, c *fastjson.Value) {
			key := string(k)
			if seen[key] || oddKeys(c) {
				odd = true
			}
			seen[key] = true
			for _, f := range engineFields {
				if key != f && strings.EqualFold(key, f) {
					odd = true
				}
			}
		})
		return odd
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, c := range a {
			if oddKeys(c) {
				return true
			}
		}
	}
	return false
}

// FuzzRenderMatchesEngine: no body makes the summary panic, every header
// made parses at the hub, and whenever both the gateway and the engine
// accept a body within the contract, both render the same prompt bytes.
func FuzzRenderMatchesEngine(f *testing.F) {
	for _, tc := range realistic {
		f.Add(uint8(tc.ep), []byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		e := request.Endpoint(ep % 4)
		r, oe := request.Parse(e, body)
		if oe != nil {
			return
		}
		if h := Header(r, body); h != "" {
			if _, err := prefixhash.ParseHeader(h); err != nil {
				t.Fatalf("header %q does not parse: %v", h, err)
			}
		}
		prompt, err := mockengine.RenderPrompt(e.Path(), body)
		if err != nil || outsideContract(body) {
			return
		}
		var rendered bytes.Buffer
		s := getScratch()
		ok := s.render(&rendered, r, body)
		putScratch(s)
		if !ok || !bytes.Equal(rendered.Bytes(), prompt) {
			t.Fatalf("gateway renders (ok=%v)\n%q\nengine renders\n%q", ok, rendered.Bytes(), prompt)
		}
	})
}
