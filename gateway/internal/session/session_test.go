package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func ptr(s string) *string { return &s }

func TestDerivePrecedenceAndVectors(t *testing.T) {
	payload := func(dst []byte) ([]byte, int) { return append(dst, `[{"role":"user","content":"hello"}]`...), -1 }
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

// FuzzDerive: whatever the sources, Derive agrees with an independent
// reading of the session rules (docs/design/sessions.md#session-sources):
// a set header is trimmed and must be a valid id even when a body source
// wins; then the first non-empty of prompt_cache_key and conversation id,
// which must be valid, then the header, then the payload hash (none
// without a payload). Ids are hashed into mt:v1:session:<sha256>, except a
// header that already is an affinity key, sent verbatim; a payload
// session's id is its key.
func FuzzDerive(f *testing.F) {
	f.Add("abc", "", "", true, []byte("p"), false, -1, false)
	f.Add("", "conv", " h ", true, []byte(nil), false, -1, false)
	f.Add("", "", "mt:v1:x:"+strings.Repeat("0", 64), true, []byte("[]"), false, -1, false)
	f.Add("\x00", "", "", false, []byte("x"), false, -1, false)
	f.Add("", "", "", false, []byte(`[{"role":"user","content":"hi"}]`), false, -1, false)
	f.Add("", "", "", false, []byte(nil), true, -1, false)
	f.Add("", "", " mt:v1:session:"+strings.Repeat("Ab", 32)+"\t", true, []byte(nil), false, 0, false)
	f.Add("", "", "", false, []byte(`[{"role":"user","content":"hi"},{"role":"user","content":"again"}]`), false, 31, true)
	f.Add("", "", "", false, []byte(`[{"role":"user","content":"hi"}]`), false, 31, true)
	f.Fuzz(func(t *testing.T, pck, conv, header string, headerSet bool, payload []byte, noPayload bool, anchorEnd int, anchor bool) {
		in := Inputs{Header: header, HeaderSet: headerSet, Anchor: anchor,
			Payload: func(dst []byte) ([]byte, int) { return append(dst, payload...), anchorEnd }}
		if noPayload {
			in.Payload = nil
		}
		if pck != "" {
			in.PromptCacheKey = &pck
		}
		if conv != "" {
			in.ConversationID = &conv
		}
		want, wantErr := deriveOracle(pck, conv, header, headerSet, payload, noPayload)
		if want.Source == SourcePayload && anchor && anchorEnd >= 0 && anchorEnd <= len(payload) {
			want.Anchor = Anchor{Key: "ca:v1:" + hex.EncodeToString(sha256Of(payload[:anchorEnd])), Later: len(payload)-anchorEnd > 1}
		}
		got, err := Derive(in)
		if wantErr != "" {
			var se *Error
			if !errors.As(err, &se) || se.Param != wantErr {
				t.Fatalf("Derive = %+v, %v; want a *session.Error about %s", got, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("Derive = %+v, %v; want %+v", got, err, want)
		}
	})
}

// deriveOracle states the session rules without the package's helpers;
// wantErr is the parameter a refusal names.
func deriveOracle(pck, conv, header string, headerSet bool, payload []byte, noPayload bool) (s Session, wantErr string) {
	valid := func(id string) bool {
		if id == "" || len(id) > 256 || !utf8.ValidString(id) {
			return false
		}
		return !strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f })
	}
	hashed := func(kind string, b []byte) string {
		sum := sha256.Sum256(b)
		return "mt:v1:" + kind + ":" + hex.EncodeToString(sum[:])
	}
	h := strings.TrimSpace(header)
	if headerSet && !valid(h) {
		return Session{}, "x-multi-turn-session-id"
	}
	switch {
	case pck != "":
		if !valid(pck) {
			return Session{}, "prompt_cache_key"
		}
		return Session{ID: pck, Source: SourcePromptCacheKey, AffinityKey: hashed("session", []byte(pck))}, ""
	case conv != "":
		if !valid(conv) {
			return Session{}, "conversation_id"
		}
		return Session{ID: conv, Source: SourceConversationID, AffinityKey: hashed("session", []byte(conv))}, ""
	case headerSet:
		key := hashed("session", []byte(h))
		if affinityKeyRE.MatchString(h) {
			key = h
		}
		return Session{ID: h, Source: SourceHeader, AffinityKey: key}, ""
	case noPayload:
		return Session{}, ""
	default:
		key := hashed("payload", payload)
		return Session{ID: key, Source: SourcePayload, AffinityKey: key}, ""
	}
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// affinityKeyRE is an affinity key's shape: mt:v1:<kind>:<64 hex digits>.
var affinityKeyRE = regexp.MustCompile(`^mt:v1:[^:]*:[0-9a-fA-F]{64}$`)
