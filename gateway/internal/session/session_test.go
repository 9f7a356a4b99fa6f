package session

import (
	"errors"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestDerivePrecedenceAndVectors(t *testing.T) {
	payload := func() []byte { return []byte(`[{"role":"user","content":"hello"}]`) }
	cases := []struct {
		name    string
		in      Inputs
		id      string
		src     Source
		key     string
		wantErr bool
	}{
		{"prompt_cache_key wins", Inputs{PromptCacheKey: ptr("abc"), ConversationID: ptr("c"), Header: "h", HeaderSet: true, Payload: payload},
			"abc", SourcePromptCacheKey, "mt:v1:session:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false},
		{"conversation next", Inputs{PromptCacheKey: ptr(""), ConversationID: ptr("abc"), Header: "h", HeaderSet: true},
			"abc", SourceConversationID, "mt:v1:session:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false},
		{"header trimmed and hashed", Inputs{Header: "  abc ", HeaderSet: true, Payload: payload},
			"abc", SourceHeader, "mt:v1:session:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false},
		{"header affinity key verbatim", Inputs{Header: "mt:v1:payload:" + strings.Repeat("AB", 32), HeaderSet: true},
			"mt:v1:payload:" + strings.Repeat("AB", 32), SourceHeader, "mt:v1:payload:" + strings.Repeat("AB", 32), false},
		{"body affinity-looking value still hashed", Inputs{PromptCacheKey: ptr("mt:v1:session:" + strings.Repeat("a", 64))},
			"mt:v1:session:" + strings.Repeat("a", 64), SourcePromptCacheKey, Hashed("session", "mt:v1:session:"+strings.Repeat("a", 64)), false},
		{"payload vector", Inputs{Payload: payload},
			"mt:v1:payload:e920b204bce6401c9e1a506f434853899fabada37ae5ad9033d8937eda0ba853", SourcePayload,
			"mt:v1:payload:e920b204bce6401c9e1a506f434853899fabada37ae5ad9033d8937eda0ba853", false},
		{"no session", Inputs{}, "", SourceNone, "", false},
		{"invalid header fails first", Inputs{PromptCacheKey: ptr("ok"), Header: "a\x01", HeaderSet: true}, "", "", "", true},
		{"blank header invalid", Inputs{Header: "  ", HeaderSet: true}, "", "", "", true},
		{"long body id", Inputs{PromptCacheKey: ptr(strings.Repeat("a", 257))}, "", "", "", true},
		{"DEL in body id", Inputs{ConversationID: ptr("a\x7f")}, "", "", "", true},
		{"non-ASCII ok", Inputs{PromptCacheKey: ptr("sessão")}, "sessão", SourcePromptCacheKey, Hashed("session", "sessão"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Derive(c.in)
			if c.wantErr {
				var se *Error
				if !errors.As(err, &se) {
					t.Fatalf("err = %v, want *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.ID != c.id || s.Source != c.src || s.AffinityKey != c.key {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

func TestEligible(t *testing.T) {
	for src, want := range map[Source]bool{SourcePromptCacheKey: true, SourceConversationID: true, SourceHeader: true, SourcePayload: false, SourceNone: false} {
		if src.Eligible() != want {
			t.Errorf("%q eligible = %v", src, !want)
		}
	}
}

// FuzzDerive: no input panics; a derived session always has a valid id
// and a well-formed affinity key, and header validation matches Validate.
func FuzzDerive(f *testing.F) {
	f.Add("abc", "", "", true)
	f.Add("", "conv", " h ", true)
	f.Add("", "", "mt:v1:x:"+strings.Repeat("0", 64), true)
	f.Add("\x00", "", "", false)
	f.Fuzz(func(t *testing.T, pck, conv, header string, headerSet bool) {
		in := Inputs{Header: header, HeaderSet: headerSet, Payload: func() []byte { return []byte(pck + conv) }}
		if pck != "" {
			in.PromptCacheKey = &pck
		}
		if conv != "" {
			in.ConversationID = &conv
		}
		s, err := Derive(in)
		if err != nil {
			return
		}
		if !IsAffinityKey(s.AffinityKey) {
			t.Fatalf("affinity key %q malformed", s.AffinityKey)
		}
		if s.Source != SourcePayload {
			if verr := Validate(s.ID); verr != nil {
				t.Fatalf("session id %q invalid: %v", s.ID, verr)
			}
		}
	})
}
